"""Naive baselines: persistence and seasonal naive (24 h, 168 h)."""

from __future__ import annotations

import math

from elastore.predictor.base import FloatArray, History, Predictor


class Persistence(Predictor):
    """The next value equals the last observed one."""

    name = "persistence"

    def _fit(self, history: FloatArray) -> None:
        pass

    def _update(self, value: float) -> None:
        pass

    def _forecast(self, horizon: int) -> float:
        return self.last_good_


class SeasonalNaive(Predictor):
    """The value one season before the target hour; across a gap, one season earlier still."""

    def __init__(self, season: int) -> None:
        super().__init__()
        self.season = season
        self.name = f"seasonal-naive-{season}"
        self.hist = History(4 * season)

    def _fit(self, history: FloatArray) -> None:
        self.hist = History(4 * self.season)
        self.hist.extend(history)

    def _update(self, value: float) -> None:
        self.hist.append(value)

    def _forecast(self, horizon: int) -> float:
        # target t+h; same phase k seasons earlier is (season*k - h) steps ago
        for k in range(1, 5):
            back = self.season * k - horizon
            while back < 0:
                back += self.season
            v = self.hist.ago(back)
            if not math.isnan(v):
                return v
        return self.last_good_
