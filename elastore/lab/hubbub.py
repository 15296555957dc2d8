"""The four-phase Hubbub-scale experiment's pure parts (reference text 5.4.1, Fig. 5.25):
the schedule of load and interference, and the controllers' sizing rules. The experiment
itself (real lab, real co-runners, the operator's planner) is ``experiments/hubbub/run.py``.

Phases, each ``phase_s`` long:

1. load rises and falls, no interference;
2. constant load while interference rises and falls;
3. load rises and falls under constant interference;
4. both vary (interference falls while load rises, then both rise).

Interference is a co-runner level (stress-ng workers pinned to the store's CPUs); load is
cluster requests/s. Both are step functions over control periods.

Controllers, each ``blind`` (interference-unaware) or ``hubbub`` (interference-aware):

* **workload-based**: the operator's planner (``elastore.operator.policyloop.decide``) on the
  observed client load, with the capacity model; ``hubbub`` passes the measured index and
  uses the model with the learned interference effect, ``blind`` passes 0;
* **CPU-based**: sized on the store's measured CPU use, as an HPA on CPU would be:
  ``ceil(cpu_cores / (target × per_node_cores))``, where ``target`` is the utilisation the
  store reaches at its SLO capacity without interference; ``hubbub`` divides the target by
  the learned slowdown factor ``g(index)`` (a server that loses time to a neighbour breaks
  its SLO at a lower utilisation of its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elastore.errors import ElastoreError

PHASES = 4


@dataclass(frozen=True)
class Step:
    t_s: float  # from the start of the run
    phase: int  # 1..4
    load_rps: float
    level: int  # co-runner workers (0: none)


def _round(v: float) -> int:
    """Half up (Python's round() goes to even: 0.5 -> 0, 2.5 -> 2)."""
    return math.floor(v + 0.5)


def _tri(x: float) -> float:
    """0 -> 1 -> 0 over x in [0, 1]."""
    return 1.0 - abs(2.0 * x - 1.0)


def schedule(phase_s: float, period_s: float, low_rps: float, high_rps: float,
             max_level: int, mid_level: int | None = None) -> list[Step]:
    """The run as steps of ``period_s``: the four phases of ``phase_s`` each."""
    if not (0 < period_s <= phase_s):
        raise ElastoreError(f"want 0 < period ({period_s}) <= phase ({phase_s}) seconds")
    if not (0 < low_rps < high_rps):
        raise ElastoreError(f"want 0 < low ({low_rps}) < high ({high_rps}) requests/s")
    if max_level < 1:
        raise ElastoreError("the top interference level must be at least 1 worker")
    mid = mid_level if mid_level is not None else max(1, _round(max_level / 2))
    n = max(2, round(phase_s / period_s))
    out = []
    for phase in range(1, PHASES + 1):
        for k in range(n):
            x = (k + 0.5) / n
            up = _tri(x)
            load = low_rps + (high_rps - low_rps) * up
            if phase == 1:
                level = 0
            elif phase == 2:
                load, level = (low_rps + high_rps) / 2, _round(max_level * up)
            elif phase == 3:
                level = mid
            else:
                level = _round(max_level * (1 - x)) if x < 0.5 else _round(max_level * x)
            out.append(Step(((phase - 1) * n + k) * period_s, phase, round(load, 1),
                            int(level)))
    return out


def cpu_replicas(cpu_cores: float, per_node_cores: float, target: float, factor: float,
                 lo: int, hi: int) -> int:
    """The CPU-based sizing: enough nodes that the store's CPU use is at most ``target /
    factor`` of their CPU (``factor`` = g(index) >= 1 for Hubbub-scale, 1 when blind)."""
    for name, v in (("cpu_cores", cpu_cores), ("per_node_cores", per_node_cores),
                    ("target", target), ("factor", factor)):
        if not math.isfinite(v) or v < 0:
            raise ElastoreError(f"{name} must be a finite non-negative number, got {v}")
    if per_node_cores <= 0 or target <= 0 or factor < 1:
        raise ElastoreError("per_node_cores and target must be > 0 and factor >= 1")
    need = math.ceil(cpu_cores * factor / (target * per_node_cores) - 1e-9)
    return max(lo, min(hi, need))
