"""The estimate stage: the models a plan is made with, from the shipped (or fitted) ones and
what the store was seen doing. Pure, and the one copy: the operator's control period
(:mod:`elastore.operator.period`) and the simulator's controllers
(:mod:`elastore.sim.controllers`) both call it, so the simulator measures the estimate the
operator makes.

Two parts, in the order the data flows (metrics -> forecast -> **models** -> planner):

* :func:`calibrated`: the capacity model learned online (:mod:`elastore.models.online`):
  this period's observations go into the learner, and the plan uses its calibration
  (the median border once confident, the cautious one until then); scale-in is allowed
  only once it is confident;
* the interference effect (``elastore.hubbub.policy.planning_models``), where a
  policy learns one: the capacity the planner reads is lowered by the learned slowdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from elastore.models.bundle import ModelSet
from elastore.models.capacity import CapacityModel
from elastore.models.online import Calibration, CapacityLearner


@dataclass(frozen=True)
class Calibrated:
    models: ModelSet  # what the planner reads: the capacity is the calibration's
    calibration: Calibration

    @property
    def scale_in_allowed(self) -> bool:
        return self.calibration.scale_in_allowed


def calibrated(models: ModelSet, learner: CapacityLearner, prior: CapacityModel,
               x: Sequence[Sequence[float]], y: Sequence[float], headroom: float
               ) -> Calibrated:
    """Feed this period's observations (rows of load per node in requests/s, read ratio,
    migration in MiB/s and interference index, against the latency in ms) to ``learner``
    (changed in place: it is the policy's state) and plan with its calibration."""
    if len(x):
        learner.observe(x, y, prior=prior)
    cal = learner.calibrate(prior, headroom)
    return Calibrated(replace(models, capacity=cal.planning), cal)
