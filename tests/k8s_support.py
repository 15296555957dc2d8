"""Support for the operator's tests on a real control plane (kube-apiserver, etcd,
controller-manager, scheduler, kwok: testbed.k8s) and a real Prometheus.

Everything listens on 127.0.0.1 ports chosen free at start, lives in a directory of the
test run's own, and is stopped by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from testbed.k8s import ControlPlane, free_port

from elastore.units import GIB

REPO = Path(__file__).resolve().parent.parent
CRDS = REPO / "charts" / "elastore" / "crds"
#: what kwok runs for an exec into a test pod (see testbed.podexec)
PODEXEC = REPO / "tests" / "testbed" / "podexec.py"


def wait_until(what: str, check: Callable[[], Any], timeout_s: float,
               every_s: float = 0.5) -> Any:
    end = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < end:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: "
                         f"{last!r})")


def _established(cp: ControlPlane, crd: str) -> bool:
    try:
        doc = cp.get_json(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
    except OSError:  # urllib's errors included: not there yet, or a slow answer
        return False
    conds = (doc.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conds)


def start_control_plane(root: Path, exec_config: str = "", audit_requests: bool = False
                        ) -> ControlPlane:
    """A control plane with the elastore CRDs and the peering object; a component that
    cannot start is a test failure, with its log. ``audit_requests``: every request in
    the API server's audit log (the scale benchmark's count)."""
    cp = ControlPlane(root, exec_config=exec_config, audit_requests=audit_requests)
    try:
        cp.start(print)
        cp.kubectl("apply", "-f", str(CRDS))
        for crd in ("elasticpolicies.elastore.io", "clusterkopfpeerings.kopf.dev"):
            # polled, not `kubectl wait --for=condition=Established`: that fails at once
            # ("status.conditions accessor error: <nil>") when it reads the CRD before the
            # API server has written any condition, which a busy CI machine hit (six tests
            # of one module errored at setup)
            wait_until(f"CRD {crd} Established", lambda crd=crd: _established(cp, crd), 60)
        wait_until("the CRDs to serve", lambda: cp.kubectl(
            "get", "elasticpolicies", "-A", check=False).returncode == 0, 30)
        cp.kubectl("apply", "-f", "-", stdin="apiVersion: kopf.dev/v1\n"
                   "kind: ClusterKopfPeering\nmetadata: {name: elastore}\n")
    except Exception as exc:
        cp.stop()
        pytest.fail(f"the Kubernetes control plane did not come up: {exc}")
    return cp


def statefulset(name: str, namespace: str, replicas: int, *, volume: str | None = None,
                labels: dict[str, str] | None = None, managed: bool = True,
                owner: dict[str, Any] | None = None) -> str:
    """A StatefulSet for kwok; ``managed``: it carries the opt-in label Enforce needs;
    ``owner``: an ownerReference (e.g. a controller that owns it, as cass-operator's)."""
    lab = {"app": name, **(labels or {})}
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if managed:
        meta["labels"] = {"elastore.io/managed": "true"}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    vct = ""
    if volume:
        vct = f"""  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: elastore-test
      resources: {{requests: {{storage: {volume}}}}}
"""
    return f"""apiVersion: apps/v1
kind: StatefulSet
metadata: {json.dumps(meta)}
spec:
  replicas: {replicas}
  serviceName: {name}
  podManagementPolicy: Parallel
  selector: {{matchLabels: {json.dumps(lab)}}}
  template:
    metadata: {{labels: {json.dumps(lab)}}}
    spec:
      containers: [{{name: cassandra, image: cassandra:5.0}}]
{vct}"""


def persistent_volumes(n: int, size: str, root: Path) -> str:
    """Static hostPath PVs for volumeClaimTemplates (no provisioner here)."""
    docs = []
    for k in range(n):
        docs.append(f"""apiVersion: v1
kind: PersistentVolume
metadata: {{name: elastore-test-pv-{k}}}
spec:
  capacity: {{storage: {size}}}
  accessModes: [ReadWriteOnce]
  storageClassName: elastore-test
  persistentVolumeReclaimPolicy: Retain
  hostPath: {{path: {root / f'pv{k}'}}}
""")
    return "---\n".join(docs)


def _setting(name: str) -> property:
    """A :class:`CassandraMetrics` setting whose change first brings the counters up to
    now at the old value."""
    attr = f"_{name}"

    def get(self: Any) -> Any:
        return getattr(self, attr)

    def put(self: Any, value: Any) -> None:
        with self._lock:
            self._advance()
            setattr(self, attr, value)
            self._export(0.0)

    return property(get, put)


class CassandraMetrics:
    """An HTTP exporter of the metric names Cassandra's JMX exporter publishes (client
    requests, storage load, streaming), with counters that advance at the rate the test
    sets. For the tests that exercise the operator without a Cassandra cluster; the
    operator reads them through a real Prometheus with its real queries.

    The series carry the ``namespace`` and ``pod`` labels Prometheus's Kubernetes discovery
    would give them, for every StatefulSet :meth:`follow` finds on the API server (or the
    ``clusters`` given): ``rps`` and ``data_bytes`` are each cluster's total, spread over
    its ready pods. Series exist for ``SPARE`` more pods than the StatefulSet has (their
    counters flat), so a pod that scales out is not a series in its first minute (the
    default queries' rate window would underestimate it); a partial scrape is the business
    of :class:`NodeExporters`.

    The counters are brought up to date when Prometheus scrapes (as the JMX exporter reads
    its MBeans at the scrape) and whenever a setting changes (the old rate counts until
    then), never by a loop of their own: a loop's lag on a busy machine (a stalled thread,
    a slow pass over many namespaces) read as a dip and a jump of the load, which the
    forecast's quantiles took as real errors (issue 39's chaos tests)."""

    SPARE = 4

    def __init__(self, rps: float = 0.0, read_ratio: float = 0.95,
                 data_bytes: float = 3 * GIB,
                 clusters: dict[tuple[str, str], tuple[int, int]] | None = None,
                 latency_ms: Callable[[float], float] | None = None) -> None:
        """``latency_ms``: each serving pod's p95 (and p99, 1.5 x) for its requests/s,
        exported as the JMX exporter's ``..._95thpercentile`` gauges (microseconds);
        None: no latency series, as before."""
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self._lock = threading.RLock()
        self._t = time.monotonic()
        self._rps, self._read_ratio, self._data_bytes = rps, read_ratio, data_bytes
        #: (namespace, StatefulSet) -> (replicas, ready replicas)
        self._clusters: dict[tuple[str, str], tuple[int, int]] = dict(clusters or {})
        self._latency_ms = latency_ms
        self.reg = CollectorRegistry()
        # collected first (the registry collects in registration order): the counters as
        # of this scrape
        self.reg.register(_AtScrape(self._advance))
        # the JMX exporter publishes Cassandra's counters as plain samples named *_count
        labels = ["namespace", "pod"]
        self.req = Gauge("org_apache_cassandra_metrics_clientrequest_count",
                         "client requests", ["name", "scope", *labels], registry=self.reg)
        self.load = Gauge("org_apache_cassandra_metrics_storage_count", "bytes",
                          ["name", *labels], registry=self.reg)
        self.stream = Gauge("org_apache_cassandra_metrics_streaming_count", "bytes",
                            ["name", *labels], registry=self.reg)
        self.pct = {q: Gauge(f"org_apache_cassandra_metrics_clientrequest_{q}thpercentile",
                             "latency, microseconds", ["name", "scope", *labels],
                             registry=self.reg) for q in (95, 99)}
        self.port = free_port()
        self._server, _ = start_http_server(self.port, addr="127.0.0.1", registry=self.reg)
        self._stop = threading.Event()
        self._advance()

    # each change of a setting first counts the time since the last update at the old one
    rps = _setting("rps")
    read_ratio = _setting("read_ratio")
    data_bytes = _setting("data_bytes")
    clusters = _setting("clusters")
    latency_ms = _setting("latency_ms")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def follow(self, cp: ControlPlane, every_s: float = 1.0) -> None:
        """Publish series for every StatefulSet on ``cp``, as Prometheus would discover."""
        def poll() -> None:
            while not self._stop.wait(every_s):
                res = cp.kubectl("get", "statefulsets", "-A", "-o", "json", check=False)
                if res.returncode != 0:
                    continue
                found = {}
                for sts in json.loads(res.stdout).get("items", []):
                    md, st = sts["metadata"], sts.get("status") or {}
                    found[(md["namespace"], md["name"])] = (
                        int(sts["spec"].get("replicas") or 0), int(st.get("readyReplicas") or 0))
                self.clusters = found

        threading.Thread(target=poll, daemon=True).start()

    def _advance(self) -> None:
        """The counters up to now, at the settings in force since the last update."""
        with self._lock:
            now = time.monotonic()
            self._export(now - self._t)
            self._t = now

    def _export(self, dt: float) -> None:
        """``dt`` seconds more at the current settings (the caller holds the lock)."""
        for (ns, sts), (replicas, ready) in self._clusters.items():
            serving = max(1, ready)
            n = self._rps * dt / serving
            for k in range(replicas + self.SPARE):
                pod = f"{sts}-{k}"
                share = 1.0 if k < serving else 0.0
                self.load.labels("Load", ns, pod).set(self._data_bytes * share / serving)
                self.stream.labels("TotalOutgoingBytes", ns, pod).inc(0)
                self.req.labels("Latency", "Read", ns, pod).inc(n * share * self._read_ratio)
                self.req.labels("Latency", "Write", ns, pod).inc(
                    n * share * (1 - self._read_ratio))
                if self._latency_ms is not None and share:
                    lat_us = 1000 * self._latency_ms(self._rps / serving)
                    for scope in ("Read", "Write"):
                        self.pct[95].labels("Latency", scope, ns, pod).set(lat_us)
                        self.pct[99].labels("Latency", scope, ns, pod).set(1.5 * lat_us)

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()  # connection refused from now on


class _AtScrape:
    """A collector that yields nothing and, when collected, brings an exporter's counters
    up to the moment of the scrape."""

    def __init__(self, advance: Callable[[], None]) -> None:
        self.advance = advance

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        self.advance()
        return []


class NodeExporters:
    """One exporter per Cassandra node, each a scrape target of its own (as the JMX
    exporter runs inside each node), for ``namespace``/``sts``-k. :meth:`fail` stops one
    node's exporter: its scrape then fails for real (``up`` 0) and Prometheus marks its
    series stale."""

    def __init__(self, namespace: str, sts: str, nodes: int, rps: float,
                 data_bytes: float = 3 * GIB) -> None:
        self.namespace, self.sts = namespace, sts
        self.nodes = [CassandraMetrics(rps / nodes, data_bytes=data_bytes / nodes,
                                       clusters={(namespace, sts): (1, 1)})
                      for _ in range(nodes)]
        # each exporter believes it is pod <sts>-0: the target's labels say which it is
        for m in self.nodes:
            m.SPARE = 0

    def scrape_configs(self) -> str:
        """Prometheus ``static_configs`` entries: each node's target and its pod label
        (honor_labels off: the target's labels win, as with Kubernetes discovery)."""
        return "".join(
            f"      - targets: ['{m.target}']\n"
            f"        labels: {{namespace: {self.namespace}, pod: {self.sts}-{k}}}\n"
            for k, m in enumerate(self.nodes))

    def fail(self, k: int) -> None:
        self.nodes[k].close()

    def close(self) -> None:
        for m in self.nodes:
            if not m._stop.is_set():
                m.close()


class KubeletVolumes:
    """A kubelet's ``/metrics`` as far as volumes go (issue 37): the gauges
    ``kubelet_volume_stats_used_bytes`` and ``kubelet_volume_stats_capacity_bytes``
    (kubernetes/kubernetes pkg/kubelet/metrics/collectors/volume_stats.go) for each
    (namespace, PVC) given, labelled ``namespace`` and ``persistentvolumeclaim``. Scraped
    as a plain target (no namespace label of its own), the series keep the kubelet's
    labels, as kube-prometheus' kubelet ServiceMonitor (honorLabels) keeps them."""

    def __init__(self, volumes: dict[tuple[str, str], tuple[float, float]]) -> None:
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self.reg = CollectorRegistry()
        labels = ["namespace", "persistentvolumeclaim"]
        self.used = Gauge("kubelet_volume_stats_used_bytes", "bytes used on the volume",
                          labels, registry=self.reg)
        self.capacity = Gauge("kubelet_volume_stats_capacity_bytes",
                              "the volume's capacity", labels, registry=self.reg)
        for (ns, pvc), (used, cap) in volumes.items():
            self.set(ns, pvc, used, cap)
        self.port = free_port()
        self._server, _ = start_http_server(self.port, addr="127.0.0.1", registry=self.reg)
        self.closed = False

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, ns: str, pvc: str, used: float | None = None,
            capacity: float | None = None) -> None:
        """A volume's figures from now on (None: unchanged)."""
        if used is not None:
            self.used.labels(ns, pvc).set(used)
        if capacity is not None:
            self.capacity.labels(ns, pvc).set(capacity)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._server.shutdown()
            self._server.server_close()  # its scrape fails from now on


