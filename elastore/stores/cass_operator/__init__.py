"""Cassandra run by cass-operator: the target is a ``CassandraDatacenter``, elastore sets its
``spec.size`` in rack-balanced steps and follows cass-operator while it adds or decommissions
the nodes (:mod:`elastore.stores.cass_operator.machine` is the step machine). elastore
keeps the timing, the stream throttle and the guards; it never decommissions a
datacenter's node itself, and lowers the size only on cass-operator's own word that it is
idle, and on the ring and space checks read through a pod."""
