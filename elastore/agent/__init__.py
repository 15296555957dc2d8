"""The BwMan node agent (``elastore agent run``, a DaemonSet): shapes each managed store
pod's traffic on its node with tc, at the split the operator publishes in the policy's
``status.bandwidth``. :mod:`.desired` is pure (API objects in, wanted shaping out);
:mod:`.agent` reads the API, drives :class:`elastore.actuators.tc.PodShaper` and serves
``/metrics``."""
