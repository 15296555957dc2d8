"""Cassandra in a StatefulSet of the user's: elastore adds a node by raising ``replicas`` and
removes one by decommissioning it first (``nodetool`` in its pod), then, after a scale-out,
cleans the old nodes up (:mod:`elastore.stores.cassandra.machine` is the step machine).

Irreversible effects wait for the store's own word, never the status's: ``replicas`` goes
down only when the leaving node reports DECOMMISSIONED itself and another node's ring no
longer lists its host ID; a PVC is deleted only if it carries this operation's own mark,
set when this operation saw its node leave. A scale-out onto an ordinal whose PVC an
earlier scale-in retained deletes that PVC first (Cassandra will not restart a
decommissioned node on its data), on that scale-in's mark and a ring with no member
beyond the pods.
"""
