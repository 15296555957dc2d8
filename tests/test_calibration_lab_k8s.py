"""The first day on a cluster, on the lab's real Cassandra: an operator with no capacity
model learns the store's SLO border online from a day of the trace, and ends within 15 % of
the border that ``elastore models fit`` finds from a profile sweep of the same lab, with no
more SLO violations than the prior alone would have let through (issue 18).

Both borders are taken at the sweep's read ratio (0.95): the learned model from the
policy's ConfigMap, not ``status.model.capacityRps``, which is at the day's mean ratio
(0.90-0.92), where the shipped shape's capacity is a third lower.
"Within 15 %" is measured against what the sweep can resolve (:func:`_border_range`): the
bracket of its load grid around the border (two loads 1.45 x apart), the 10-90 % range of
the border ``models fit`` finds in resamples of the sweep's windows, and the fitted border,
widened by 15 % each way; and that span reaches the border ``models fit`` finds in the
sweep's and the day's windows together (:func:`_all_windows_fit`): the store drifts in the
15 minutes between the sweep and the day, and in one official CI run the day served 157
req/s per server within the SLO where the sweep had put the border at 141. Whether the
learned border is also within 15 % of the sweep's fitted one itself is printed (and
reported): on this shared 2-core box it often is not, as the sweep's own border moves by up
to 2x run to run (below).

* The lab: 3 Cassandra nodes, each at the IP of a kwok pod of StatefulSet ``store/cass``
  (the topology the kwok-backed end-to-end test had, before test_real_node.py replaced it).
* The reference border: ``elastore lab profile`` sweeps the load at the trace's read ratio
  (0.95) over the trace's keys (``--keys-from``: the same request mix), no migration and no
  neighbour, on this lab (until two loads are well past the SLO), and ``elastore models
  fit`` finds the capacity per server at the SLO from it. Only
  those conditions: the replay observes only them (the other axes stay the prior's shape),
  and a whole sweep takes 40 min.
* How far apart the two borders fall, run to run, on this 2-core box: one window's p95 at
  one load strays 10-140 ms, and the sweep's border moved from 65.5 to 138.3 req/s per
  server across CI runs while the learner ended at 73.7-79.4. Fed the sweeps' own 10-s
  windows offline, the learner's estimator gives what `models fit` gives within 15 % (91.0
  against 90.3; 119.3 against 138.3): the gap is between the sweep and the day (see
  :data:`WINDOWS_PER_HOUR`), which this test keeps as alike as it can.
* The same neighbours for both: the operator runs through the sweep (both policies
  ticking; the learning one is then deleted with its model and created afresh for the
  day) as through the day, the test reads status in-process every 2 s (not with
  kubectl processes), and the store idles :data:`COOL_S` after the sweep's overload. In
  the CI run before these, the day's windows fitted 54.5 req/s per server where the sweep
  had found 81.9 (three kubectl runs a second during the day only, and a day begun on the
  sweep's queues: its first window's p95 was 379 ms at 60 % of the border).
* The workload: a day of the English Wikipedia whose peak is set by the fitted border (3
  servers at 110 % of it), so the trace's rise takes the nodes across the border.
* The policies are in Recommend, the walkthrough's first day (docs/operator.md): the
  cluster stays at 3 servers. It has to: on this 2-core machine an added node adds no CPU
  (experiments/hubbub/README.md), and with a CPU limit per node the lab's latency is its
  own throttling, flat in load (experiments/profiles/README.md), so a scale-out could not
  show what the added server would have served.
* Both policies plan with the paper's window planner (``spec.planner.mode: Window``): its
  recommendation is the servers the forecast needs at the model's capacity, so the two
  differ only by their models. The default horizon planner weighs a server's VM-hours
  against the violation-hours it saves over a 24-h lookahead; at 10 s per trace hour the
  day's peak lasts a few of its steps, less than a node's boot (60 s), and in two CI runs
  with it both policies mostly held 3 servers: the comparison counted noise (19 vs 16,
  25 vs 22 windows let through).
* The learning policy: ``capacityModel`` unset (learn, prior = the shipped lab profile
  x0.5); its reading per node is the load generator's last complete 10-s window: the
  cluster's p95 and its load per server (``elastore_load_window_p95_ms`` and
  ``elastore_load_window_rps``), the measurement and the pairing the sweep fits
  (:data:`NODE_QUERIES`).
* The prior alone: a second Recommend policy with the prior as its model, learning off.
* After the day, the sweep is made again (issue 40 part 4): the lab does not repeat itself
  to 15 % (the learned border was 14-75 % from the one sweep over five runs), so the
  learned border is also judged against the range of the two sweeps' borders
  (:func:`two_sweeps`), and every run's figures are appended to
  ``experiments/calibration/runs.jsonl`` to report them over runs.
  A window over the SLO is let through by a policy when it recommended no more servers
  than were running, neither for that moment (the recommendation made one prediction
  horizon before: desiredReplicas is the size for the forecast at now + horizon) nor at
  it: it would not have added the server. (Judged at the moment alone, as before, a
  correct forecast of the falling edge counted as a miss: printed, not asserted.) A
  violation is the
  policy's when the window's load per server was above the reference border (a capacity
  shortfall; below it, over-SLO windows are the lab's noise and are only printed). The
  learning policy must let through no more shortfalls than the prior's.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from k8s_support import (
    CRDS,
    OperatorProcess,
    get,
    install_namespaced,
    namespaced_args,
    persistent_volumes,
    policy,
    start_control_plane,
    statefulset,
    trace_workload,
    wait_until,
)
from testbed.forward import Forwarder
from testbed.k8s import ControlPlane

from elastore.lab import netns
from elastore.lab.cassandra import lab
from elastore.models.bundle import ModelSet
from elastore.models.online import scaled
from elastore.resources import builtin_model

# a measurement (make lab-check, ~21 min): its figures go to experiments/calibration/
# results.json. make test keeps the mechanism: test_real_node.py's learning policy on
# the same real store, and test_operator_learning.py / test_operator_k8s.py
pytestmark = [pytest.mark.lab, pytest.mark.k8s, pytest.mark.slow, pytest.mark.measure]
LAB_NS = f"elastore-test-cal-{os.getpid()}"
NS, STS = "store", "cass"
LEARN, PRIOR = "cass-learn", "cass-prior"
RELEASE = "elastore-cal"
SLO_MS = 60.0  # p95, client side: above this lab's GC noise at light load (median 11-29 ms)
HEADROOM = 0.1
HOUR_S = 10.0  # replay seconds per trace hour
HORIZON_S = 60.0  # both policies' prediction horizon
PEAK_SHARE = 1.1  # the trace's peak per server (3 servers), of the fitted border
PRIOR_SCALE = 0.5  # the CRD's default for the built-in prior
# cluster requests/s, geometric: 15 to 420 req/s per server, where six runs put the border
# at 47-138, and a faster machine beyond 200 (the sweep then ended at 600 without crossing
# it: p95 19-131 ms there, the fit 247; the fixture failed). The lowest load of earlier
# versions, 10 per server, cost a minute for p95s of 5-15 ms. The sweep stops after two
# loads past 2 x the SLO, so the top loads cost nothing where the border is lower: on the
# slowest machine yet it stopped after 420, so 30 windows need at least six loads before
# that (models fit needs 30)
SWEEP_LOADS = (45, 65, 95, 140, 200, 290, 420, 600, 870, 1260)
#: the latency the learner reads is the load generator's p95 over 10 s; the sweep's windows
#: are 10 s too (a p95 over 10 s holds the worst moments of 5-s ones: on this lab the same
#: day fitted 100 req/s per server on 2.5-s windows where the learner, on 10-s ones, found
#: 77), and 5 kept per load (models fit needs 30)
WINDOW_S, POINT_S = 10, 60
COOL_S = 60  # idle between the sweep's overload and the day
#: the day's load steps: one per trace hour (10 s), so that the learner's 10-s windows
#: meet one load, as the sweep's do. With four (a new rate every 2.5 s) two CI runs learned
#: 79.4 and 79.2 req/s per server online where the learner's own estimator, fed the
#: sweep's 10-s windows offline, gives 119 and 91 (and the day's 2.5-s windows 98 and
#: 106): a 10-s window's p95 over four rates, paired with their mean, is likely the worst
#: rate's (latency is convex in load), which reads as a lower border.
WINDOWS_PER_HOUR = 1
def _window_per_node(op: str) -> str:
    """Every pod's series holds the cluster's load per node in the load generator's last
    complete window (``elastore_load_window_rps``: requests/s of ``op`` answered of those
    scheduled in it), the window the latency below is from. A sliding ``rate()[10s]``
    straddles two of the day's 10-s load steps at almost every period's phase, and latency
    is convex in load: its p95 is the higher step's, paired with the mean of both. In the
    fresh-clone run of 427a07c the learner, fed such pairs, found 130.5 req/s per server
    (148.7 at the sweep's read ratio, where the sweep's fit was 194.9: 23.7 % apart); the
    same day's own windows, replayed offline through the same learner, give 147.7 (187.5).
    In production a load step is an hour, not 10 s, and the straddle is negligible."""
    x = ('rate(org_apache_cassandra_metrics_clientrequest_count{name="Latency",'
         'scope="Read",namespace="store"}[10s])')
    return (f"sum by (pod) (0 * {x}) + on() group_left() "
            f'(sum(elastore_load_window_rps{{op="{op}"}}) / count(sum by (pod) ({x})))')


NODE_QUERIES = {
    # The latency is the client's p95 over all requests of one window, the same for every
    # node: the sweep's definition (`lab profile` rows are the cluster's p95 against its
    # load per server). A node's own coordinator p95 (elastore_load_node_p95_ms) is lower
    # than the cluster's, whose tail the slowest node sets. One cluster-wide latency must
    # meet the cluster's mean load per node, not each node's own: the trace's hot keys make
    # the coordinators' loads unequal (1.20 : 1.07 : 0.73 of the mean in CI), and pairing
    # each with the same latency put the learned border at 52.6 req/s per server where the
    # sweep found 74.6 and the day's own windows 69. The pod set comes from Cassandra's own
    # series (the exporter's pod labels).
    "nodeReadRps": _window_per_node("read"),
    "nodeWriteRps": _window_per_node("write"),
    "nodeLatencyMs": 'sum by (pod) (0 * rate(org_apache_cassandra_metrics_clientrequest_count'
                     '{name="Latency",scope="Read",namespace="store"}[10s])) + on() '
                     'group_left() elastore_load_window_p95_ms',
}

assert CRDS.is_dir()


@dataclass
class Run:
    cp: ControlPlane
    root: Path
    lab_dir: Path
    fitted_rps: float  # the sweep's border, per server at read ratio 0.95
    fit_ratio: float
    peak_rps: float
    load: subprocess.Popen[bytes]
    keys: Path  # the trace's keys and popularity, for the sweep after the day
    operators: list[OperatorProcess] = field(default_factory=list)
    samples: list[tuple[float, dict[str, Any], dict[str, Any], int]] = field(
        default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def prom_get(self, path: str) -> str:
        state = lab.LabState.load(self.lab_dir)
        assert state is not None
        return lab.prometheus_get(state, path) or "{}"

    def status(self, name: str) -> dict[str, Any]:
        return dict(get(self.cp, "elasticpolicy", name, NS).get("status") or {})

    def diagnostics(self) -> str:
        st = self.status(LEARN)
        keep = {k: st.get(k) for k in ("conditions", "operation", "model", "forecast",
                                       "observed", "desiredReplicas", "lastDecision")}
        return (f"status: {json.dumps(keep, indent=1)[:4000]}\noperator log: "
                f"{self.operators[-1].tail(3000) if self.operators else ''}")


POLICIES = f"/apis/elastore.io/v1alpha1/namespaces/{NS}/elasticpolicies"


def _sampler(run: Run) -> None:
    """Both policies' status and the ready servers every 2 s, read in this process: the
    first version ran three kubectl processes a second (~0.1 s of CPU each, and the API
    server's work), a fifth of this 2-core machine taken from the store during the replay
    and not during the sweep."""
    while not run.stop.wait(2.0):
        with contextlib.suppress(Exception):  # the API server busy for a moment
            sts = run.cp.get_json(f"/apis/apps/v1/namespaces/{NS}/statefulsets/{STS}")
            ready = int((sts.get("status") or {}).get("readyReplicas") or 0)
            learn = run.cp.get_json(f"{POLICIES}/{LEARN}").get("status") or {}
            prior = run.cp.get_json(f"{POLICIES}/{PRIOR}").get("status") or {}
            run.samples.append((time.time(), dict(learn), dict(prior), ready))


def _run_cli(args: list[str], lab_dir: Path, log: Path, timeout_s: float) -> None:
    with log.open("ab") as out:
        res = subprocess.run([sys.executable, "-m", "elastore", *args],
                             env=dict(os.environ, ELASTORE_LAB_DIR=str(lab_dir)),
                             stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s,
                             check=False)
    assert res.returncode == 0, f"elastore {' '.join(args[:3])} failed: " \
                                f"{log.read_text()[-3000:]}"


def _sweep(root: Path, lab_dir: Path, keys: Path, name: str, loads: list[float],
           point_s: int, warmup_s: int) -> Path:
    """A sweep of this lab at the trace's read ratio, over the trace's own keys and their
    popularity (``--keys-from``). The border is a request mix's: with the sweep's default
    4000 Zipf keys one run fitted 33.9 req/s per server while the day's 631 pages (top 100:
    45 % of requests) stayed within the SLO at 37. Windows of the learner's 10 s
    (:data:`WINDOW_S`)."""
    samples = root / f"{name}.csv"
    _run_cli(["lab", "profile", "--out", str(samples), "--keys-from", str(keys),
              "--loads", ",".join(f"{x:g}" for x in loads), "--read-ratios", "0.95",
              "--migrations", "0", "--interference", "0", "--point-seconds",
              str(point_s), "--window-seconds", str(WINDOW_S), "--bulk-rows", "0",
              "--warmup-seconds", str(warmup_s),
              "--stop-above-ms", str(2 * SLO_MS)],
             lab_dir, root / f"{name}.log", 900)
    return samples


def _fit(root: Path, parts: list[Path], name: str) -> tuple[float, float]:
    """``elastore models fit`` on the sweeps' windows together: the border per server at
    the SLO, and the read ratio it is at."""
    rows: list[dict[str, str]] = []
    for part in parts:
        with part.open() as fh:
            rows.extend(csv.DictReader(fh))
    samples = root / f"{name}.csv"
    with samples.open("w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    model = root / f"{name}.json"
    _run_cli(["models", "fit", "--samples", str(samples), "--slo-ms", str(SLO_MS),
              "-o", str(model)], root / "lab", root / f"{name}.log", 300)
    cap = ModelSet.load(model).capacity
    ratio = sum(float(r["read_rps"]) for r in rows) / sum(
        float(r["read_rps"]) + float(r["write_rps"]) for r in rows)
    fitted = float(cap.capacity(ratio))
    top = max(float(r["read_rps"]) + float(r["write_rps"]) for r in rows)
    print(f"{name}: {len(rows)} windows up to {top:.0f} req/s per server; the fitted border "
          f"at p95 <= {SLO_MS:g} ms: {fitted:.1f} req/s per server (read ratio {ratio:.3f})")
    assert 0 < fitted < top, f"the sweep did not cross the {SLO_MS} ms border: {fitted}"
    return fitted, ratio


def _border_range(samples: Path, ratio: float, fitted: float,
                  resamples: int = 30) -> tuple[float, float]:
    """What the sweep can resolve of the border (req/s per server): the span of

    * its load grid's bracket: the highest load whose windows' median p95 is within the
      SLO, and the next load above it, whose median is not (a sweep of points 1.45 x apart
      cannot place the border between two of them: the CI run of dfcc455 had every window
      at 67 req/s per server within the SLO and 3 of 5 at 97 over it, and ``models fit``
      put the border at 96 where the day's own windows put it at 83);
    * the 10-90 % range of the border ``models fit``'s fit (:func:`fit_capacity`) finds when
      each load's windows are resampled with replacement: on this 2-core box one window's
      p95 at one load strays 20-120 ms (ranges of 83.5-121.1, 46.7-68.6 and 43.4-68.4
      around fitted borders of 90.3, 47.0 and 64.1; 30 resamples, 21-29 s of CPU each);
    * and the fitted border itself."""
    import numpy as np

    from elastore.models.capacity import fit_capacity

    with samples.open() as fh:
        rows = list(csv.DictReader(fh))
    points: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        points.setdefault(r["cluster_rps"], []).append(r)
    keys = ("read_rps", "write_rps", "migration_mibps", "interference", "p95_ms")
    rng = np.random.default_rng(0)
    borders = [fitted]
    for _ in range(resamples):
        pick = [rs[i] for rs in points.values() for i in rng.integers(0, len(rs), len(rs))]
        cols = {k: np.array([float(r[k]) for r in pick]) for k in keys}
        borders.append(float(fit_capacity(cols, SLO_MS).capacity(ratio)))
    lo, hi = (float(x) for x in np.quantile(borders, [0.1, 0.9]))
    grid = sorted((float(np.mean([float(r["read_rps"]) + float(r["write_rps"]) for r in rs])),
                   float(np.median([float(r["p95_ms"]) for r in rs])))
                  for rs in points.values())
    within = [k for k, (_, p95) in enumerate(grid) if p95 <= SLO_MS]
    if within:
        k = within[-1]
        lo = min(lo, fitted, grid[k][0])
        hi = max(hi, fitted, grid[min(k + 1, len(grid) - 1)][0])
    return min(lo, fitted), max(hi, fitted)


def _all_windows_fit(root: Path, ratio: float) -> float | None:
    """The border ``models fit``'s fit (:func:`fit_capacity`) finds in every window this run
    measured of the lab: the sweep's and the day's (``replay-samples.csv``), per server at
    ``ratio``; None when they are too few to fit.

    The store drifts on this shared 2-core box between the sweep and the day, 15 minutes
    later. In the official CI run of fc34ca7 the sweep's windows at 135-143 req/s per
    server had p95s of 41-178 ms (its fit: 140.8) and the day's at 139-157 had 22-52 ms,
    not one over the SLO (60 ms); the learner, fed the day, found 198.0. Fitted together,
    the sweep and the day give 177.2: the lab's border as all of the run's measurements of
    it place it, by the same offline estimator, not the learner's."""
    import numpy as np

    from elastore.models.capacity import ModelError, fit_capacity

    keys = ("read_rps", "write_rps", "migration_mibps", "interference", "p95_ms")
    rows: list[dict[str, str]] = []
    for name in ("sweep.csv", "replay-samples.csv"):
        with (root / name).open() as fh:
            rows += list(csv.DictReader(fh))
    cols = {k: np.array([float(r[k]) for r in rows]) for k in keys}
    try:
        return float(fit_capacity(cols, SLO_MS).capacity(ratio))
    except ModelError as exc:
        print(f"the sweep's and the day's windows together do not fit: {exc}")
        return None


def _prior_model(root: Path) -> Path:
    """The prior alone, as a model file: the built-in lab profile at the CRD's default
    prior scale (what the learning policy starts from)."""
    ms = ModelSet.load(builtin_model("lab"))
    out = root / "prior.json"
    out.write_text(ModelSet(capacity=scaled(ms.capacity, PRIOR_SCALE, note="the prior"),
                            bandwidth=ms.bandwidth, source=ms.source).dumps())
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("calibration")
    lab_dir = root / "lab"
    cp = start_control_plane(root / "k8s")
    fwd: Forwarder | None = None
    load: subprocess.Popen[bytes] | None = None
    r: Run | None = None
    operators: list[OperatorProcess] = []
    try:
        cp.kubectl("create", "namespace", NS)
        cp.kubectl("apply", "-f", "-", stdin=persistent_volumes(4, "1Gi", root / "pv"))
        cp.kubectl("create", "configmap", "prior-model", "-n", NS,
                   f"--from-file=model.json={_prior_model(root)}")
        cp.kubectl("apply", "-f", "-", stdin=statefulset(STS, NS, 3, volume="1Gi"))
        wait_until("3 pods with IPs", lambda: all(
            (get(cp, "pod", f"{STS}-{k}", NS).get("status") or {}).get("podIP")
            for k in range(3)) if get(cp, "statefulset", STS, NS).get("status", {})
            .get("readyReplicas") == 3 else False, 60)
        ips = [get(cp, "pod", f"{STS}-{k}", NS)["status"]["podIP"] for k in range(3)]
        try:
            lab.up(3, "256M", d=lab_dir, namespace=LAB_NS, pods=f"{NS}/{STS}", ips=ips)
        except Exception as exc:
            pytest.fail(f"the Cassandra lab did not come up: {exc}")
        state = lab.LabState.load(lab_dir)
        assert state is not None
        fwd = Forwarder(state.netns, lab.PROMETHEUS_ADDR)
        sa = install_namespaced(cp, RELEASE, (NS,), root / "sa.kubeconfig")
        operators.append(OperatorProcess(sa, root / "op.log", lifetime_s=10,
                                         extra_env={"ELASTORE_IDENTITY": "op-1"},
                                         args=namespaced_args(RELEASE, (NS,))))
        common: dict[str, Any] = dict(
            mode="Recommend", controlPeriod="10s", replicas={"min": 3, "max": 4},
            # the paper's window planner: its recommendation follows the capacity model
            # alone (see the module's docstring)
            planner={"mode": "Window"},
            slo={"latencyMs": SLO_MS},
            prediction={"horizon": f"{HORIZON_S:g}s", "step": f"{HOUR_S:g}s",
                        "headroom": HEADROOM},
            migration={"minMiBps": 1, "maxMiBps": 8, "nodeOverheadSeconds": 60},
            scaleDown={"stabilizationSeconds": 40},
            metrics={"prometheus": {"url": fwd.url, "queries": NODE_QUERIES}})
        # the operator works through the sweep as through the day (the prior's policy
        # ticking): the reference border is measured beside the same neighbours
        cp.kubectl("apply", "-f", "-", stdin=policy(
            PRIOR, NS, STS,
            capacityModel={"configMapRef": {"name": "prior-model"}, "learn": False},
            **common))
        cp.kubectl("apply", "-f", "-", stdin=policy(LEARN, NS, STS, **common))
        keys, _ = trace_workload(shared_dir, root / "keys.json", hour_s=HOUR_S)
        # the store warms up for minutes (JIT, caches): 90 s of warm-up first
        before = _sweep(root, lab_dir, keys, "sweep", list(SWEEP_LOADS), POINT_S, 90)
        fitted, ratio = _fit(root, [before], "fit")
        # the sweep ends far past the border (p95 up to seconds): its queues, hints and
        # flushes drain before the day starts, or the day's first minutes measure them
        print(f"cooling down {COOL_S} s after the sweep")
        time.sleep(COOL_S)
        peak = round(3 * PEAK_SHARE * fitted, 1)
        wl, _ = trace_workload(shared_dir, root / "wl.json", peak=peak, hour_s=HOUR_S,
                               windows_per_hour=WINDOWS_PER_HOUR)
        # the learning policy starts afresh for the day: what it learnt from the sweep
        # goes with it (its model's ConfigMap is the policy's own)
        cp.kubectl("delete", "elasticpolicy", LEARN, "-n", NS, "--wait=true")
        cp.kubectl("delete", "configmap", f"{LEARN}-capacity-model", "-n", NS,
                   "--ignore-not-found=true")
        cp.kubectl("apply", "-f", "-", stdin=policy(LEARN, NS, STS, **common))
        load = subprocess.Popen([sys.executable, "-m", "elastore", "load", "run", str(wl),
                                 "--out", str(root / "load.csv")],
                                env=dict(os.environ, ELASTORE_LAB_DIR=str(lab_dir)),
                                stdout=(root / "load.log").open("ab"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        r = Run(cp, root, lab_dir, fitted, ratio, peak, load, keys, operators)
        threading.Thread(target=_sampler, args=(r,), daemon=True).start()
        print(f"replaying a day at {HOUR_S:g} s per hour, peak {peak:.0f} req/s "
              f"({PEAK_SHARE:g} x 3 servers at the fitted border)")
        yield r
    finally:
        if r is not None:
            r.stop.set()
        for op in operators:
            op.stop()
        if load is not None and load.poll() is None:
            os.killpg(load.pid, signal.SIGTERM)
            load.wait(timeout=60)
        if fwd is not None:
            fwd.close()
        cp.stop()
        lab.down(lab_dir)
        assert not netns.exists(LAB_NS)


def _windows(run: Run) -> list[tuple[float, float, float, float]]:
    """(epoch start, seconds, p95 ms, achieved req/s) of every replay window with answers."""
    log = (run.root / "load.log").read_text()
    began = float(log.split("replay starts at epoch ", 1)[1].split()[0])
    rows = list(csv.DictReader((run.root / "load.csv").open()))
    return [(began + float(x["start_s"]), HOUR_S / WINDOWS_PER_HOUR, float(x["p95_ms"]),
             float(x["achieved_rps"])) for x in rows
            if x.get("p95_ms") not in ("", "nan", None)]


def _replay_fit(run: Run, ratio: float) -> None:
    """Diagnostic: the border ``models fit`` finds in the replay's own windows (the load
    generator's, per server), beside the sweep's: when the two differ, the store changed
    between the sweep and the day (it warms up for minutes), not the learner."""
    rows = list(csv.DictReader((run.root / "load.csv").open()))
    out = run.root / "replay-samples.csv"
    with out.open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["read_rps", "write_rps", "migration_mibps", "interference", "p95_ms",
                     "p99_ms"])
        for x in rows:
            if x.get("p95_ms") in ("", "nan", None) or float(x["achieved_rps"]) <= 0:
                continue
            per = float(x["achieved_rps"]) / 3
            wr.writerow([per * ratio, per * (1 - ratio), 0, 0, x["p95_ms"], x["p99_ms"]])
    res = subprocess.run([sys.executable, "-m", "elastore", "models", "fit", "--samples",
                          str(out), "--slo-ms", str(SLO_MS), "-o",
                          str(run.root / "replay-fit.json")],
                         capture_output=True, text=True, check=False)
    print(f"the replay's own windows, fitted: {(res.stdout + res.stderr).strip()[-300:]}")


def test_the_learned_border_is_the_fitted_one_with_no_more_violations(run: Run) -> None:
    wait_until("the replay to finish", lambda: run.load.poll() is not None, 1800, every_s=5)
    assert run.load.returncode == 0, (run.root / "load.log").read_text()[-2000:]
    time.sleep(12)  # the last control period's learning
    st = run.status(LEARN)
    model = st.get("model") or {}
    got = model.get("capacityRps")
    print(f"learned: {json.dumps(model)}")
    assert model.get("source") == "learned", run.diagnostics()
    assert got is not None and model.get("samples", 0) >= 30, run.diagnostics()
    _replay_fit(run, float(model.get("readRatio") or 0.95))
    reference = run.fitted_rps
    # status.model quotes the border at the evidence's mean read ratio (the day's hours
    # write more than the sweep: 0.90-0.92 in CI) and the sweep's is at 0.95: a border is a
    # function of the read ratio, and the learned model keeps the shipped profile's shape,
    # whose capacity rises 48 % from read ratio 0.93 to 0.95 (58 -> 86 req/s per server for
    # the prior). Compared at different ratios, CI runs read 43.3 against 64.1 and 66.8
    # against 95.8; at the sweep's they are 66.1 and 85.9. The learned model is the one in
    # the policy's ConfigMap, at the sweep's read ratio.
    cm = run.cp.get_json(f"/api/v1/namespaces/{NS}/configmaps/{LEARN}-capacity-model")
    learned = ModelSet.loads(cm["data"]["model.json"], "the learned ConfigMap").capacity
    at_own = float(learned.capacity(float(model["readRatio"]), 0.0, 0.0))
    # the status's border (the ConfigMap is written each period just before the status)
    assert abs(at_own / float(got) - 1) < 0.05, (at_own, got)
    got = float(learned.capacity(run.fit_ratio, 0.0, 0.0))
    err = abs(got / reference - 1)
    print(f"border: learned {float(model['capacityRps']):.1f} req/s per server at its "
          f"evidence's read ratio {model['readRatio']}, {got:.1f} at the sweep's "
          f"{run.fit_ratio:.3f} (prior {model.get('priorCapacityRps')}), fitted from the "
          f"sweep {reference:.1f}: {100 * err:.1f} % apart; confidence "
          f"{model.get('confidence')}, observed {model.get('observedFraction')} of it")
    # each node's own coordinator p95 reached Prometheus with its pod's labels
    # (during the replay: a node that coordinated nothing for 10 s has no series)
    per_node = json.loads(run.prom_get("/api/v1/query?query=" + urllib.parse.quote(
        'max by (pod) (max_over_time(elastore_load_node_p95_ms{namespace="store"}[15m]))')))
    pods = sorted(x["metric"].get("pod", "") for x in per_node["data"]["result"])
    assert pods == [f"{STS}-{k}" for k in range(3)], per_node
    # the sweep's own resolution (its load grid's bracket, the resampled fits: see
    # _border_range); the learned border must lie within 15 % of that span
    lo, hi = _border_range(run.root / "sweep.csv", run.fit_ratio, reference)
    in_sweep = lo / 1.15 <= got <= hi * 1.15
    # and the lab's border as the sweep and the day together place it (the store drifts
    # between them: see _all_windows_fit). The span the learned border must be within 15 %
    # of is the sweep's resolution and that fit: a learner that kept the prior (0.5 x the
    # lab profile) or ran off past what it observed fails it all the same
    both = _all_windows_fit(run.root, run.fit_ratio)
    span = (lo, hi) if both is None else (min(lo, both), max(hi, both))
    inside = span[0] / 1.15 <= got <= span[1] * 1.15
    print(f"the sweep's border, as far as it resolves it: {lo:.1f}-{hi:.1f} req/s per server; "
          f"learned {got:.1f}: {'within' if in_sweep else 'NOT within'} 15 % of it; "
          f"within 15 % of the fitted {reference:.1f} itself: {'yes' if err <= 0.15 else 'no'}; "
          f"the sweep's and the day's windows fitted together: "
          f"{'-' if both is None else f'{both:.1f}'}, learned within 15 % of "
          f"{span[0]:.1f}-{span[1]:.1f}: {'yes' if inside else 'no'}")
    # what the run measured, kept beside its artifacts (pytest prints a passing test's
    # output nowhere): the closing notes quote it
    (run.root / "result.json").write_text(json.dumps({
        "learned_at_own_ratio": float(model["capacityRps"]), "own_ratio": model["readRatio"],
        "learned_at_sweep_ratio": got, "sweep_ratio": run.fit_ratio, "fitted": reference,
        "apart_pct": 100 * err, "sweep_span": [lo, hi], "all_windows_fit": both,
        "span": list(span), "within_sweep_span": in_sweep, "model": model}, indent=1))
    # the learned model is in the policy's ConfigMap, and `models show` reads it
    res = subprocess.run([sys.executable, "-m", "elastore", "models", "show", "--configmap",
                          f"{NS}/{LEARN}-capacity-model"],
                         env=dict(os.environ, KUBECONFIG=str(run.cp.kubeconfig)),
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0 and f"online by policy {LEARN}" in res.stdout, \
        res.stdout[-2000:] + res.stderr[-2000:]

    # the windows over the SLO each policy let through
    samples = run.samples
    assert samples, "no status was sampled"
    windows = _windows(run)
    over = [(t0 + secs / 2, p95, rps) for t0, secs, p95, rps in windows if p95 > SLO_MS]
    rows = []
    for mid, p95, rps in over:
        t, learn, prior, ready = min(samples, key=lambda s: abs(s[0] - mid))
        if abs(t - mid) > 5:
            continue  # no sample near it: counted for neither
        # the recommendation made for this moment: one prediction horizon earlier (the
        # window planner's desiredReplicas is the size for the forecast at now + horizon)
        ta, learn_a, prior_a, _ = min(samples, key=lambda s: abs(s[0] - (mid - HORIZON_S)))
        if abs(ta - (mid - HORIZON_S)) > 5:
            learn_a, prior_a = learn, prior  # the replay's first minute: only the one in force
        rows.append((mid, p95, rps, ready, int(learn.get("desiredReplicas") or 0),
                     _planning_rps(learn), int(prior.get("desiredReplicas") or 0),
                     int(learn_a.get("desiredReplicas") or 0),
                     int(prior_a.get("desiredReplicas") or 0)))
    with (run.root / "over-slo.csv").open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["epoch", "p95_ms", "achieved_rps", "ready", "learn_desired",
                     "learn_planning_rps", "prior_desired", "learn_desired_for_it",
                     "prior_desired_for_it"])
        wr.writerows(rows)
    for r in rows[:40]:
        print(f"  over the SLO at {r[0]:.0f}: p95 {r[1]:.0f} ms at {r[2]:.0f} req/s; ready "
              f"{r[3]}, learning policy wants {r[4]} (plans {r[5]} req/s per server; "
              f"{r[7]} recommended for it), the prior {r[6]} ({r[8]} for it)")
    # let through: the policy recommended no more servers than ran, neither for that moment
    # (the recommendation made one horizon before it: a recommendation is for the forecast
    # at now + horizon, so on the day's falling edge the one in force already serves the
    # lower load ahead, and judged against the load now it would count a correct forecast
    # as a miss) nor at it (the sample nearest the window's middle: the reactive part);
    # both policies are read from the same samples. A violation a policy
    # caused is one of a capacity shortfall: over the SLO at a load per server above the
    # reference border, where a server more was needed. Below it the reference says the
    # servers carry the load, and a window over the SLO there is this lab's noise (GC,
    # compaction) that no capacity decision answers: counted, printed, not compared (a
    # prior that is pessimistic wants more servers all day and would "answer" all of them
    # at any cost, which is what learning exists to stop).
    def let_through(k: int, among: list[tuple[Any, ...]]) -> int:
        # the recommendation made for that moment: learn_desired (4) -> learn_desired_for_it
        # (7), prior_desired (6) -> prior_desired_for_it (8)
        ahead = {4: 7, 6: 8}[k]
        return sum(1 for r in among if max(r[k], r[ahead]) <= max(r[3], 3))

    short = [r for r in rows if r[2] / 3 > reference]
    n_learn, n_prior = let_through(4, short), let_through(6, short)
    # the same, judged on the recommendation in force at the moment alone (the criterion
    # before: printed and kept, not asserted)
    at_learn = sum(1 for r in short if r[4] <= max(r[3], 3))
    at_prior = sum(1 for r in short if r[6] <= max(r[3], 3))
    print(f"windows over the SLO: {len(over)} of {len(windows)} (let through by the learning "
          f"policy {let_through(4, rows)}, by the prior alone {let_through(6, rows)}); of "
          f"them capacity shortfalls (over {reference:.1f} req/s per server): "
          f"{len(short)}, let through by the learning policy {n_learn}, by the prior alone "
          f"{n_prior} (judged on the recommendation in force at the moment only: "
          f"{at_learn} and {at_prior})")
    res = json.loads((run.root / "result.json").read_text())
    res.update(over_slo=len(over), windows=len(windows), shortfalls=len(short),
               let_through_learning=n_learn, let_through_prior=n_prior,
               let_through_at_the_moment_learning=at_learn,
               let_through_at_the_moment_prior=at_prior)
    # issue 40 part 4: the lab does not repeat itself to 15 % within a run, so the sweep is
    # made again after the day, on the store as the day left it, and the learned border
    # is judged against the range the two sweeps span
    print(f"the day is over: sweeping again (cool-down {COOL_S} s first)")
    time.sleep(COOL_S)
    after = _sweep(run.root, run.lab_dir, run.keys, "sweep-after", list(SWEEP_LOADS),
                   POINT_S, 30)
    fitted_after, _ = _fit(run.root, [after], "fit-after")
    res.update(two_sweeps(got, reference, fitted_after))
    print(f"the sweeps' borders: {reference:.1f} before the day, {fitted_after:.1f} after "
          f"({res['sweep_drift_pct']:.1f} % apart); learned {got:.1f}: "
          f"{res['apart_two_sweeps_pct']:.1f} % outside their range")
    (run.root / "result.json").write_text(json.dumps(res, indent=1))
    ok = _record(res, inside)
    assert inside, run.diagnostics()
    assert n_learn <= n_prior, run.diagnostics()
    assert ok, f"a calibration target was missed: {RESULTS / 'results.json'}"


def two_sweeps(learned: float, before: float, after: float) -> dict[str, float]:
    """The learned border against the range of the two sweeps' fitted borders (req/s per
    server, all at one read ratio): ``apart_two_sweeps_pct`` is 0 inside the range, else
    how far outside, in % of the nearer end; ``sweep_drift_pct`` how far the second sweep's
    border is from the first's. Pure."""
    lo, hi = min(before, after), max(before, after)
    if lo <= 0:
        raise ValueError(f"a sweep's border must be positive: {before}, {after}")
    outside = 0.0 if lo <= learned <= hi else \
        100 * (lo - learned) / lo if learned < lo else 100 * (learned - hi) / hi
    return {"fitted_after": after, "two_sweeps": [lo, hi],
            "sweep_drift_pct": 100 * abs(after / before - 1),
            "apart_two_sweeps_pct": outside}


#: where make lab-check keeps this measurement's figures (experiments/results.py)
RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "calibration"


def _record(res: dict[str, Any], inside: bool) -> bool:
    """experiments/calibration/results.json: the run's figures and its targets."""
    sys.path.insert(0, str(RESULTS.parent))
    from results import Target, record, summary

    RESULTS.mkdir(exist_ok=True)
    figures = {**{k: v for k, v in res.items() if k != "model"},
               "within_span": 1 if inside else 0,
               "let_through_excess": res["let_through_learning"] - res["let_through_prior"],
               "learned_model": res.get("model")}
    ok = record(RESULTS, "calibration", figures, [
        Target("apart_pct", "<=", 15.0,
               "the learned border against models fit on a sweep of the same lab, % apart "
               "(req/s per server at the sweep's read ratio)",
               "issue 18: 'within 15 % of the border elastore models fit finds'"),
        Target("within_span", ">=", 1,
               "1 when the learned border lies within 15 % of the span from the sweep's "
               "resolution to the sweep-and-day joint fit (the test's own criterion)",
               "tests/test_calibration_lab_k8s.py (stop 32)"),
        Target("let_through_excess", "<=", 0,
               "capacity shortfalls let through by the learning policy minus by the prior",
               "issue 18: 'no more SLO violations than the prior alone'"),
        Target("apart_two_sweeps_pct", "<=", 15.0,
               "the learned border outside the range of the borders fitted on a sweep "
               "before and a sweep after the day, % of the nearer end (0: inside)",
               "issue 40 part 4: 'judge the learned border against the range of the two "
               "sweeps'; 15 % as issue 18's"),
    ], notes="make lab-check's calibration: a sweep, a day of the trace, a sweep again, on "
             "the lab's real Cassandra (docs/testing.md); every run is appended to runs.jsonl")
    # every run's figures, so that the figure is reported over runs (issue 40: three at
    # least), not only the last one's
    doc = json.loads((RESULTS / "results.json").read_text())
    keep = ("learned_at_sweep_ratio", "fitted", "fitted_after", "sweep_drift_pct",
            "apart_pct", "apart_two_sweeps_pct", "within_span", "let_through_excess")
    with (RESULTS / "runs.jsonl").open("a") as fh:
        fh.write(json.dumps({"date": doc["date"], "commit": doc["commit"],
                             "dirty": doc["dirty"],
                             **{k: doc["figures"].get(k) for k in keep}}) + "\n")
    print(summary(RESULTS / "results.json"))
    return ok


def _planning_rps(status: dict[str, Any]) -> float | None:
    m = status.get("model") or {}
    v = m.get("planningCapacityRps")
    return round(float(v), 1) if isinstance(v, int | float) else None
