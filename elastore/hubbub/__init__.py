"""Hubbub-scale (the reference text's interference-aware scaling), as one feature across the
layers it touches:

* :mod:`~elastore.hubbub.probe`: the node agent's probe, the interference index of each
  store pod from its cgroup (CPU pressure, throttling, steal) and, optionally, hardware
  counters;
* :mod:`~elastore.hubbub.effect`: the effect g(i) of an index on a node's capacity, and its
  learner (pure);
* :mod:`~elastore.hubbub.policy`: what a policy does with the index (by its mode), the
  learner's observation each period, and ``status.interference`` (pure).

The lab's interference profile (co-runners against a real store) is
:mod:`elastore.lab.cassandra.interference`.
"""
