"""Naive baselines: persistence and seasonal naive (24 h, 168 h)."""

from __future__ import annotations

from elastore.predictor.base import PersistenceFallback, SeasonalNaiveFallback


class Persistence(PersistenceFallback):
    """The next value equals the last observed one (outliers screened like every method)."""

    name = "persistence"
    screen = True


class SeasonalNaive(SeasonalNaiveFallback):
    """The value one season before the target hour; across a gap, one season earlier still."""

    screen = True

    def __init__(self, season: int) -> None:
        super().__init__(season)
        self.min_history = season
