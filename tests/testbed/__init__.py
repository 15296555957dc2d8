"""The test bed: what only the tests and the Makefile use, kept out of the installed package
(and so out of the operator image).

* :mod:`testbed.k8s` builds a real Kubernetes control plane (kube-apiserver,
  controller-manager, scheduler, etcd, kwok) from the Go module proxy and runs it on
  loopback;
* :mod:`testbed.podexec` is what kwok runs for ``kubectl exec`` into a test pod: the lab's
  real nodetool against that pod's Cassandra node;
* :mod:`testbed.forward` forwards a loopback port into the lab's network namespace.
"""
