"""Actuators: apply decisions, never make them. The Kubernetes actuator (scale
subresource, pods/exec nodetool, PVCs) and nodetool's own formats. The lab's tc and
BwMan loop live in :mod:`elastore.lab`."""
