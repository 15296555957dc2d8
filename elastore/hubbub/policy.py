"""Hubbub-scale in the operator (reference text 5.4): which interference index a period
plans with, what the store's own measurements teach about its effect, and the capacity
model the planner then reads. Pure: the runner (:mod:`elastore.operator.runner`) fetches the
two numbers and writes the status; everything between is here.

* **The index** (:func:`read`). ``spec.interference.enabled`` absent is *Auto*: the index
  when the query returns it (by default the node agent's ``elastore_interference_index``,
  averaged over the target's pods), and when it does not, the period plans
  interference-blind and says so (``status.interference.source: none`` with the reason, an
  Event, the metric ``elastore_interference_blind``); a missing index is never read as 0.
  ``true``: the index is required, as every other metric: without it the period decides
  nothing (``Degraded``). ``false``: blind, by choice.
* **Learning** (:func:`learn`). Each period with an index and the store's latency at the
  SLO's percentile (query ``latencyMs``) gives the learner
  (:class:`~elastore.hubbub.effect.InterferenceLearner`) one observation: the load per
  serving node, the read ratio, the migration per node, the index and the latency. None
  while a node step runs (the load per node is not known then); a missing latency is
  skipped and counted, never 0.
* **The model** (:func:`planning_models`). The capacity model's interference-free slice with
  the learned effect ``g`` over the whole [0, 1]; the learner's prior is the model's own
  effect (an offline ``--interference-effect learned`` fit), else for a query of the
  policy's own the model's profiled axis (that index is on the profile's scale, the contract
  ``queries.interference`` always had), else the agent index's definition ``1 / (1 - i)``.
* **The state** lives in ``status.interference.learned`` (a few hundred bytes): a
  restarted operator continues from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from elastore.errors import MetricsError
from elastore.hubbub.effect import (
    InterferenceEffect,
    InterferenceError,
    InterferenceLearner,
)
from elastore.models.bundle import ModelSet
from elastore.models.capacity import CapacityModel
from elastore.operator.conditions import iso
from elastore.operator.metrics import Snapshot
from elastore.operator.spec import PolicySpec

#: ``status.interference.factors``: g at these indexes, for readers
FACTOR_AT = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def mode(spec: PolicySpec) -> str:
    """``Auto`` (``spec.interference.enabled`` absent), ``Enabled`` or ``Disabled``."""
    return {None: "Auto", True: "Enabled", False: "Disabled"}[spec.interference]


def own_query(spec: PolicySpec) -> bool:
    """Whether the index comes from the policy's own ``queries.interference``."""
    return spec.prometheus is not None and "interference" in spec.prometheus.queries


@dataclass(frozen=True)
class Reading:
    """The index a period plans with (None: blind), where it came from, and why."""

    index: float | None
    source: str  # agent, query, none
    reason: str


def read(spec: PolicySpec, fetch: Callable[[], float]) -> Reading:
    """The period's index by the spec's mode; ``fetch`` queries it (a
    :class:`MetricsError` when there is none). Raises :class:`MetricsError` only when the
    index is required (``enabled: true``) or Prometheus failed otherwise than by having no
    series (unreachable, a refused query): those hold the period as any missing metric."""
    m = mode(spec)
    if m == "Disabled":
        return Reading(None, "none", "spec.interference.enabled is false: the plan ignores "
                                     "interference")
    source = "query" if own_query(spec) else "agent"
    what = "spec.metrics.prometheus.queries.interference" if source == "query" else \
        "the node agent's elastore_interference_index for the target's pods"
    try:
        value = fetch()
        if not 0 <= value <= 1:
            raise MetricsError("MetricsMissing", f"interference: {value:g} is outside [0, 1] "
                                                 "(not an index)")
    except MetricsError as exc:
        if m == "Enabled":
            raise MetricsError(exc.reason, f"{exc} (spec.interference.enabled is true: no "
                                           "decision without the index)") from exc
        if exc.reason != "MetricsMissing":
            raise
        return Reading(None, "none", f"Auto: no interference index ({what}: {exc}); planning "
                                     "interference-blind, as if the index were unknown, not 0")
    return Reading(float(value), source, f"{what}: {value:.3f}")


def learner_from_status(status: Any) -> InterferenceLearner:
    """The learner in ``status.interference.learned``; an unreadable one is forgotten (a
    fresh learner: the prior), never trusted."""
    s = status if isinstance(status, dict) else {}
    doc = (s.get("interference") or {}).get("learned") if isinstance(
        s.get("interference"), dict) else None
    if doc is None:
        return InterferenceLearner()
    try:
        return InterferenceLearner.from_dict(doc)
    except InterferenceError:
        return InterferenceLearner()


def prior(capacity: CapacityModel, source: str) -> InterferenceEffect:
    """What the learner starts from (see the module's docstring)."""
    if capacity.interference_effect is not None:
        return capacity.interference_effect
    if source == "query" and len(capacity.interference_axis) > 1:
        return InterferenceEffect.from_profile(capacity)
    return InterferenceEffect.definition()


def learn(learner: InterferenceLearner, capacity: CapacityModel, snap: Snapshot,
          serving: int, index: float, latency_ms: float | None, operating: bool,
          start: InterferenceEffect) -> str:
    """Give the learner this period's observation; ``"used"`` or why it was not."""
    if operating:
        return "not learned: a node step is under way (the load per node is not known)"
    n = max(1, serving)
    migration = np.nan if snap.migration_mibps is None else snap.migration_mibps / n
    latency = np.nan if latency_ms is None else latency_ms
    why = learner.observe([snap.load_rps / n, snap.read_ratio, migration, index], [latency],
                          base=capacity, prior=start)[0]
    if why == "used":
        return "used"
    detail = {"missing": "an input is missing (latency or migration not measured)",
              "range": "the latency is outside what the model's interference-free curve "
                       "can be inverted at",
              "flat": "the load is too light for the latency to tell"}[why]
    return f"skipped ({why}): {detail}"


def planning_models(models: ModelSet, effect: InterferenceEffect) -> ModelSet:
    """``models`` with the capacity model's interference axis the effect."""
    return replace(models, capacity=models.capacity.with_interference_effect(effect))


def to_status(spec: PolicySpec, reading: Reading, learner: InterferenceLearner,
              effect: InterferenceEffect | None, latency_ms: float | None, observation: str,
              now_s: float) -> dict[str, Any]:
    """``status.interference``."""
    factor = 1.0 if reading.index is None or effect is None else \
        float(effect.factor(reading.index))
    out: dict[str, Any] = {
        "mode": mode(spec), "source": reading.source,
        "index": None if reading.index is None else round(reading.index, 4),
        "factor": round(factor, 4), "reason": reading.reason[:1000],
        "latencyMs": None if latency_ms is None else round(latency_ms, 3),
        "observation": observation[:300], "at": iso(now_s),
        "learned": learner.to_dict(),
    }
    base = learner.base_ratio()
    if base is not None:
        out["baseRatio"] = round(base, 4)
    if effect is not None:
        out["prior"] = str(effect.details.get("prior", effect.source))
        out["factors"] = [round(float(g), 3) for g in effect.factor(np.asarray(FACTOR_AT))]
    return out