class Prometheus:
    """Debian's Prometheus on 127.0.0.1, scraping ``targets`` every second."""

    def __init__(self, root: Path, targets: list[str], static_configs: str = "",
                 web_config: str = "", ca: Path | None = None,
                 auth: tuple[str, str] | None = None, scrape_interval: str = "1s",
                 lookback_s: float | None = None) -> None:
        """``static_configs``: entries of the job's own (YAML, 6 spaces in), besides
        ``targets``. ``web_config``: Prometheus's ``--web.config.file`` (TLS, basic auth);
        then ``ca`` verifies its certificate and ``auth`` logs in to see it ready.
        ``lookback_s``: its ``--query.lookback-delta`` (how far before the instant asked
        about an instant query still finds a series' last sample; None: Prometheus's
        default, 5 min), kept across :meth:`restart`."""
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("Prometheus is not installed ('make test' installs Debian's)")
        root.mkdir(parents=True, exist_ok=True)
        cfg = root / "prometheus.yml"
        cfg.write_text(f"global: {{scrape_interval: {scrape_interval}, "
                       f"evaluation_interval: {scrape_interval}}}\n"
                       "scrape_configs:\n  - job_name: cassandra\n    static_configs:\n"
                       f"      - targets: {json.dumps(targets)}\n{static_configs}")
        self.port = free_port()
        self.root = root
        self.scheme = "https" if "tls_server_config" in web_config else "http"
        extra = []
        if web_config:
            (root / "web.yml").write_text(web_config)
            extra.append(f"--web.config.file={root / 'web.yml'}")
        if lookback_s is not None:
            extra.append(f"--query.lookback-delta={round(lookback_s * 1000)}ms")
        self.argv = [binary, f"--config.file={cfg}",
                     f"--web.listen-address=127.0.0.1:{self.port}",
                     f"--storage.tsdb.path={root / 'tsdb'}", "--log.level=warn", *extra]
        import base64
        import ssl

        self._ctx = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
        self._headers = {} if auth is None else {
            "Authorization": "Basic " + base64.b64encode(":".join(auth).encode()).decode()}
        self.proc = self._spawn()
        wait_until("Prometheus to be ready", self.ready, 30)

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, stdout=(self.root / "log").open("ab"),
                                stderr=subprocess.STDOUT, start_new_session=True)

    def ready(self) -> bool:
        import urllib.request

        try:
            req = urllib.request.Request(f"{self.url}/-/ready", headers=self._headers)
            with urllib.request.urlopen(req, timeout=2, context=self._ctx) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop it (by default SIGKILL: no clean shutdown, its WAL is replayed at the next
        start); its port then refuses connections."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)

    def restart(self, timeout_s: float = 120) -> float:
        """Start it again on the same port and data directory (the same flags); returns
        the seconds until it was ready (the WAL's replay included). A Prometheus that does
        not come back is a test failure, with its log."""
        self.kill(signal.SIGTERM)
        t0 = time.monotonic()
        self.proc = self._spawn()
        try:
            wait_until("Prometheus to be ready again", self.ready, timeout_s)
        except AssertionError as exc:
            log = (self.root / "log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"{exc}\n--- Prometheus's log:\n{log}") from None
        return time.monotonic() - t0

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


def install_namespaced(cp: ControlPlane, release: str, namespaces: tuple[str, ...],
                       kc: Path) -> Path:
    """The chart installed as ``release`` (in a namespace of that name, no Deployment) with
    ``watchNamespaces``: Roles in those namespaces only. Returns a kubeconfig (at ``kc``) of
    its ServiceAccount, to run the operator with exactly the chart's permissions."""
    from testbed.k8s import ensure_helm, kubeconfig

    helm = ensure_helm(print)
    res = subprocess.run([str(helm), "install", release, str(REPO / "charts" / "elastore"),
                          "--namespace", release, "--create-namespace",
                          "--kubeconfig", str(cp.kubeconfig), "--set", "replicas=0",
                          "--set", f"peering.name={release}",
                          "--set", "watchNamespaces={" + ",".join(namespaces) + "}"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, f"helm install {release}: {res.stderr}"
    token = cp.kubectl("create", "token", release, "-n", release, "--duration=4h"
                       ).stdout.strip()
    return kubeconfig(cp.server, cp.root / "pki", kc, token=token, user=release)


def namespaced_args(release: str, namespaces: tuple[str, ...]) -> tuple[str, ...]:
    """``elastore operator run`` flags for :func:`install_namespaced`'s install."""
    return ("--peering", release, *[a for ns in namespaces for a in ("--namespace", ns)])


#: Debian's libfaketime (``apt-get install faketime``)
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
#: ``python -c`` for ``python -m elastore`` under libfaketime: libfaketime 0.9.10 turns
#: CPython 3.11's ``time.sleep`` (clock_nanosleep on CLOCK_MONOTONIC, TIMER_ABSTIME) into
#: EINVAL when the monotonic clock is not faked (wolfcw/libfaketime#426), and faking it
#: hangs threads' timed waits (#390). So the monotonic clock stays real and ``time.sleep``
#: waits on an Event (a monotonic timed wait, which works); the wall clock (time.time,
#: datetime, OpenSSL's) is libfaketime's.
FAKETIME_MAIN = ("import runpy, sys, threading, time\n"
                 "_slept = threading.Event()\n"
                 "def _sleep(s: float) -> None:\n"
                 "    if s < 0:\n"
                 "        raise ValueError('sleep length must be non-negative')\n"
                 "    _slept.wait(s)\n"
                 "time.sleep = _sleep\n"
                 "sys.argv[0] = 'elastore'\n"
                 "runpy.run_module('elastore', run_name='__main__', alter_sys=True)\n")


def faketime_env(clock: Path) -> dict[str, str]:
    """The environment that offsets a process's wall clock by what ``clock`` says, read
    again at every call (so the offset can change while it runs). Not installed: a test
    failure that says how to install it."""
    if not LIBFAKETIME.exists():
        pytest.fail(f"{LIBFAKETIME} is missing: apt-get install -y faketime ('make "
                    "lab-deps' installs it)")
    if not clock.exists():
        set_clock(clock, 0)
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(clock),
            "FAKETIME_NO_CACHE": "1", "DONT_FAKE_MONOTONIC": "1"}


def set_clock(clock: Path, offset_s: int) -> None:
    """Set the offset of the processes run with ``faketime_env(clock)``, atomically (a
    half-written file would be read as no offset at all)."""
    tmp = clock.with_suffix(".new")
    tmp.write_text(f"{offset_s:+d}s\n" if offset_s else "+0\n")
    os.replace(tmp, clock)


class OperatorProcess:
    """``elastore operator run`` as a process of its own (so it can be killed)."""

    def __init__(self, kubeconfig: Path, log: Path, *, lifetime_s: int = 10,
                 extra_env: dict[str, str] | None = None, args: tuple[str, ...] = (),
                 clock: Path | None = None) -> None:
        """``clock``: run it under Debian's libfaketime, its clock offset by what that file
        says (``+120s``, ``-120s``, ``+0``; :func:`set_clock` changes it while it runs)."""
        self.metrics_port = free_port()
        self.log = log
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
        # the nodetool commands the suites' policies name: the stand-in, the lab's exec
        allowed = [a for c in ("nodetool", f"{sys.executable} {NODETOOL_STANDIN}",
                               f"{sys.executable} {PODEXEC}") for a in ("--nodetool", c)]
        # and the prefix the Swift suites' commands go through (testbed.swiftexec)
        allowed += ["--exec-prefix", f"{sys.executable} {SWIFT_EXEC}"]
        main = ["-m", "elastore"]
        if clock is not None:
            env.update(faketime_env(clock))
            main = ["-c", FAKETIME_MAIN]
        self.proc = subprocess.Popen(
            [sys.executable, *main, "-v", "operator", "run", "--kubeconfig",
             str(kubeconfig), "--metrics-port", str(self.metrics_port), "--metrics-addr",
             "127.0.0.1", "--peering-lifetime", str(lifetime_s), *allowed, *args],
            env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as r:
            return str(r.read().decode())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # captured by pytest and shown only when the test fails: what the operator did
        print(f"--- the last of the operator's log ({self.log}):\n{self.tail(8000)}")
        return self.proc.returncode

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def policy(name: str, namespace: str, target: str, *, nodetool: list[str] | None = None,
           **spec: Any) -> str:
    tgt: dict[str, Any] = {"name": target, "replicationFactor": 3}
    if nodetool is not None:
        tgt["nodetool"] = nodetool
    doc = {"apiVersion": "elastore.io/v1alpha1", "kind": "ElasticPolicy",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"target": tgt,
                    "replicas": {"min": 3, "max": 6}, "slo": {"latencyMs": 100}, **spec}}
    return json.dumps(doc)


def get(cp: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any]:
    res = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json")
    return dict(json.loads(res.stdout))


def statefulset_json(cp: ControlPlane, ns: str, name: str = "cass") -> dict[str, Any]:
    """A StatefulSet, read in this process (polls read it every second or two: a kubectl
    run each cost ~0.1 s of CPU on a machine the lab shares)."""
    return cp.get_json(f"/apis/apps/v1/namespaces/{ns}/statefulsets/{name}")


def policy_status(cp: ControlPlane, ns: str, name: str = "orders") -> dict[str, Any]:
    """A policy's status, read in this process (as :func:`statefulset_json`)."""
    return dict(cp.get_json(f"/apis/elastore.io/v1alpha1/namespaces/{ns}/elasticpolicies/"
                            f"{name}").get("status") or {})


def events(cp: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    res = cp.kubectl("get", "events", "-n", namespace, "-o", "json",
                     "--field-selector", f"involvedObject.name={name}")
    return list(json.loads(res.stdout)["items"])


def _exec_docs(namespace: str, sts: str, pods: int,
               envs: Callable[[int], dict[str, str]],
               names: list[str] | None = None, container: str = "cassandra"
               ) -> list[dict[str, Any]]:
    """kwok ``Exec`` resources: ``exec`` into pod ``<sts>-k`` (or ``names[k]``) runs the
    command *locally*, with ``envs(k)``."""
    names = names or [f"{sts}-{k}" for k in range(pods)]
    return [{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec",
             "metadata": {"name": names[k], "namespace": namespace},
             "spec": {"execs": [{"containers": [container], "local": {
                 "workDir": str(REPO),
                 "envs": [{"name": n, "value": v} for n, v in
                          {**envs(k), "PYTHONPATH": str(REPO)}.items()]}}]}}
            for k in range(pods)]


def kwok_exec_config(namespace: str, sts: str, pods: int, lab_dir: Path) -> str:
    """``exec`` into pod ``<sts>-k`` runs the command with ``ELASTORE_NODE=k+1`` and
    ``ELASTORE_LAB_DIR``: lab node k+1's nodetool (see testbed.podexec)."""
    docs = _exec_docs(namespace, sts, pods, lambda k: {
        "ELASTORE_NODE": str(k + 1), "ELASTORE_LAB_DIR": str(lab_dir)})
    return "\n---\n".join(json.dumps(d) for d in docs)


def swift_exec_config(namespace: str, sts: str, pods: int, lab_dir: Path) -> str:
    """``exec`` into container ``swift`` of pod ``<sts>-k`` runs the command with
    ``ELASTORE_NODE=k+1`` and ``ELASTORE_LAB_DIR``: against lab Swift node k+1's files (see
    testbed.swiftexec)."""
    docs = _exec_docs(namespace, sts, pods, lambda k: {
        "ELASTORE_NODE": str(k + 1), "ELASTORE_LAB_DIR": str(lab_dir)}, container="swift")
    return "\n---\n".join(json.dumps(d) for d in docs)


#: the prefix a Swift policy's commands go through in the k8s suites (kwok's pods run no
#: Swift: testbed.swiftexec runs them against the lab's node)
SWIFT_EXEC = REPO / "tests" / "testbed" / "swiftexec.py"


def standin_exec_config(namespaces: list[str], sts: str, pods: int, root: Path) -> str:
    """``exec`` into pod ``<sts>-k`` of each namespace runs the command with
    ``ELASTORE_NODE=k`` and a directory of that namespace's own (see
    testbed.nodetool_standin)."""
    docs = [d for ns in namespaces for d in _exec_docs(ns, sts, pods, lambda k, ns=ns: {
        "ELASTORE_NODE": str(k), "ELASTORE_STANDIN_DIR": str(root / ns)})]
    return "\n---\n".join(json.dumps(d) for d in docs)


def named_standin_exec_config(pods: dict[str, list[str]], root: Path) -> str:
    """``exec`` into pod ``pods[ns][k]`` runs the command with ``ELASTORE_NODE=k`` and the
    namespace's own directory (testbed.nodetool_standin): pods not named ``<sts>-k``, as
    cass-operator's ``<cluster>-<dc>-<rack>-sts-k``."""
    docs = [d for ns, names in pods.items() for d in _exec_docs(
        ns, "", len(names), lambda k, ns=ns: {"ELASTORE_NODE": str(k),
                                              "ELASTORE_STANDIN_DIR": str(root / ns)},
        names)]
    return "\n---\n".join(json.dumps(d) for d in docs)


#: the nodetool the k8s suite's policies exec into kwok's pods (no Cassandra there)
NODETOOL_STANDIN = REPO / "tests" / "testbed" / "nodetool_standin.py"


class LabPodAgent:
    """Test-only: pod ``<sts>-k`` is lab node ``k+1``. When kwok runs a pod whose node is
    not in the lab, the agent starts that node (it bootstraps into the ring); when a pod is
    gone and its node is still running, the agent stops the node's JVM (by PID: the operator
    lowers the replicas only after the node has left the ring). Errors are kept for the
    test to assert on."""

    def __init__(self, cp: ControlPlane, namespace: str, sts: str, lab_dir: Path,
                 max_pods: int = 4) -> None:
        self.cp, self.namespace, self.sts, self.lab_dir = cp, namespace, sts, lab_dir
        self.max_pods = max_pods
        self.errors: list[str] = []
        self.log: list[str] = []
        self.ips: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-agent", daemon=True)
        self._thread.start()

    def _pods(self) -> dict[str, str]:
        res = self.cp.kubectl("get", "pods", "-n", self.namespace, "-o", "json", check=False)
        if res.returncode != 0:
            raise RuntimeError(res.stderr.strip()[-300:])
        items = [p for p in json.loads(res.stdout)["items"]
                 if not p["metadata"].get("deletionTimestamp")]
        self.ips = {p["metadata"]["name"]: (p.get("status") or {}).get("podIP", "")
                    for p in items}
        return {p["metadata"]["name"]: (p.get("status") or {}).get("phase", "")
                for p in items}

    def _run(self) -> None:
        from elastore.lab.cassandra import lab

        while not self._stop.wait(1.0):
            try:
                pods = self._pods()
                state = lab.LabState.load(self.lab_dir)
                if state is None:
                    raise RuntimeError(f"no lab in {self.lab_dir}")
                nodes = {n.n for n in state.nodes}
                for k in range(self.max_pods):
                    pod, n = f"{self.sts}-{k}", k + 1
                    if pods.get(pod) == "Running" and n not in nodes:
                        # the veth lab: the node takes the pod's IP, as a CNI gives it
                        ip = self.ips.get(pod) or None if state.veth else None
                        if state.veth and ip is None:
                            continue  # kwok has not given it an IP yet
                        self.log.append(f"{time.time():.0f} {pod} runs: starting node {n}"
                                        + (f" at {ip}" if ip else ""))
                        lab.add_node(self.lab_dir, n, ip)
                        self.log.append(f"{time.time():.0f} node {n} joined")
                    elif pod not in pods and n in nodes:
                        self.log.append(f"{time.time():.0f} {pod} gone: stopping node {n}")
                        lab.remove_node(n, self.lab_dir)
            except Exception as exc:  # kept for the test: an agent failure fails it
                self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(5)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=600)


def trace_workload(shared: Path, out: Path, peak: float = 120.0, hour_s: float = 20.0,
                   windows_per_hour: int = 4, start: str = "2016-01-05 04:00",
                   end: str = "2016-01-06 06:00") -> tuple[Path, float]:
    """A day and a bit of the English Wikipedia (``start``, by default 2016-01-05 04:00, to
    2016-01-06 06:00 UTC): the night's trough, the day's rise (from 13:00) and plateau, the
    next night's fall; 1 h = ``hour_s`` seconds, in ``windows_per_hour`` steps of load. The
    peak (14:00) is ``peak`` requests/s whatever the start."""
    res = subprocess.run([sys.executable, "-m", "elastore", "trace", "build",
                          str(shared / "traces" / "wikipedia" / "en-2016-01-pages-hourly.csv.gz"),
                          "--start", start, "--end", end,
                          "--hour-seconds", str(hour_s),
                          "--windows-per-hour", str(windows_per_hour),
                          "--peak-rps", str(peak), "-o", str(out)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return out, peak
