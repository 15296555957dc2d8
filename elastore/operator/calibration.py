"""The capacity model's online calibration in the operator (issue 18). Pure: the runner
(:mod:`elastore.operator.runner`) reads the metrics and the learned model's ConfigMap and
writes them back; everything between is here.

* **The prior** (:func:`prior`): the policy's model (the built-in lab profile, or
  ``spec.capacityModel.configMapRef``'s) times ``spec.capacityModel.priorScale`` (0.5 for
  the built-in profile: a conservative guess for hardware it was not measured on).
* **Observations** (:func:`observations`): one per node and period, from the per-node
  queries (``nodeReadRps``, ``nodeWriteRps``, ``nodeLatencyMs``, ``nodeMigrationMiBps``):
  the node's load, read ratio, streaming and the period's interference index, against its
  latency at the SLO's percentile. None while a node step runs (a joining or leaving node
  is not a steady state). A node without a latency series is skipped and counted, never
  read as 0. A preset without a streaming metric gives no migration rate: with no
  operation under way the node is taken to stream nothing (elastore starts the topology
  changes; a repair or a rebuild someone else runs is then read as load), and said.
* **The document** (:func:`document`, :func:`learner_from_document`): the learned model in
  the existing versioned JSON (``elastore.models``, what ``models fit`` writes and ``models
  show`` reads), its ``capacity.training.online`` holding the learner's state, kept in the
  ConfigMap ``<policy>-capacity-model`` (owned by the policy: deleted with it).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

from elastore.models.bundle import ModelSet
from elastore.models.capacity import CapacityModel, ModelError
from elastore.models.online import Calibration, CapacityLearner, scaled
from elastore.operator.conditions import iso
from elastore.operator.metrics import NodeReading
from elastore.operator.spec import PolicySpec

KEY = "model.json"
SUFFIX = "-capacity-model"


def configmap_name(policy: str) -> str:
    """The learned model's ConfigMap: ``<policy>-capacity-model`` (a policy name too long
    for the suffix is cut and given a hash, so two policies never share one)."""
    name = policy + SUFFIX
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(policy.encode()).hexdigest()[:10]
    return f"{policy[:253 - len(SUFFIX) - 11]}-{digest}{SUFFIX}"


def prior(spec: PolicySpec, models: ModelSet) -> CapacityModel:
    """What the learning starts from (see the module's docstring)."""
    if spec.prior_scale == 1.0:
        return models.capacity
    return scaled(models.capacity, spec.prior_scale,
                  note=f"x{spec.prior_scale:g} (the prior of online calibration)")


def learner(spec: PolicySpec, state: dict[str, Any] | None) -> CapacityLearner:
    """The learner with the policy's settings, continued from ``state`` (None: new)."""
    fresh = CapacityLearner(confidence_threshold=spec.confidence_threshold,
                            exploration_step=spec.exploration_step)
    if state is None:
        return fresh
    old = CapacityLearner.from_dict(state)
    # the evidence is kept; the thresholds are the spec's now
    return replace(old, confidence_threshold=spec.confidence_threshold,
                   exploration_step=spec.exploration_step)


def learner_from_document(text: str | None, where: str) -> dict[str, Any] | None:
    """The learner's state in a learned model's document; None when there is no document.
    A document that is not one is a :class:`ModelError` (the runner says so and starts
    over rather than trusting it)."""
    if text is None:
        return None
    ms = ModelSet.loads(text, where)
    online = ms.capacity.training.get("online")
    state = online.get("learner") if isinstance(online, dict) else None
    if not isinstance(state, dict):
        raise ModelError("the model has no online learner state (capacity.training.online."
                         "learner)", where)
    return state


def observations(nodes: dict[str, NodeReading], index: float | None, operating: bool
                 ) -> tuple[list[list[float]], list[float], str]:
    """Rows ``(load, read ratio, migration, index)`` and latencies for the learner, and what
    the period gave. ``index`` None (interference-blind) is learned at 0: the border
    learned then includes whatever contention there was."""
    if operating:
        return [], [], "not learned: a node step is under way (not a steady state)"
    x: list[list[float]] = []
    y: list[float] = []
    no_lat, no_load, assumed = [], [], False
    for node, r in sorted(nodes.items()):
        load = r.load_rps
        if load is None or load <= 0 or r.read_rps is None:
            no_load.append(node)
            continue
        if r.latency_ms is None:
            no_lat.append(node)
            continue
        mig = r.migration_mibps
        if mig is None:
            mig, assumed = 0.0, True
        x.append([load, r.read_rps / load, mig, 0.0 if index is None else index])
        y.append(r.latency_ms)
    parts = [f"{len(x)} of {len(nodes)} node(s) observed"]
    if no_lat:
        parts.append(f"no latency series for {', '.join(no_lat)} (skipped, not 0)")
    if no_load:
        parts.append(f"no load for {', '.join(no_load)}")
    if assumed:
        parts.append("no streaming metric: no operation under way, taken as not streaming")
    return x, y, "; ".join(parts)


def document(learned: CapacityModel, state: CapacityLearner, cal: Calibration,
             base: ModelSet, policy: str, now_s: float) -> str:
    """The learned model as the existing versioned JSON, with the learner's state."""
    cap = replace(learned, training={**learned.training, "online": {
        "policy": policy, "at": iso(now_s), "summary": cal.summary(),
        "learner": state.to_dict()}})
    ms = ModelSet(capacity=cap, bandwidth=base.bandwidth,
                  source={**base.source, "learned_online": policy})
    return ms.dumps()


def to_status(spec: PolicySpec, cal: Calibration | None, learner_: CapacityLearner | None,
              observation: str, configmap: str | None, now_s: float) -> dict[str, Any]:
    """``status.model``."""
    base = "configMap" if spec.model_configmap else "builtin"
    prior_desc = (f"ConfigMap {spec.model_configmap}" if spec.model_configmap else
                  "the built-in lab profile") + (
        f" x{spec.prior_scale:g}" if spec.learn and spec.prior_scale != 1.0 else "")
    out: dict[str, Any] = {"source": "learned" if spec.learn else base, "prior": prior_desc,
                           "configMap": configmap, "observation": observation[:500],
                           "at": iso(now_s)}
    if cal is not None and learner_ is not None:
        out.update(cal.summary())
        out["skipped"] = int(sum(learner_.skipped.values()))
    return out


def gate(cal: Calibration | None) -> str | None:
    """Why a scale-in may not start while learning (None: it may)."""
    if cal is None or cal.scale_in_allowed:
        return None
    return (f"the learned capacity model's confidence is {cal.confidence:.2f}, below "
            f"the threshold: only scale-out until it is confident (status.model; "
            f"{cal.samples} observation(s), "
            f"{'border observed' if cal.border_observed else 'border not yet observed'})")


def learning_hold(cal: Calibration | None, model_status: object) -> str | None:
    """Why the learned model holds a scale-in: this period's calibration when one ran, else
    what ``status.model`` last said (None: it does not)."""
    if cal is not None:
        return gate(cal)
    m = model_status
    if isinstance(m, dict) and m.get("source") == "learned" and \
            m.get("scaleInAllowed") is False:
        return (f"the learned capacity model's confidence is {m.get('confidence')}, below "
                "the threshold: only scale-out until it is confident (status.model)")
    return None
