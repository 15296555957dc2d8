"""What moved the simulator's numbers when its ProRenaTa loop became the operator's (issue
13), and what separates the operator itself from it. Printed, never asserted.

Each variant runs the current code with one old behaviour put back:

* ``old-stabilization``: remember the *stabilized* desired replicas (the last 8), as the
  simulator's own loop did;
* ``old-set-points``: add each period's actions to the pending set-points, uncommitted,
  and with no action go to max(desired, target) while an operation runs;
* with ``--operator``: the operator controller as it runs, and with the simulator's
  migration-rate rule (BwMan's f() per step, cluster-p95-aware decommissions) instead of
  the throttle the operator sets.

Usage: .venv/bin/python benchmarks/loop_attribution.py [--operator]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from elastore.models.bundle import ModelSet
from elastore.planner import loop as loop_mod
from elastore.sim import controllers as ctl
from elastore.sim.cli import LAB_MODEL, PEAK_SERVERS, PLACEHOLDER
from elastore.sim.run import SimConfig, locate, simulate
from elastore.traces import builtin_trace_path, read_series


@contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def old_stabilization() -> Any:
    step = loop_mod.PolicyLoop.step

    def bugged(self: Any, memory: Any, observed: Any, forecast: Any) -> Any:
        d = step(self, memory, observed, forecast)
        rec = (*memory.recent_desired, (observed.now_s, d.desired_replicas))[-8:]
        return dataclasses.replace(d, memory=dataclasses.replace(d.memory,
                                                                 recent_desired=rec))
    return patched(loop_mod.PolicyLoop, "step", bugged)


def both(*patches: Any) -> Any:
    @contextmanager
    def cm() -> Iterator[None]:
        with ExitStack() as stack:
            for p in patches:
                stack.enter_context(p)
            yield
    return cm()


def old_set_points() -> Any:
    on_window = ctl.ProRenaTaController.on_window

    def appended(self: Any, ctx: Any) -> Any:
        on_window(self, ctx)
        d = self.decisions[-1]
        if not d.plan.actions:
            return [(ctx.now_s, max(d.desired_replicas, ctx.target) if ctx.op is not None
                     else d.desired_replicas)]
        return [(a.at_s, a.replicas) for a in d.plan.actions]

    return both(patched(ctl.ProRenaTaController, "on_window", appended),
                patched(ctl.ProRenaTaController, "replaces", False))


def simulation_rate() -> Any:
    return both(patched(ctl.OperatorController, "bwman", True),
                patched(ctl.OperatorController, "migration_mibps", lambda self: None))


def run(model: Path, controllers: list[str]) -> dict[str, Any]:
    ms = ModelSet.load(model)
    cfg = SimConfig() if model == PLACEHOLDER else SimConfig(
        peak_rps=round(PEAK_SERVERS * float(ms.capacity.capacity(0.95, 0.0, 0.0)), -1))
    series = read_series(builtin_trace_path()).cleaned()
    i0, h = locate(series, pd.Timestamp("2009-03-08"), pd.Timestamp("2009-03-22 23:00"))
    return dict(simulate(series, i0, h, controllers, ms, cfg, "attribution")
                .to_json()["controllers"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--operator", action="store_true", help="also the operator controller")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    variants: list[tuple[str, Any, list[str]]] = [
        ("now", None, ["prorenata", "perfect-forecast-window"]),
        ("old-stabilization", old_stabilization, ["prorenata", "perfect-forecast-window"]),
        ("old-set-points", old_set_points, ["prorenata", "perfect-forecast-window"]),
    ]
    if args.operator:
        variants += [("operator", None, ["operator"]),
                     ("operator, simulator's rate rule", simulation_rate, ["operator"])]
    print("| variant | model | controller | VM-hours | violation % | actions |")
    print("|---|---|---|---:|---:|---:|")
    for name, patch, controllers in variants:
        for model in (LAB_MODEL, PLACEHOLDER):
            if patch is None:
                res = run(model, controllers)
            else:
                with patch():
                    res = run(model, controllers)
            for c, m in res.items():
                print(f"| {name} | {model.stem} | {c} | {m['vm_hours']:.1f} | "
                      f"{m['slo_violation_pct']:.2f} | {m['scale_actions']} |", flush=True)


if __name__ == "__main__":
    main()
