"""OpenStack Swift in a StatefulSet: a node step changes the rings (in the ConfigMap the pods
read them from) as well as the replicas. A scale-out adds the new pod's device once the pod
runs; a scale-in drains the device (weight 0), waits for the replicators to move its data,
removes it from the rings, and only then lowers the replicas
(:mod:`elastore.stores.swift.machine` is the step machine; the pods' ring files and
devices are read through commands in them, :mod:`elastore.stores.swift.pods`).

A device is removed only when the rings show it with weight 0 and no partitions, and the
replicas are lowered only when the rings the pods have mounted no longer list it.
"""
