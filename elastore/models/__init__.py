"""Capacity (SLO border), BwMan bandwidth and migration-time models. Pure: no I/O except
the explicit load/save of the model file."""

from elastore.models.bandwidth import Allocation, BandwidthModels, Policy
from elastore.models.bundle import ModelSet, fit_models
from elastore.models.capacity import CapacityModel, ModelError, fit_capacity
from elastore.models.migration import MigrationEstimate, MigrationModel, data_to_move_bytes

__all__ = [
    "Allocation",
    "BandwidthModels",
    "CapacityModel",
    "MigrationEstimate",
    "MigrationModel",
    "ModelError",
    "ModelSet",
    "Policy",
    "data_to_move_bytes",
    "fit_capacity",
    "fit_models",
]
