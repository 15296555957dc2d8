"""The real local lab: Cassandra, Prometheus, tc in a network namespace (the lab issue)."""
