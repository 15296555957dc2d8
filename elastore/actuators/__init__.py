"""Actuators: tc (BwMan), Cassandra stream throughput, Kubernetes scale (lab and operator)."""
