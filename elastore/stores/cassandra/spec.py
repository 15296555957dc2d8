"""Cassandra's part of the ``ElasticPolicy`` spec: the nodetool command its steps run, the
cleanup after a scale-out, the repair hold, and its BwMan ports; declared (the CRD's schema
is written from :data:`TARGET_FIELDS` and :data:`STEP_FIELDS`, spliced into the core's
order) and read (:func:`parse_nodetool`, :func:`parse_steps`). The core's fields and
readers are :mod:`elastore.operator.specfields` and :mod:`elastore.operator.spec`; Swift's
part is :mod:`elastore.stores.swift.spec`."""

from __future__ import annotations

from typing import Any

from elastore.operator.fielddecl import F

#: the ports BwMan tells Cassandra's client traffic from its storage traffic by: the
#: native protocol; inter-node messaging and streaming, plain and TLS
CLIENT_PORTS: tuple[int, ...] = (9042,)
STORAGE_PORTS: tuple[int, ...] = (7000, 7001)

#: ``spec.target``'s Cassandra fields
TARGET_FIELDS: tuple[F, ...] = (
    F("spec.target.nodetool", "array",
      min_items=1,
      max_items=4,
      default=("nodetool",),
      doc=("the nodetool command, before its arguments (decommission, netstats, "
           "setstreamthroughput): one of the commands the operator allows (elastore "
           "operator run --nodetool; the chart's nodetool.allowed), never free text")),
    F("spec.target.nodetool[]", "string",
      min_length=1,
      max_length=256,
      pattern="^[A-Za-z0-9_./+-]+$"),
)

#: what a Cassandra node step does besides the step itself: cleanup, the repair hold
STEP_FIELDS: tuple[F, ...] = (
    F("spec.scaleUp", "object"),
    F("spec.scaleUp.cleanup", "boolean",
      default=True,
      doc=("after each scale-out, nodetool cleanup on every old node, one at a time, "
           "throttled to the migration rate; no scale-in starts until it is done "
           "(Cassandra targets; a StatefulSet target only: cass-operator runs its own)")),
    F("spec.repairs", "object"),
    F("spec.repairs.hold", "boolean",
      default=True,
      doc=("no topology change starts while a node shows a repair (compactionstats: "
           "Validation or Anticompaction; netstats: a Repair session), unless the forecast "
           "puts the SLO at risk (said in a RepairOverridden Event)")),
)


def parse_nodetool(target: dict[str, Any]) -> tuple[str, ...]:
    """``spec.target.nodetool``: 1 to 4 words, never a shell line (the operator runs it
    as argv, and only a command ``elastore operator run --nodetool`` allows)."""
    from elastore.operator.spec import _ARG, SpecError, _read

    nodetool = _read(target, "spec.target.nodetool")
    if not isinstance(nodetool, list) or not 1 <= len(nodetool) <= 4 or not all(
            isinstance(x, str) and _ARG.match(x) for x in nodetool):
        raise SpecError("must be 1 to 4 words of letters, digits and _ . / + - (a command, "
                        "not a shell line)", "spec.target.nodetool")
    return tuple(nodetool)


def parse_steps(spec: dict[str, Any], store: str) -> tuple[bool, bool]:
    """``spec.scaleUp.cleanup`` (only a Cassandra store cleans up: false for any other)
    and ``spec.repairs.hold``."""
    from elastore.operator.spec import SpecError, _read

    up = {} if spec.get("scaleUp") is None else spec["scaleUp"]
    if not isinstance(up, dict):
        raise SpecError("must be an object", "spec.scaleUp")
    repairs = {} if spec.get("repairs") is None else spec["repairs"]
    if not isinstance(repairs, dict):
        raise SpecError("must be an object", "spec.repairs")
    cleanup = _read(up, "spec.scaleUp.cleanup")
    hold = _read(repairs, "spec.repairs.hold")
    for v, where in ((cleanup, "spec.scaleUp.cleanup"), (hold, "spec.repairs.hold")):
        if not isinstance(v, bool):
            raise SpecError(f"must be true or false, got {v!r}", where)
    return cleanup and store == "cassandra", hold
