"""Decisions: the ProRenaTa planner and its guards, the policy loop around it, and BwMan's
bandwidth split. Pure functions over plain data."""

from elastore.planner.prorenata import plan
from elastore.planner.stabilization import stabilized
from elastore.planner.types import (
    Action,
    LoadSkew,
    Observation,
    Operation,
    Plan,
    PlannerConfig,
)

__all__ = ["Action", "LoadSkew", "Observation", "Operation", "Plan", "PlannerConfig", "plan",
           "stabilized"]
