"""Method names -> predictor factories (the names of the CLI contract)."""

from __future__ import annotations

from collections.abc import Callable

from elastore.errors import ElastoreError
from elastore.predictor.base import Predictor
from elastore.predictor.naive import Persistence, SeasonalNaive
from elastore.predictor.prorenata import ProRenaTa, ProRenaTaPaper
from elastore.predictor.statistical import HoltWinters, Sarima

METHODS: dict[str, Callable[[], Predictor]] = {
    "prorenata": ProRenaTa,
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


def make(name: str) -> Predictor:
    try:
        return METHODS[name]()
    except KeyError:
        raise ElastoreError(
            f"unknown prediction method {name!r}; choose from {', '.join(METHODS)}"
        ) from None


def parse_methods(spec: str) -> list[str]:
    """``all`` or a comma-separated list of method names."""
    if spec.strip() == "all":
        return list(METHODS)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        raise ElastoreError(
            f"unknown method(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from all, {', '.join(METHODS)}"
        )
    return names
