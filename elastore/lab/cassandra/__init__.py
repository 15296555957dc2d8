"""The Cassandra lab: real Cassandra 5.0 nodes in a network namespace (``lab``, from the jars
and configs of ``nodes``), its CQL helper (``cql``), its load generator's client (``load``)
and the sweeps measured on it (``profile``, ``bwprofile``, ``interference``)."""
