"""The stores elastore scales: one line each. ``spec.target.store`` and ``spec.target.kind``'s
enums in the CRD are written from here (:mod:`elastore.operator.specfields`), and a
policy's target picks its driver here (:func:`driver_for`). Nothing heavy is imported at
module level: the spec's schema reads this list before any driver exists."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from elastore.operator.spec import PolicySpec
    from elastore.stores.base import StoreDriver
    from elastore.stores.exporter import Exporter


@dataclass(frozen=True)
class Store:
    name: str  # the driver's name (logs, docs)
    store: str  # spec.target.store
    kind: str  # spec.target.kind
    driver: str  # "module:Class", imported when a policy needs it
    #: "module:NAME" of its exporters' presets (name -> Exporter), and the one a policy
    #: that names none reads
    presets: str
    default_preset: str
    summary: str
    #: the target's pod names, as a PromQL regex (``{name}``: the target's name, regex-
    #: escaped): the default queries' scope to its own pods
    pods: str = "{name}-[0-9]+"
    #: the target's API (group, version, plural): where the node agent reads it
    api: tuple[str, str, str] = ("apps", "v1", "statefulsets")
    #: whether the pods' controller is the target itself (a StatefulSet); else a
    #: StatefulSet that the target controls (cass-operator's), one hop up the owner chain
    owns_pods: bool = True


#: every store and kind of target a policy may name
STORES: tuple[Store, ...] = (
    Store("cassandra", "cassandra", "StatefulSet",
          "elastore.stores.cassandra.driver:CassandraDriver",
          "elastore.stores.cassandra.presets:PRESETS", "jmx-exporter",
          "replicas up; decommission, then replicas down; cleanup after a scale-out"),
    Store("cass-operator", "cassandra", "CassandraDatacenter",
          "elastore.stores.cass_operator.driver:DatacenterDriver",
          "elastore.stores.cassandra.presets:PRESETS", "management-api",
          "spec.size in rack-balanced steps; cass-operator adds and decommissions nodes",
          # cass-operator's pods: <cluster>-<datacenter>-<rack>-sts-<ordinal>
          # (pkg/reconciliation/construct_statefulset.go, NewStatefulSetName)
          pods=".+-{name}-.+-sts-[0-9]+",
          api=("cassandra.datastax.com", "v1beta1", "cassandradatacenters"), owns_pods=False),
    Store("swift", "swift", "StatefulSet", "elastore.stores.swift.driver:SwiftDriver",
          "elastore.stores.swift.presets:PRESETS", "swift-statsd",
          "rings and replicas: add the device; drain, remove it, then replicas down"),
)


def store_names() -> tuple[str, ...]:
    """``spec.target.store``'s enum (in the order first declared)."""
    return tuple(dict.fromkeys(s.store for s in STORES))


def target_kinds() -> tuple[str, ...]:
    """``spec.target.kind``'s enum (in the order first declared)."""
    return tuple(dict.fromkeys(s.kind for s in STORES))


def by_kind(kind: str) -> Store | None:
    """The first store whose targets are of ``kind`` (a kind's API and owner chain are the
    same for every store that serves it)."""
    return next((s for s in STORES if s.kind == kind), None)


def entry(store: str, kind: str) -> Store | None:
    """The store that serves ``store`` targets of ``kind``; None if none does."""
    return next((s for s in STORES if s.store == store and s.kind == kind), None)


def served() -> str:
    """The pairs served, for an error message."""
    return ", ".join(f"{s.store} as {s.kind}" for s in STORES)


def presets_of(s: Store) -> dict[str, Exporter]:
    """The store's exporter presets, by name."""
    module, _, name = s.presets.partition(":")
    got: dict[str, Exporter] = getattr(importlib.import_module(module), name)
    return got


def driver_class(s: Store) -> type[StoreDriver]:
    module, _, cls = s.driver.partition(":")
    got: type[StoreDriver] = getattr(importlib.import_module(module), cls)
    return got


def driver_for(spec: PolicySpec) -> tuple[str, StoreDriver]:
    """The name and a new driver (one per policy) for the policy's target; ``KeyError`` for
    a store and kind that no driver serves (the spec's parse refuses those first)."""
    s = entry(spec.target.store, spec.target.kind)
    if s is None:
        raise KeyError(f"no store driver serves store {spec.target.store!r} as "
                       f"{spec.target.kind}; these are served: {served()}")
    return s.name, driver_class(s)()
