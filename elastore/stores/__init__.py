"""The stores elastore scales, one driver each (:class:`~elastore.stores.base.StoreDriver`).

======================  ===================  ===================================================
driver                  ``spec.target``      what a step does
======================  ===================  ===================================================
``cassandra``           store ``cassandra``, ``replicas`` up; decommission, then ``replicas``
                        kind StatefulSet     down; cleanup after a scale-out (nodetool in pods)
``cass-operator``       store ``cassandra``, ``spec.size`` in rack-balanced steps; cass-operator
                        kind                 adds and decommissions the nodes
                        CassandraDatacenter
``swift``               store ``swift``,     rings and ``replicas``: add the device; drain,
                        kind StatefulSet     remove it, then ``replicas`` down
======================  ===================  ===================================================

Adding a store: a package here with a class that implements the Protocol (the Swift driver
is the shortest whole example), and one line in
:data:`elastore.stores.registry.STORES`, from which the CRD's store and kind enums are
written (``python -m elastore.operator.crd``).
"""

from __future__ import annotations

from elastore.stores.registry import STORES, driver_for, entry, store_names, target_kinds

__all__ = ["STORES", "driver_for", "entry", "store_names", "target_kinds"]
