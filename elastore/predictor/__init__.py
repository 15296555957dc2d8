"""Workload forecasting: ProRenaTa's predictor, its improvements and the baselines."""

from elastore.predictor.base import Predictor
from elastore.predictor.naive import Persistence, SeasonalNaive

__all__ = ["Persistence", "Predictor", "SeasonalNaive"]
