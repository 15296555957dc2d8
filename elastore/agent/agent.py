"""The node agent's loop: read the API, work out the wanted shaping (:mod:`.desired`), make
the node's tc match it (:class:`elastore.actuators.tc.PodShaper`), export what it did.

Every period (default 5 s) it lists the pods on its node (field selector ``spec.nodeName``)
and the ElasticPolicies, then for each pod to shape finds the host end of its veth by a route
lookup of the pod IP, and installs or corrects the pod's HTBs. Whatever of its own it finds
that is no longer wanted (a pod gone, a policy gone, a pod no longer on a direct route) is
removed. Its own state is recognisable in the kernel (HTB major ``e5a``, ingress filter
priority 0xe5a, ifb devices ``esifb<N>``), so a restarted agent adopts what a killed one left
(correcting it where it differs) and removes what nobody wants. On SIGTERM it removes all of
it and exits.

When the API cannot be read, nothing is changed: a pod is never unshaped, or reshaped, on
missing information.

Each period it also measures (:mod:`.interference`): a snapshot of the kernel's stall
counters for the node and for every Running pod of a store an ElasticPolicy targets (any
mode), and the interference index over a sliding window, exported on ``/metrics``. The
probe reads files only; its failure is logged and counted and never stops the shaping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from elastore.actuators.tc import (
    AGENT_CLIENT,
    AGENT_OTHER,
    AGENT_STORAGE,
    IFB_PREFIX,
    PodShaper,
    ifb_name,
)
from elastore.agent.desired import (
    Owners,
    PodTarget,
    Problem,
    desired,
    to_read,
)
from elastore.errors import ElastoreError
from elastore.hubbub.probe import PodRef, Probe, Readings, probed_pods

log = logging.getLogger("elastore.agent")

CLASS_NAMES = {AGENT_CLIENT: "client", AGENT_STORAGE: "storage", AGENT_OTHER: "other"}


class ApiReader(Protocol):
    def pods(self, node: str) -> list[dict[str, Any]]: ...

    def policies(self) -> list[dict[str, Any]]: ...

    def target(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None: ...

    def statefulsets(self, namespace: str) -> list[dict[str, Any]]: ...


def read_owners(reader: ApiReader, policies: list[dict[str, Any]]) -> Owners:
    """The targets of the policies that ask for shaping, and, for a target whose pods a
    StatefulSet of its own runs (cass-operator's), the StatefulSets of its namespace: what a
    pod's owner chain is checked against."""
    from elastore.stores.registry import by_kind

    keys = to_read(policies)
    targets = {k: reader.target(*k) for k in keys}
    hop = dict.fromkeys(ns for ns, kind, _ in keys
                        if (s := by_kind(kind)) is not None and not s.owns_pods)
    return Owners(targets, {ns: reader.statefulsets(ns) for ns in hop})


class KubeReader:
    """Reads pods on a node and ElasticPolicies through the kubernetes client (in-cluster,
    else the kubeconfig); ``namespaces`` empty: the whole cluster."""

    def __init__(self, namespaces: tuple[str, ...] = (), kubeconfig: str | None = None,
                 timeout_s: float = 10.0) -> None:
        from kubernetes import client, config

        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        api = client.ApiClient()
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespaces, self.timeout_s = namespaces, timeout_s

    def pods(self, node: str) -> list[dict[str, Any]]:
        sel = f"spec.nodeName={node}"
        core: Any = self.core
        api = core.api_client
        if not self.namespaces:
            items = core.list_pod_for_all_namespaces(field_selector=sel,
                                                     _request_timeout=self.timeout_s).items
        else:
            items = [p for ns in self.namespaces
                     for p in core.list_namespaced_pod(ns, field_selector=sel,
                                                       _request_timeout=self.timeout_s).items]
        return [api.sanitize_for_serialization(p) for p in items]

    def target(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """The target object, read at its store's API (None: not found, or no store serves
        its kind)."""
        from kubernetes.client.exceptions import ApiException

        from elastore.stores.registry import by_kind

        store = by_kind(kind)
        if store is None:
            return None
        group, version, plural = store.api
        try:
            custom: Any = self.custom  # any API's objects, the built-in ones too
            return dict(custom.get_namespaced_custom_object(
                group, version, namespace, plural, name, _request_timeout=self.timeout_s))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def statefulsets(self, namespace: str) -> list[dict[str, Any]]:
        apps: Any = self.apps
        items = apps.list_namespaced_stateful_set(namespace,
                                                  _request_timeout=self.timeout_s).items
        return [apps.api_client.sanitize_for_serialization(s) for s in items]

    def policies(self) -> list[dict[str, Any]]:
        from elastore.actuators.k8s import POLICY_API

        group, version = POLICY_API
        custom: Any = self.custom
        if not self.namespaces:
            res = custom.list_cluster_custom_object(group, version, "elasticpolicies",
                                                         _request_timeout=self.timeout_s)
            return list(res.get("items", []))
        out: list[dict[str, Any]] = []
        for ns in self.namespaces:
            res = custom.list_namespaced_custom_object(group, version, ns,
                                                            "elasticpolicies",
                                                            _request_timeout=self.timeout_s)
            out += res.get("items", [])
        return out


@dataclass
class PodShaped:
    target: PodTarget
    host_ifindex: int
    host_ifname: str
    ifb_ifindex: int | None


@dataclass
class Report:
    """One reconcile: what was shaped, what was done, what went wrong."""

    shaped: dict[str, PodShaped] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    api_ok: bool = True
    seconds: float = 0.0


class Agent:
    def __init__(self, reader: ApiReader, netlink: Callable[[], Any], node: str,
                 metrics: AgentMetrics | None = None, probe: Probe | None = None) -> None:
        self.reader, self.netlink, self.node = reader, netlink, node
        self.metrics = metrics
        self.last: Report | None = None
        self.last_loop = 0.0
        self.probe = probe
        #: the pods the probe measures: from the last reconcile that could read the API
        self.probed: list[PodRef] = []
        #: the probe's last readings (None: none yet, or the last measurement failed)
        self.readings: Readings | None = None
        #: held while tc is changed: a cleanup waits for a change under way, never for a
        #: reconcile waiting on the API (which holds no lock)
        self._tc = threading.Lock()
        #: set by :meth:`cleanup`: no reconcile changes tc after it
        self.closed = False

    def reconcile(self) -> Report:
        t0 = time.monotonic()
        rep = Report()
        try:
            policies = self.reader.policies()
            pods = self.reader.pods(self.node)
            owners = read_owners(self.reader, policies)
        except Exception as exc:
            rep.api_ok = False
            rep.problems.append(Problem("ApiUnreadable", f"the API could not be read "
                                        f"({type(exc).__name__}: {str(exc)[:300]}): "
                                        "nothing changed"))
            return self._done(rep, t0)
        if self.probe is not None:
            try:
                self.probed = probed_pods(policies, pods, self.node)
            except Exception:  # the measurement never stands in the shaping's way
                log.exception("choosing the pods to measure")
        targets, rep.problems = desired(policies, pods, self.node, owners)
        with self._tc:
            if self.closed:  # the agent is stopping: its tc state is gone, and stays gone
                return self._done(rep, t0)
            ipr = self.netlink()
            try:
                self._apply(PodShaper(ipr), targets, rep)
            finally:
                ipr.close()
        return self._done(rep, t0)

    def _apply(self, shaper: PodShaper, targets: dict[str, PodTarget], rep: Report) -> None:
        inv = shaper.inventory()
        by_if: dict[int, list[PodTarget]] = {}
        for t in targets.values():
            idx = shaper.route_interface(t.ip)
            name = inv.names.get(idx or -1, "")
            if idx is None:
                rep.problems.append(Problem("NoRoute", f"pod {t.key}: no direct route to "
                                            f"{t.ip} on this node"))
            elif name == "lo" or name.startswith(IFB_PREFIX):
                rep.problems.append(Problem("NoRoute", f"pod {t.key}: {t.ip} routes via "
                                            f"{name}, not a pod interface"))
            elif (why := shaper.not_dedicated(idx, t.ip)) is not None:
                # a bridge, the uplink or a veth carrying more than this pod: shaping it
                # would cap other pods, or the node itself
                rep.problems.append(Problem("InterfaceShared", f"pod {t.key}: {why}: not "
                                            "shaped (needs a routed CNI, one veth per pod)"))
            else:
                by_if.setdefault(idx, []).append(t)
        keep: set[int] = set()
        for idx, ts in by_if.items():
            if len(ts) > 1:
                # a bridge or a shared device: shaping it would shape several pods as one
                rep.problems.append(Problem("InterfaceShared", f"{inv.names.get(idx)} carries "
                                            f"pods {', '.join(t.key for t in ts)}: not "
                                            "shaped (needs a routed CNI, one veth per pod)"))
                continue
            t = ts[0]
            keep.add(idx)
            try:
                for a in shaper.shape(idx, t.rates, t.ports):
                    rep.actions.append(f"{t.key} ({inv.names.get(idx)}): {a}")
            except Exception as exc:
                rep.problems.append(Problem("ShapeFailed", f"pod {t.key} on "
                                            f"{inv.names.get(idx)}: {exc}"))
                continue
            ifb = shaper.ipr.link_lookup(ifname=ifb_name(idx))
            rep.shaped[t.key] = PodShaped(t, idx, inv.names.get(idx, str(idx)),
                                          int(ifb[0]) if ifb else None)
        for a in self._remove(shaper, inv, keep):
            rep.actions.append(a)

    def _remove(self, shaper: PodShaper, inv: Any, keep: set[int]) -> Iterator[str]:
        """Everything of ours not wanted: HTBs and redirects on other interfaces, ifbs of
        interfaces not kept."""
        wanted_ifbs = {ifb_name(i) for i in keep}
        for idx in sorted(inv.interfaces() - keep):
            try:
                for a in shaper.unshape(idx, ifb=ifb_name(idx)):
                    yield f"not wanted: {a}"
            except Exception as exc:
                yield f"removing from {inv.names.get(idx)} failed: {exc}"
        for name in sorted(inv.ifbs):
            if name in wanted_ifbs:
                continue
            try:  # one that fails does not stop the others
                if shaper.ipr.link_lookup(ifname=name):
                    for a in shaper.unshape(None, ifb=name):
                        yield f"not wanted: {a}"
            except Exception as exc:
                yield f"removing {name} failed: {exc}"

    def _done(self, rep: Report, t0: float) -> Report:
        rep.seconds = time.monotonic() - t0
        self.last = rep
        self.last_loop = time.monotonic()
        for a in rep.actions:
            log.info("%s", a)
        for p in rep.problems:
            log.warning("%s: %s", p.reason, p.message)
        if self.metrics is not None:
            self.metrics.record(rep)
        return rep

    def cleanup(self) -> list[str]:
        """Remove every piece of the agent's tc state on the node (SIGTERM, uninstall), and
        let no reconcile change tc afterwards. No API call: it starts at once, even while a
        reconcile waits on an unreachable API server; a piece that cannot be removed is said
        and the rest are removed all the same."""
        with self._tc:
            self.closed = True
            ipr = self.netlink()
            try:
                shaper = PodShaper(ipr)
                done = list(self._remove(shaper, shaper.inventory(), set()))
            finally:
                ipr.close()
        for a in done:
            (log.warning if "failed" in a else log.info)("cleanup: %s", a)
        return done

    def stats(self) -> dict[tuple[str, str, str], int]:
        """Bytes per (pod key, direction, class) from the kernel, for the last shaped pods."""
        rep = self.last
        if rep is None or not rep.shaped:
            return {}
        out: dict[tuple[str, str, str], int] = {}
        ipr = self.netlink()
        try:
            shaper = PodShaper(ipr)
            for key, s in rep.shaped.items():
                for direction, idx in (("to_pod", s.host_ifindex),
                                       ("from_pod", s.ifb_ifindex)):
                    if idx is None:
                        continue
                    for h, st in shaper.class_stats(idx).items():
                        if h in CLASS_NAMES:
                            out[(key, direction, CLASS_NAMES[h])] = st["bytes"]
        finally:
            ipr.close()
        return out

    def measure(self) -> Readings | None:
        """One snapshot of the interference probe for the pods of the last reconcile that
        read the API; the readings over its window (None until it has one). Never raises:
        a failure is logged and counted and leaves no readings (unknown, not stale)."""
        if self.probe is None:
            return None
        t0 = time.monotonic()
        try:
            self.readings = self.probe.observe(self.probed)
        except Exception:
            log.exception("interference probe failed")
            self.readings = None
            if self.metrics is not None:
                self.metrics.probe_errors.inc()
        if self.metrics is not None:
            self.metrics.probe_seconds.observe(time.monotonic() - t0)
        return self.readings

    def run(self, period_s: float, stop: threading.Event, grace_s: float = 5.0) -> list[str]:
        """Reconcile and measure every ``period_s`` (in a thread of its own) until ``stop``;
        then remove everything of ours at once: a reconcile stuck on the API (its timeouts
        and retries can outlast a pod's termination grace period) is not waited for, and
        changes nothing after the cleanup. ``stop`` is waited on here, in the caller's
        thread (the signal handlers' one)."""
        loop = threading.Thread(target=self.loop, args=(period_s, stop), daemon=True,
                                name="elastore-agent-loop")
        loop.start()
        while not stop.wait(0.5):
            if not loop.is_alive():  # the loop ended by itself: a bug, said; cleaned up
                log.error("the agent's loop ended without a stop")
                break
        done = self.cleanup()
        loop.join(grace_s)
        if self.probe is not None:
            self.probe.close()
        return done

    def loop(self, period_s: float, stop: threading.Event) -> None:
        """Reconcile and measure every ``period_s`` until ``stop``."""
        while not stop.is_set():
            try:
                self.reconcile()
            except Exception as exc:  # netlink gone wrong: counted, retried next period
                log.exception("reconcile failed")
                rep = Report(problems=[Problem("ReconcileFailed",
                                               f"{type(exc).__name__}: {exc}")])
                self._done(rep, time.monotonic())
            self.measure()
            stop.wait(period_s)


class AgentMetrics:
    """``/metrics``: per shaped pod, each class's rate setting and bytes (both directions);
    reconcile errors by reason, reconcile time, pods shaped; the interference probe's
    readings (:class:`_InterferenceCollector`), its errors and time."""

    def __init__(self, agent_node: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.node = agent_node
        self.errors = Counter("elastore_agent_reconcile_errors", "Problems met while "
                              "reconciling, by reason", ["reason"], registry=self.registry)
        self.seconds = Histogram("elastore_agent_reconcile_seconds", "Time of one reconcile",
                                 registry=self.registry,
                                 buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        self.shaped = Gauge("elastore_agent_pods_shaped", "Pods shaped on this node",
                            registry=self.registry)
        self.last_ok = Gauge("elastore_agent_last_reconcile_timestamp_seconds",
                             "When the last reconcile that could read the API ended",
                             registry=self.registry)
        self.rate = Gauge("elastore_agent_class_rate_mbit", "A class's guaranteed rate, "
                          "Mbit/s", ["namespace", "pod", "direction", "class"],
                          registry=self.registry)
        self.probe_errors = Counter("elastore_interference_probe_errors", "Interference "
                                    "probe snapshots that failed", registry=self.registry)
        self.probe_seconds = Histogram("elastore_interference_probe_seconds", "Time of one "
                                       "interference probe snapshot", registry=self.registry,
                                       buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1))
        self.agent: Agent | None = None
        self.registry.register(_BytesCollector(self))
        self.registry.register(_InterferenceCollector(self))

    def record(self, rep: Report) -> None:
        for p in rep.problems:
            self.errors.labels(p.reason).inc()
        self.seconds.observe(rep.seconds)
        if not rep.api_ok:
            return
        self.last_ok.set(time.time())
        self.shaped.set(len(rep.shaped))
        self.rate.clear()
        for s in rep.shaped.values():
            t = s.target
            for direction in ("to_pod", "from_pod"):
                self.rate.labels(t.namespace, t.name, direction, "client").set(
                    t.rates.client_mbit)
                self.rate.labels(t.namespace, t.name, direction, "storage").set(
                    t.rates.storage_mbit)


class _BytesCollector:
    def __init__(self, m: AgentMetrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        fam = CounterMetricFamily("elastore_agent_class_bytes", "Bytes through a class "
                                  "(kernel counter)", labels=["namespace", "pod", "direction",
                                                              "class"])
        agent = self.m.agent
        if agent is not None:
            try:
                for (key, direction, cls), b in sorted(agent.stats().items()):
                    ns, pod = key.split("/", 1)
                    fam.add_metric([ns, pod, direction, cls], b)
            except Exception:  # a scrape never fails on netlink: the series are absent
                log.exception("reading class counters")
        yield fam

    def describe(self) -> list[Any]:
        return []


class _InterferenceCollector:
    """The probe's last readings, rendered at scrape time from one immutable object (a
    scrape never sees half a period). A store pod's series carry ``node``, ``namespace``
    and ``pod`` (the pod measured, not the agent's own: the PodMonitor honours them); the
    node's own families (``elastore_interference_node_*``) only ``node``. An unknown index
    or an unavailable signal has no series at all (never 0)."""

    def __init__(self, m: AgentMetrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        node = self.m.node
        pod_labels = ["node", "namespace", "pod"]
        index = GaugeMetricFamily(
            "elastore_interference_index", "A store pod's interference index in [0, 1]: the "
            "fraction of its wall time lost to contention (latency at equal load ~ "
            "1/(1-index)); the node's when the pod's cgroup is not read (see "
            "elastore_interference_pod_cgroup)", labels=pod_labels)
        node_index = GaugeMetricFamily(
            "elastore_interference_node_index", "The node's interference index in [0, 1] "
            "(system-wide PSI, steal, hardware counters)", labels=["node"])
        signal = GaugeMetricFamily(
            "elastore_interference_signal", "One component of a store pod's index, a "
            "fraction of wall time in [0, 1] over the window", labels=[*pod_labels, "signal"])
        in_index = GaugeMetricFamily(
            "elastore_interference_signal_in_index", "1: the signal is a term of the pod's "
            "index; 0: available, not a term (unavailable signals have no series)",
            labels=[*pod_labels, "signal"])
        node_signal = GaugeMetricFamily(
            "elastore_interference_node_signal", "One component of the node's index, a "
            "fraction of wall time in [0, 1] over the window", labels=["node", "signal"])
        node_in_index = GaugeMetricFamily(
            "elastore_interference_node_signal_in_index", "1: the signal is a term of the "
            "node's index; 0: available, not a term", labels=["node", "signal"])
        cgroup = GaugeMetricFamily(
            "elastore_interference_pod_cgroup", "1: the pod's index is from its own cgroup; "
            "0: it is the node's, for the reason given (NoCgroup, NoHistory, NoPodPsi)",
            labels=[*pod_labels, "reason"])
        window = GaugeMetricFamily("elastore_interference_window_seconds", "The time "
                                   "between the two snapshots of the readings",
                                   labels=["node"])
        hw_ok = GaugeMetricFamily("elastore_interference_hw_available", "1: hardware "
                                  "counters are read (the 'hw' signal once the IPC "
                                  "reference is known)", labels=["node"])
        hw = {k: GaugeMetricFamily(f"elastore_interference_{k}", h, labels=["node"])
              for k, h in (("ipc", "Instructions per cycle, all CPUs, over the window"),
                           ("llc_mpki", "Last-level cache misses per 1000 instructions"),
                           ("ipc_reference", "The IPC reference: 90th percentile of the "
                                             "per-period IPC over the last hour"))}
        agent = self.m.agent
        r = agent.readings if agent is not None else None
        if agent is not None and agent.probe is not None:
            hw_ok.add_metric([node], 1.0 if agent.probe.hw is not None else 0.0)
        if r is not None:
            window.add_metric([node], r.window_s)
            if r.node.index is not None:
                node_index.add_metric([node], r.node.index)
            for name, v in sorted(r.node.components.items()):
                node_signal.add_metric([node, name], v)
                node_in_index.add_metric([node, name], float(name in r.node.used))
            for k, hv in (("ipc", r.ipc), ("llc_mpki", r.llc_mpki),
                          ("ipc_reference", r.ipc_reference)):
                if hv is not None:
                    hw[k].add_metric([node], hv)
            for key, pr in sorted(r.pods.items()):
                ns, pod = key.split("/", 1)
                if pr.index is not None:
                    index.add_metric([node, ns, pod], pr.index)
                cgroup.add_metric([node, ns, pod, pr.reason], float(pr.scope == "pod"))
                for name, v in sorted(pr.components.items()):
                    signal.add_metric([node, ns, pod, name], v)
                    in_index.add_metric([node, ns, pod, name], float(name in pr.used))
        yield from (index, node_index, signal, in_index, node_signal, node_in_index, cgroup,
                    window, hw_ok, *hw.values())

    def describe(self) -> list[Any]:
        return []


def serve(metrics: AgentMetrics, agent: Agent, port: int, addr: str, period_s: float
          ) -> Any:
    """``/metrics`` and ``/healthz`` (200 while the loop has run within 3 periods)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                body, ctype, code = generate_latest(metrics.registry), CONTENT_TYPE_LATEST, 200
            elif self.path.startswith("/healthz"):
                fresh = time.monotonic() - agent.last_loop < 3 * period_s + 10
                body = b"ok\n" if fresh else b"the reconcile loop is stuck\n"
                ctype, code = "text/plain", 200 if fresh else 503
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    httpd = ThreadingHTTPServer((addr, port), Handler)
    threading.Thread(target=httpd.serve_forever, name="agent-metrics", daemon=True).start()
    return httpd


def netlink_factory(netns: str | None) -> Callable[[], Any]:
    """A new pyroute2 handle per call: in ``netns`` (a test bed's namespace, which must be one
    of elastore's) or, by default, the agent's own (the host's, with hostNetwork)."""
    def open_() -> Any:
        # the agent extra's: where it is missing, the command says so (elastore.cliutil)
        from pyroute2 import IPRoute, NetNS

        return IPRoute() if netns is None else NetNS(netns)

    if netns is not None and not netns.startswith("elastore-"):
        raise ElastoreError(f"--netns must name one of elastore's namespaces, got {netns!r}")
    return open_
