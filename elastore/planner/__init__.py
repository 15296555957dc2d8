"""Decisions: the ProRenaTa planner and its guards. Pure functions over plain data."""

from elastore.planner.prorenata import plan, stabilized
from elastore.planner.types import Action, Observation, Operation, Plan, PlannerConfig

__all__ = ["Action", "Observation", "Operation", "Plan", "PlannerConfig", "plan", "stabilized"]
