"""Issue 39's scale figures: how many policies one operator replica holds.

Usage: .venv/bin/python benchmarks/operator_scale.py [--policies 10,100,300]
       [--period 30] [--window 180] [--json benchmarks/results/operator_scale.json]

Starts a real control plane (tests/testbed: etcd, kube-apiserver, the controller manager,
kwok for the pods) with every request in the API server's audit log, one exporter of
synthetic per-pod Cassandra series for every target, Debian's Prometheus scraping it every
5 s, and ``elastore operator run`` as one process (one replica). Then, for each N in
ascending order, it adds policies up to N: each one its own StatefulSet of 3 kwok pods, an
ElasticPolicy in Recommend with a ``--period`` control period. Once every policy has
decided at least once, it measures over ``--window`` seconds:

* the operator's CPU (cores: its process' user + system time over the window) and RSS
  (the largest of samples every 5 s);
* tick latency p50 and p99, from the operator's own log (every policy's tick, "tick in");
* the share of control periods that started late: from ``elastore_period_lateness_seconds``
  (more than 3 s, a tenth of the default 30-s period, after it fell due);
* API requests/s: the audit log's requests in the window whose user agent is the
  operator's (kopf's and the Kubernetes client's), not kubectl's or kwok's;
* Prometheus queries/s: ``prometheus_http_requests_total`` of the query endpoints.

Targets at 300 (issue 39): tick p99 < 2 s, periods late < 1 %, RSS <= 1 GiB, API requests/s
< 2 per policy. The figures are printed, kept in ``--json`` and quoted in
docs/reliability.md; nothing is asserted (a shared 2-core machine is too noisy for a
wall-clock pass/fail).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from k8s_support import (  # noqa: E402
    CassandraMetrics,
    OperatorProcess,
    Prometheus,
    start_control_plane,
    wait_until,
)

#: pods per target, and the namespaces the targets are spread over (50 per namespace)
PODS, PER_NAMESPACE = 3, 50
#: a period that started more than this after it fell due is late (a tenth of 30 s)
LATE_S = 3.0
#: the user agents of the operator's requests (kopf's aiohttp client, the Kubernetes client)
OPERATOR_AGENTS = ("kopf", "OpenAPI-Generator")
TICK = re.compile(r" tick in ([0-9.]+) s")


class Exporter(CassandraMetrics):
    """The tests' exporter with no spare pods: at 300 targets, 4 spare pods each would
    multiply the series Prometheus scrapes by 7/3."""

    SPARE = 0


def _target(i: int) -> tuple[str, str]:
    return f"scale-{i // PER_NAMESPACE}", f"db{i}"


def _docs(i: int, prom_url: str, period_s: int) -> list[dict[str, Any]]:
    ns, name = _target(i)
    app = {"app": name}
    return [{
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "labels": app},
        "spec": {"replicas": PODS, "serviceName": name, "selector": {"matchLabels": app},
                 "podManagementPolicy": "Parallel",
                 "template": {"metadata": {"labels": app}, "spec": {
                     "containers": [{"name": "cassandra", "image": "cassandra"}]}}},
    }, {
        "apiVersion": "elastore.io/v1alpha1", "kind": "ElasticPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"target": {"name": name, "replicationFactor": 3},
                 "replicas": {"min": 3, "max": 6}, "slo": {"latencyMs": 100},
                 "mode": "Recommend", "controlPeriod": f"{period_s}s",
                 "prediction": {"method": "persistence", "horizon": f"{period_s}s",
                                "step": f"{period_s}s"},
                 "capacityModel": {"learn": False},
                 "metrics": {"prometheus": {"url": prom_url, "rateWindow": "30s"}}},
    }]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_bytes(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) * 1024
    return float("nan")


def _histogram(text: str, name: str) -> dict[str, float]:
    """``le`` -> cumulative count of an unlabelled histogram, and ``count``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{"):
            le = re.search(r'le="([^"]+)"', line)
            if le:
                out[le.group(1)] = float(line.rsplit(" ", 1)[1])
        elif line.startswith(f"{name}_count "):
            out["count"] = float(line.rsplit(" ", 1)[1])
    return out


def _counter(text: str, name: str, label: str) -> dict[str, float]:
    """``label``'s value -> the counter's value, for a counter with one label."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(rf'{name}_total\{{{label}="([^"]*)"\}} (\S+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def _prom_queries(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("prometheus_http_requests_total{") and \
                re.search(r'handler="/api/v1/query(_range)?"', line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _audit_operator(path: Path, offset: int, t0: float, t1: float) -> tuple[int, int]:
    """(the operator's requests between ``t0`` and ``t1`` in the audit log read from
    ``offset``, the new offset)."""
    from datetime import datetime

    n = 0
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    for line in data.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not str(ev.get("userAgent", "")).startswith(OPERATOR_AGENTS):
            continue
        at = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if t0 <= at.timestamp() <= t1:
            n += 1
    return n, offset + len(data)


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    ys = sorted(xs)
    return ys[min(len(ys) - 1, round(q * (len(ys) - 1)))]


def measure(levels: list[int], period_s: int, window_s: float, say: Any = print,
            concurrent_ticks: int | None = None
            ) -> list[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="elastore-scale-"))
    say(f"working in {root}")
    cp = start_control_plane(root / "k8s", audit_requests=True)
    exporter = Exporter(100.0, latency_ms=lambda r: 2.0 + r / 50.0)
    prom = Prometheus(root / "prom", [exporter.target], scrape_interval="5s")
    op = OperatorProcess(cp.kubeconfig, root / "op.log", args=(
        ("--concurrent-ticks", str(concurrent_ticks)) if concurrent_ticks else ()))
    out: list[dict[str, Any]] = []
    made = 0
    try:
        for n in levels:
            t = time.monotonic()
            namespaces = {_target(i)[0] for i in range(made, n)}
            for ns in sorted(namespaces):
                cp.kubectl("create", "namespace", ns, check=False)
            docs = [d for i in range(made, n) for d in _docs(i, prom.url, period_s)]
            for k in range(0, len(docs), 100):
                cp.kubectl("apply", "-f", "-", stdin=json.dumps(
                    {"apiVersion": "v1", "kind": "List", "items": docs[k:k + 100]}))
            with exporter._lock:
                exporter.clusters.update({_target(i): (PODS, PODS) for i in range(n)})
            made = n
            say(f"{n} policies applied in {time.monotonic() - t:.0f} s; waiting for each to "
                "decide")

            def decided(n: int = n) -> bool:
                got = json.loads(cp.kubectl("get", "elasticpolicies", "-A", "-o",
                                            "json").stdout)["items"]
                done = sum(1 for p in got if ((p.get("status") or {}).get("lastDecision")
                                              or {}).get("ok"))
                return done >= n

            wait_until(f"all {n} policies to decide", decided, 600 + 3 * n, every_s=10.0)
            time.sleep(period_s)  # a full period after the last first decision
            say(f"every policy decided ({time.monotonic() - t:.0f} s); measuring "
                f"{window_s:.0f} s")
            log_off = (root / "op.log").stat().st_size
            audit_off = cp.audit_log.stat().st_size
            m0, q0, c0 = op.metrics(), _prom_queries(prom.url), _cpu_s(op.pid)
            t0w, t0 = time.time(), time.monotonic()
            rss: list[float] = []
            while time.monotonic() - t0 < window_s:
                rss.append(_rss_bytes(op.pid))
                time.sleep(5.0)
            t1w, dt = time.time(), time.monotonic() - t0
            m1, q1, c1 = op.metrics(), _prom_queries(prom.url), _cpu_s(op.pid)
            with (root / "op.log").open("rb") as f:
                f.seek(log_off)
                ticks = [float(x) for x in TICK.findall(f.read().decode(errors="replace"))]
            api, _ = _audit_operator(cp.audit_log, audit_off, t0w, t1w)
            h0 = _histogram(m0, "elastore_period_lateness_seconds")
            h1 = _histogram(m1, "elastore_period_lateness_seconds")
            periods = h1.get("count", 0) - h0.get("count", 0)
            f0 = _counter(m0, "elastore_forecast_fits", "fit")
            f1 = _counter(m1, "elastore_forecast_fits", "fit")
            fits = {k: int(f1.get(k, 0) - f0.get(k, 0)) for k in ("kept", "scratch")}
            on_time = h1.get(f"{LATE_S:g}", h1.get(f"{LATE_S}", 0)) - \
                h0.get(f"{LATE_S:g}", h0.get(f"{LATE_S}", 0))
            row = {"policies": n, "window_s": round(dt, 1),
                   "cpu_cores": round((c1 - c0) / dt, 3),
                   "rss_mib": round(max(rss) / 2**20, 1),
                   "ticks": len(ticks), "tick_p50_s": round(_pct(ticks, 0.5), 3),
                   "tick_p99_s": round(_pct(ticks, 0.99), 3),
                   "tick_max_s": round(max(ticks), 3) if ticks else None,
                   "periods": int(periods),
                   "late_share": round((periods - on_time) / periods, 4) if periods else None,
                   "api_requests_per_s": round(api / dt, 2),
                   "api_requests_per_s_per_policy": round(api / dt / n, 3),
                   "prometheus_queries_per_s": round((q1 - q0) / dt, 2),
                   "periods_expected": round(n * dt / period_s),
                   "forecasts_kept": fits["kept"], "forecasts_from_scratch": fits["scratch"]}
            say(json.dumps(row))
            out.append(row)
    finally:
        op.stop()
        prom.close()
        exporter.close()
        cp.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default="10,100,300")
    ap.add_argument("--period", type=int, default=30)
    ap.add_argument("--window", type=float, default=180.0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--concurrent-ticks", type=int, default=None,
                    help="the operator's --concurrent-ticks (default: its own default)")
    args = ap.parse_args()
    levels = sorted({int(x) for x in args.policies.split(",")})
    rows = measure(levels, args.period, args.window, concurrent_ticks=args.concurrent_ticks)
    print("\n| policies | CPU (cores) | RSS (MiB) | tick p50 / p99 (s) | periods late | "
          "API req/s (per policy) | Prometheus queries/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        late = "n/a" if r["late_share"] is None else f"{100 * r['late_share']:.1f} % of " \
                                                      f"{r['periods']}"
        print(f"| {r['policies']} | {r['cpu_cores']:.2f} | {r['rss_mib']:.0f} | "
              f"{r['tick_p50_s']:.2f} / {r['tick_p99_s']:.2f} | {late} | "
              f"{r['api_requests_per_s']:.1f} ({r['api_requests_per_s_per_policy']:.2f}) | "
              f"{r['prometheus_queries_per_s']:.1f} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"period_s": args.period, "rows": rows,
                                         "concurrent_ticks": args.concurrent_ticks,
                                         "median_tick_p99_s": statistics.median(
                                             r["tick_p99_s"] for r in rows)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
