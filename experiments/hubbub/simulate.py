"""Hubbub-scale's four phases (reference text 5.4.1, Fig. 5.25) in simulation, on the
interference the lab measured (issue 40, part 3).

The lab cannot run the experiment itself (README.md beside this file: on 2 cores an added
node adds no CPU). Its *physics* it did measure: at a fixed load, how much each co-runner
level slows the store's p95 and what the probe's index reads then
(``experiments/profiles/lab-interference-noquota.json``). This script replays the four
phases on that physics:

* **the store**: the lab capacity model's interference-free latency at the load per node,
  times the slowdown the lab measured at the index the co-runners produce
  (``p95 = latency0(L / n) x s(index)``; ``s`` the isotonic least-squares fit of the lab's
  points in log slowdown, interpolated between them, 1 at the index the store reads
  alone). Measured p95 windows (5 s) carry
  the simulator's lognormal noise (0.1);
* **the phases** (:func:`elastore.lab.hubbub.schedule`): load rises and falls; constant
  load while the co-runners rise and fall; load rises and falls under a constant level;
  both vary. Each level's index is the lab's mean reading at that level;
* **the controllers**, reactive as in the reference (each period sizes the next on what
  this one measured):

  - ``blind-workload``: the capacity model at index 0, on the load;
  - ``hubbub-workload``: the same model with the interference effect the operator's own
    learner (:class:`elastore.hubbub.effect.InterferenceLearner`) learns online from the
    periods' (load per node, index, p95), starting from the index's definition
    ``g = 1 / (1 - i)``, as a fresh policy does; ``--warm`` first runs the schedule once
    to train it (the reference's models were "well warmed up").

  - ``blind-cpu``: sizes on the store's CPU use, as a CPU-utilisation autoscaler does: the
    cluster's CPU seconds per second over what one node spends at its interference-free
    capacity. Under a co-runner the store spends more CPU per request (cache and memory
    stalls count as CPU time), by the ratio the lab measured for that kind and level
    (``experiments/interference/cpu/points.json``, ``--cpu-profile``), so a CPU-based
    sizing sees part of the interference; it sizes on ``L x r(level)`` req/s of
    interference-free work;
  - ``hubbub-cpu``: the same CPU-keyed model with the interference effect the operator's
    learner learns online from (CPU use per node in those units, index, p95): the
    reference's CPU-based performance model with the index folded in.

``run.py``'s real-lab ``hubbub-cpu`` scales the CPU use by the workload model's factor
instead; here the effect is learned in the CPU's own units, so a kind whose CPU per
request already rises is not counted twice.

Writes ``RESULTS.md`` with ``hubbub_violation_ratio`` and ``hubbub_vm_ratio`` (the blind
controller's violated windows over Hubbub-scale's in phases 2-4; Hubbub-scale's server-hours
over the blind one's), by ``run.py``'s own :func:`ratios`, and the lab's measured
``index_slowdown_spearman`` beside them.

    .venv/bin/python experiments/hubbub/simulate.py [--kind stream] [--warm] [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from elastore.errors import ElastoreError
from elastore.hubbub.effect import InterferenceEffect, InterferenceLearner, isotonic
from elastore.hubbub.policy import planning_models
from elastore.lab.hubbub import schedule
from elastore.models.bundle import ModelSet
from elastore.sim.cli import LAB_MODEL

HERE = Path(__file__).resolve().parent
#: ``make lab-check``'s measurement of the index's rank correlation with the slowdown
LAB_CHECK = HERE.parent / "interference" / "results.json"


def _lab_check_spearman(path: Path) -> dict[str, Any] | None:
    """The lab-check's ``index_slowdown_spearman`` with its point length, commit and date,
    or None when that measurement has not written its results (it is quoted, not needed)."""
    try:
        doc = json.loads(path.read_text())
        return {"value": float(doc["figures"]["index_slowdown_spearman"]),
                "point_seconds": float(doc["figures"]["point_seconds"]),
                "commit": str(doc.get("commit", "?"))[:7],
                "date": str(doc.get("date", "?"))[:10]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
PROFILE = HERE.parent / "profiles" / "lab-interference-noquota.json"
#: the lab's store CPU per request under each co-runner (``interference/run.py --out
#: experiments/interference/cpu``)
CPU_PROFILE = HERE.parent / "interference" / "cpu" / "points.json"
READ_RATIO = 0.95
WINDOW_S = 5.0
NOISE = 0.1  # the simulator's latency noise (lognormal sigma), elastore.sim.run.SimConfig
HEADROOM = 0.1


def _run_module() -> Any:
    spec = importlib.util.spec_from_file_location("hubbub_run", HERE / "run.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class LabPhysics:
    """The lab's measured interference, for one co-runner kind: each level's index and
    the p95 slowdown at a given index."""

    def __init__(self, profile: dict[str, Any], kind: str) -> None:
        pts = profile.get("points") or []
        alone = [p for p in pts if p.get("kind") == "none"]
        mine = [p for p in pts if p.get("kind") == kind]
        if not alone or not mine:
            kinds = sorted({str(p.get("kind")) for p in pts} - {"none"})
            raise ElastoreError(f"the profile has no points for kind {kind!r} (and alone); "
                                f"it has {', '.join(kinds) or 'none'}")
        self.kind = kind
        self.alone_index = float(np.mean([p["index"] for p in alone]))
        levels = sorted({int(p["level"]) for p in mine})
        self.level_index = {0: self.alone_index} | {
            lv: float(np.mean([p["index"] for p in mine if int(p["level"]) == lv]))
            for lv in levels}
        x = np.array([self.alone_index] + [float(p["index"]) for p in mine])
        y = np.array([1.0] + [max(1.0, float(p["slowdown"])) for p in mine])
        order = np.argsort(x)
        self.x = x[order]
        # monotone (more index, no less slowdown): the least-squares isotonic fit of the
        # lab's points in log slowdown, not their running maximum (an upper envelope)
        self.y = np.exp(isotonic(np.log(y[order]), np.ones(len(y))))
        self.points = len(mine)

    @property
    def max_level(self) -> int:
        return max(self.level_index)

    def index(self, level: int) -> float:
        return self.level_index[min(level, self.max_level)]

    def slowdown(self, index: float) -> float:
        return float(np.interp(index, self.x, self.y, left=1.0))


class CpuPhysics:
    """The lab's measured CPU per request under one co-runner kind, relative to the store
    alone: ``ratio(level)`` (1 at level 0; between measured levels, linear; above the
    highest, the highest's)."""

    def __init__(self, doc: dict[str, Any], kind: str) -> None:
        d = (doc.get("kinds") or {}).get(kind) or {}
        pairs = sorted((int(lv), float(r)) for lv, r in
                       zip(d.get("levels") or [], d.get("cpu_ratio") or [], strict=False)
                       if r is not None and math.isfinite(float(r)) and float(r) > 0)
        if not pairs:
            raise ElastoreError(f"the CPU profile has no CPU-per-request ratios for kind "
                                f"{kind!r} (a sweep before the column, or no such kind)")
        base = doc.get("baseline_cpu_ms_per_request") or {}
        self.kind = kind
        self.alone_ms = {str(k): v for k, v in base.items()}
        lv = sorted({p[0] for p in pairs})
        self.levels = [0, *lv]
        self.ratios = [1.0, *(float(np.median([r for x, r in pairs if x == v])) for v in lv)]

    def ratio(self, level: int) -> float:
        return float(np.interp(level, self.levels, self.ratios))


def true_capacity(ms: ModelSet, slowdown: float) -> float:
    """The load per node (req/s) at which the simulated store's p95 meets the SLO under
    ``slowdown`` (bisection on the model's interference-free curve)."""
    cap = ms.capacity
    lo, hi = 0.0, float(cap.capacity(READ_RATIO, 0.0, 0.0))
    if slowdown <= 1.0:
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if float(cap.latency_ms(mid, READ_RATIO, 0.0, 0.0)) * slowdown <= cap.slo_ms:
            lo = mid
        else:
            hi = mid
    return lo


def run(name: str, steps: list[Any], ms: ModelSet, phys: LabPhysics, period_s: float,
        lo: int, hi: int, rng: np.random.Generator,
        learner: InterferenceLearner | None = None, oracle: bool = False,
        cpu: CpuPhysics | None = None) -> dict[str, Any]:
    """One controller over the schedule; per phase, the 5-s windows, those over the SLO
    and the server-hours (``run.py``'s summary), and per period what it saw and did.
    With ``cpu`` the controller sizes on the store's CPU use (in req/s of
    interference-free work) instead of its load."""
    cap = ms.capacity
    slo = cap.slo_ms
    prior = InterferenceEffect.definition()
    n = max(lo, min(hi, cap.servers_needed(steps[0].load_rps, READ_RATIO, 0.0, HEADROOM)))
    per_phase: dict[int, dict[str, float]] = {}
    periods: list[dict[str, Any]] = []
    windows = max(1, round(period_s / WINDOW_S))
    for step in steps:
        i = phys.index(step.level)
        s = phys.slowdown(i)
        truth = float(cap.latency_ms(step.load_rps / n, READ_RATIO, 0.0, 0.0)) * s
        seen = truth * np.exp(NOISE * rng.standard_normal(windows))
        ph = per_phase.setdefault(step.phase, {"windows": 0, "violations": 0,
                                               "server_hours": 0.0})
        ph["windows"] += windows
        ph["violations"] += int((seen > slo).sum())
        ph["server_hours"] += n * period_s / 3600
        measured = float(np.quantile(seen, 0.5))
        # what the controller sizes on: the load, or the CPU the store spent on it
        work = step.load_rps * (cpu.ratio(step.level) if cpu is not None else 1.0)
        if oracle:  # the physics itself: what holding the SLO costs at the least
            per_node = true_capacity(ms, s)
            factor = float(cap.capacity(READ_RATIO, 0.0, 0.0)) / max(per_node, 1e-9)
            want = max(1, math.ceil(step.load_rps / (per_node * (1 - HEADROOM)) - 1e-9))
        elif learner is None:
            want = cap.servers_needed(work, READ_RATIO, 0.0, HEADROOM)
            factor = 1.0
        else:
            learner.observe([work / n, READ_RATIO, 0.0, i], [measured], base=cap,
                            prior=prior)
            effect = learner.effect(prior)
            factor = float(effect.factor(i))
            want = planning_models(ms, effect).capacity.servers_needed(
                work, READ_RATIO, i, HEADROOM)
        periods.append({"t_s": step.t_s, "phase": step.phase, "load_rps": step.load_rps,
                        "work_rps": round(work, 1),
                        "level": step.level, "index": round(i, 4), "nodes": n,
                        "p95_ms": round(measured, 3), "factor": round(factor, 3)})
        n = max(lo, min(hi, want))  # the next period's size: reactive
    return {"controller": name, "phases": per_phase, "periods": periods}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", default="stream", help="co-runner kind (run.py's default)")
    ap.add_argument("--phase-minutes", type=float, default=8.0)
    ap.add_argument("--period", type=float, default=30.0, help="control period, seconds")
    ap.add_argument("--low", type=float, default=1.5, help="lowest load, x one node's "
                    "interference-free capacity")
    ap.add_argument("--high", type=float, default=4.5, help="highest load, same unit")
    ap.add_argument("--min", type=int, default=2)
    ap.add_argument("--max", type=int, default=20)
    ap.add_argument("--warm", action="store_true", help="train Hubbub-scale's learner on "
                    "one pass of the schedule first")
    ap.add_argument("--seeds", type=int, default=5, help="noise seeds (results: the sums)")
    ap.add_argument("--profile", type=Path, default=PROFILE)
    ap.add_argument("--cpu-profile", type=Path, default=CPU_PROFILE,
                    help="the lab's CPU per request under each co-runner (points.json of "
                    "experiments/interference/run.py); the CPU-based pair needs it")
    ap.add_argument("--lab-check", type=Path, default=LAB_CHECK,
                    help="the interference measurement's results.json (make lab-check)")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    try:
        profile = json.loads(args.profile.read_text())
        phys = LabPhysics(profile, args.kind)
    except (OSError, ValueError, ElastoreError) as exc:
        print(f"error: {args.profile}: {exc}", file=sys.stderr)
        return 2
    try:
        cpu_phys = CpuPhysics(json.loads(args.cpu_profile.read_text()), args.kind)
    except (OSError, ValueError, ElastoreError) as exc:
        print(f"error: {args.cpu_profile}: {exc}", file=sys.stderr)
        return 2
    ms = ModelSet.load(LAB_MODEL)
    cap0 = float(ms.capacity.capacity(READ_RATIO, 0.0, 0.0))
    steps = schedule(args.phase_minutes * 60, args.period, args.low * cap0,
                     args.high * cap0, phys.max_level)
    total: dict[str, dict[str, Any]] = {}
    for seed in range(args.seeds):
        learner, learner_cpu = InterferenceLearner(), InterferenceLearner()
        if args.warm:
            run("warm-up", steps, ms, phys, args.period, args.min, args.max,
                np.random.default_rng(1000 + seed), learner)
            run("warm-up", steps, ms, phys, args.period, args.min, args.max,
                np.random.default_rng(1000 + seed), learner_cpu, cpu=cpu_phys)
        for name, ln, c in (("blind-workload", None, None), ("hubbub-workload", learner, None),
                            ("blind-cpu", None, cpu_phys), ("hubbub-cpu", learner_cpu, cpu_phys),
                            ("physics-workload", None, None)):
            r = run(name, steps, ms, phys, args.period, args.min, args.max,
                    np.random.default_rng(seed), ln, oracle=name == "physics-workload", cpu=c)
            acc = total.setdefault(name, {"controller": name, "phases": {}})
            for ph, v in r["phases"].items():
                a = acc["phases"].setdefault(ph, {"windows": 0, "violations": 0,
                                                  "server_hours": 0.0})
                for k in a:
                    a[k] += v[k]
            if seed == 0:
                acc["periods"] = r["periods"]
    results = list(total.values())
    ratios = _run_module().ratios
    viol, vm = ratios(results, "workload")
    viol_cpu, vm_cpu = ratios(results, "cpu")
    # the bound: a controller that knows the physics (the true slowdown), also reactive
    bound = [dict(r, controller=r["controller"].replace("physics", "hubbub"))
             for r in results if r["controller"] in ("blind-workload", "physics-workload")]
    b_viol, b_vm = ratios(bound, "workload")
    bound_cpu = [dict(r, controller=r["controller"].replace("physics-workload", "hubbub-cpu"))
                 for r in results if r["controller"] in ("blind-cpu", "physics-workload")]
    bc_viol, bc_vm = ratios(bound_cpu, "cpu")

    def shown(v: Any) -> Any:
        if isinstance(v, Path) and v.resolve().is_relative_to(HERE.parent.parent):
            return v.resolve().relative_to(HERE.parent.parent)
        return v

    rho = float(profile.get("index_slowdown_spearman", math.nan))
    measured = _lab_check_spearman(args.lab_check)
    lines = [
        "# Hubbub-scale's four phases, simulated on the lab's measured interference", "",
        "Simulated, not run on the lab: `experiments/hubbub/simulate.py` (this file's "
        "settings at the end). The store's p95 is the lab capacity model's at the load per "
        "node times the p95 slowdown the lab measured at the co-runners' index "
        f"(`{args.profile.name}`, kind `{phys.kind}`, {phys.points} points). Both "
        "controllers are reactive; `hubbub-workload` and `hubbub-cpu` learn the "
        "interference effect online with the operator's learner" + (
            " after one warm-up pass" if args.warm else ", from the index's definition") +
        ". The CPU-based pair sizes on the store's CPU use: its CPU per request under the "
        f"co-runner is the lab's measured ratio to the store alone (`{shown(args.cpu_profile)}`"
        f", kind `{cpu_phys.kind}`: " + ", ".join(
            f"level {lv} x{r:.2f}" for lv, r in zip(cpu_phys.levels[1:], cpu_phys.ratios[1:],
                                                     strict=True)) + ").", "",
        f"hubbub_violation_ratio: {viol:.2f}",
        f"hubbub_vm_ratio: {vm:.2f}",
        f"hubbub_violation_ratio_cpu: {viol_cpu:.2f}",
        f"hubbub_vm_ratio_cpu: {vm_cpu:.2f}",
        (f"index_slowdown_spearman: {measured['value']:.3f} (measured on the lab by "
         f"`make lab-check`, {measured['point_seconds']:.0f}-s points, commit "
         f"{measured['commit']}, {measured['date']}: `{shown(args.lab_check)}`; the profile "
         f"the physics above comes from measured {rho:.3f} on its own points)"
         if measured else
         f"index_slowdown_spearman: {rho:.3f} (the profile's own points; no `make "
         f"lab-check` result at `{shown(args.lab_check)}`)"), "",
        "The bound: `physics-workload` sizes on the simulated store's true capacity at "
        "each period's slowdown (reactive, the same headroom), so its server-hours are "
        "the least that holds the SLO here: against the blind controller, violation ratio "
        f"{b_viol:.2f}, server-hour ratio {b_vm:.2f}; against the blind CPU-based one, "
        f"{bc_viol:.2f} and {bc_vm:.2f}.", "",
        "Levels: " + ", ".join(f"{lv}: index {phys.index(lv):.3f}, slowdown "
                               f"{phys.slowdown(phys.index(lv)):.2f}"
                               for lv in sorted(phys.level_index)), "",
        f"Each row sums {args.seeds} noise seeds.", "",
        "| controller | phase | 5-s windows | over the SLO | server-hours |",
        "|---|---|---:|---:|---:|"]
    for r in results:
        for ph, v in sorted(r["phases"].items()):
            lines.append(f"| {r['controller']} | {ph} | {v['windows']} | "
                         f"{v['violations']} | {v['server_hours']:.3f} |")
    lines += ["", "Settings: " + " ".join(f"--{k.replace('_', '-')} {shown(v)}" for k, v in
                                          sorted(vars(args).items()) if k != "out"), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "RESULTS.md").write_text("\n".join(lines))
    (args.out / "simulated-periods.json").write_text(json.dumps(
        {r["controller"]: r["periods"] for r in results}, indent=0))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
