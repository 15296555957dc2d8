"""One tick of a policy's loop: what was read, what was judged, and the status being
written (:class:`Tick`). The runner (:mod:`elastore.operator.runner`), the control period
(:mod:`elastore.operator.period`) and the step starter (:mod:`elastore.operator.stepping`)
share it for the length of one tick; nothing in it outlives the tick."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from elastore.actuators.ports import StatefulSetFacts
from elastore.models.bundle import ModelSet
from elastore.models.online import Calibration
from elastore.operator import controls, policyloop
from elastore.operator.conditions import set_condition
from elastore.operator.spec import PolicySpec
from elastore.stores import operation
from elastore.stores.base import StoreDriver, Target

Conditions = list[dict[str, Any]]


@dataclass
class Tick:
    """One tick's working state: what was read, and the status being written."""

    body: dict[str, Any]
    now: float
    status: dict[str, Any]  # as read
    conds: Conditions
    gen: int
    out: dict[str, Any] = field(default_factory=dict)  # the status patch
    #: the policy's resourceVersion as this tick read it, then as its own writes left it:
    #: every status write of the tick is made only if it is still that (StatusConflict)
    version: str | None = None
    spec: PolicySpec | None = None
    sts: StatefulSetFacts | None = None
    #: the target as its store's driver read it (``sts`` is its sizes)
    target: Target | None = None
    driver: StoreDriver | None = None
    memory: policyloop.Memory = field(default_factory=policyloop.Memory)
    evidence: bool = False  # the last observation succeeded
    blocked: tuple[str, str] | None = None  # (reason, message): Enforce may not touch it
    operation: operation.OperationState | None = None  # the one in progress, if any
    ring_checked: bool = False  # the ring was judged fit for a decommission this tick
    period: bool = False  # a control period was due this tick
    stream_mibps: float | None = None  # the stream throttle decided this tick
    model_status: dict[str, Any] | None = None  # status.model, when a period ran
    calibration: Calibration | None = None  # this period's, when learning
    pause: controls.Pause = field(default_factory=lambda: controls.Pause(False))
    #: the models this period's plan used (learned and interference-adjusted), for the
    #: SLO-risk gauge
    planned_with: ModelSet | None = None
    interference_index: float = 0.0
    #: consecutive failed observations, as the status had them (updated by the period)
    fallback: controls.Fallback = field(default_factory=controls.Fallback)
    #: MetricsPartial as judged this tick (False: not judged yet)
    partial: tuple[str, str] | Literal[False] | None = False

    def pods(self) -> list[str]:
        """The target's pods now: ordinals up to the larger of its replicas and the
        operation's ``toReplicas`` (the operation as this tick leaves it)."""
        assert self.spec is not None and self.driver is not None and self.target is not None
        op = self.out["operation"] if "operation" in self.out else \
            self.status.get("operation")
        to = op.get("toReplicas") if isinstance(op, dict) else None
        return self.driver.pods(self.spec, self.target, to if isinstance(to, int) else None)

    @property
    def last_decision(self) -> dict[str, Any]:
        return dict(self.out.get("lastDecision") or self.status.get("lastDecision") or {})

    def cond(self, ctype: str, status: bool, reason: str, message: str) -> None:
        self.conds = set_condition(self.conds, ctype, status, reason, message, self.now)
