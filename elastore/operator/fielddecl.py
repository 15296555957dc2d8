"""How one field of the ``ElasticPolicy`` spec is declared (:class:`F`): the core's fields
are in :mod:`elastore.operator.specfields`, a store's own part beside its driver
(``elastore.stores.<store>.spec``). Nothing else here, so that a store's declarations
import no more than this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: no default (``None`` could not say so: a default is never null in a CRD)
ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()


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
    required: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def parent(self) -> str:
        return self.path[:-2] if self.path.endswith("[]") else self.path.rpartition(".")[0]

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]
