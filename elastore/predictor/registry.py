"""Method names -> predictor factories (the names of the CLI contract)."""

from __future__ import annotations

from collections.abc import Callable

from elastore.errors import ElastoreError
from elastore.predictor.base import Predictor
from elastore.predictor.mstl import Mstl, MstlLog
from elastore.predictor.naive import Persistence, SeasonalNaive
from elastore.predictor.prorenata import ProRenaTa, ProRenaTaPaper
from elastore.predictor.statistical import HoltWinters, Sarima

METHODS: dict[str, Callable[[], Predictor]] = {
    "prorenata": ProRenaTa,
    # the default before issue 21: the three filters' plain mean, no profile, no correction
    "prorenata-filters": lambda: ProRenaTa(combine="mean", correct=False),
    "prorenata-paper": ProRenaTaPaper,
    "prorenata-paper-printed": lambda: ProRenaTaPaper(trigger="printed"),
    "holt-winters": HoltWinters,
    "holt-winters-damped-mul": lambda: HoltWinters(seasonal="mul"),
    "sarima": Sarima,
    "seasonal-naive-24": lambda: SeasonalNaive(24),
    "seasonal-naive-168": lambda: SeasonalNaive(168),
    "persistence": Persistence,
}
DEFAULT_METHOD = "prorenata"
#: Baselines for ``predict evaluate`` only, never a policy's method (the operator's image
#: does not carry their dependencies); named explicitly, not part of ``all``.
BASELINES: dict[str, Callable[[], Predictor]] = {
    "mstl": Mstl,  # statsforecast: pip install 'elastore[forecast]'
    "mstl-log": MstlLog,  # the same, on log(1 + load), over all history (issue 40)
    # prorenata without its reactive correction (the ablation in docs/predictor.md)
    "prorenata-weighted": lambda: ProRenaTa(combine="weighted", correct=False),
}
#: the optional extra (pyproject.toml) a baseline needs beyond the package's dependencies
NEEDS_EXTRA = {"mstl": "forecast", "mstl-log": "forecast"}


def make(name: str) -> Predictor:
    try:
        return {**METHODS, **BASELINES}[name]()
    except KeyError:
        raise ElastoreError(
            f"unknown prediction method {name!r}; choose from "
            f"{', '.join([*METHODS, *BASELINES])}"
        ) from None


def parse_methods(spec: str) -> list[str]:
    """A comma-separated list of method names; ``all`` stands for every policy method
    (the baselines of :data:`BASELINES` are named on their own: ``all,mstl``)."""
    names: list[str] = []
    for s in (s.strip() for s in spec.split(",")):
        if s == "all":
            names += [n for n in METHODS if n not in names]
        elif s and s not in names:
            names.append(s)
    unknown = [n for n in names if n not in METHODS and n not in BASELINES]
    if unknown or not names:
        raise ElastoreError(
            f"unknown method(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from all, {', '.join([*METHODS, *BASELINES])}"
        )
    return names
