"""elastore: predictive, migration-aware elasticity for storage clusters.

Data flows one way: metrics -> forecast (``predictor``) -> capacity models (``models``)
-> decisions (``planner``) -> ``actuators``. See ARCHITECTURE.md.
"""

__version__ = "0.1.0"
