"""How one field of the ``ElasticPolicy`` spec is declared (:class:`F`): the core's fields
are in :mod:`elastore.operator.specfields`, a store's own part beside its driver
(``elastore.stores.<store>.spec``). Nothing else here, so that a store's declarations
import no more than this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: no default (``None`` could not say so: a default is never null in a CRD)
ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()

#: a duration as Kubernetes writes one (a subset of Go's: 500ms, 30s, 10m, 1h30m)
DURATION = "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"


def span(seconds: float) -> str:
    """Seconds as the shortest duration in whole units: 86400 -> 24h, 90 -> 90s."""
    if seconds == 0:
        return "0s"
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000)}ms"


@dataclass(frozen=True)
class F:
    """One field of the spec, as its OpenAPI schema says it."""

    path: str
    type: str
    doc: str | None = None
    default: Any = ABSENT
    minimum: float | None = None
    maximum: float | None = None
    #: the minimum is excluded (``exclusiveMinimum: true``)
    open_min: bool = False
    enum: tuple[Any, ...] | None = None
    pattern: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    #: ``x-kubernetes-list-type``
    list_type: str | None = None
    #: CEL rules (``x-kubernetes-validations``): (rule, message)
    rules: tuple[tuple[str, str], ...] = ()
    #: a duration string and its bounds in seconds, both included: the CRD checks them with
    #: a CEL rule, the parser with the same numbers (a bound, never "off": a duration of
    #: 100000h is an error, not a check switched off)
    seconds: tuple[float, float] | None = None
    required: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def parent(self) -> str:
        return self.path[:-2] if self.path.endswith("[]") else self.path.rpartition(".")[0]

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]
