"""Every exporter preset a policy may name (``spec.metrics.prometheus.preset``), gathered
from the stores (:mod:`elastore.stores.registry`: each store's presets live beside its
driver) and the default each target gets. The quantities and :class:`Exporter` are
:mod:`elastore.stores.exporter`'s."""

from __future__ import annotations

from elastore.stores.exporter import INTERFERENCE, OPTIONAL, QUERY_NAMES, Exporter
from elastore.stores.registry import STORES, presets_of

__all__ = ["DEFAULT_PRESET", "INTERFERENCE", "OPTIONAL", "PRESETS", "QUERY_NAMES", "Exporter",
           "default_preset"]

#: every preset, by name (a name two stores both give is one exporter: the registry
#: refuses two different ones)
PRESETS: dict[str, Exporter] = {}
for _s in STORES:
    for _name, _exp in presets_of(_s).items():
        if PRESETS.setdefault(_name, _exp) is not _exp:
            raise ValueError(f"preset {_name!r} is defined twice, differently ({_s.name})")
#: the preset of a policy that names none and whose store is not known yet (the first
#: store's): the spec's parse gives each target its own store's default
DEFAULT_PRESET = STORES[0].default_preset


def default_preset(store: str, kind: str) -> str:
    """The preset a target reads when its policy names none."""
    from elastore.stores.registry import entry

    s = entry(store, kind)
    return s.default_preset if s is not None else DEFAULT_PRESET
