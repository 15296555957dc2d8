"""The Swift driver; the package's docstring says what a step does."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from elastore.actuators import swiftring
from elastore.actuators.ports import (
    SWIFT_RINGS_LABEL,
    ClusterPort,
    DriftError,
    SwiftPort,
)
from elastore.actuators.swiftring import Misplaced
from elastore.errors import ElastoreError, MetricsError, StatusConflict
from elastore.operator.skew import Advice, SkewAct, SkewFacts, SkewView
from elastore.operator.spec import PolicySpec
from elastore.stores import operation
from elastore.stores.base import (
    Advanced,
    Allowed,
    EffectFailed,
    Kind,
    StoreCall,
    Why,
    under,
)
from elastore.stores.cassandra.driver import StatefulSetPods, mark_pvc, pvc_facts
from elastore.stores.operation import OperationState
from elastore.stores.swift import machine, pods, skew, weights


def _port(port: ClusterPort) -> SwiftPort:
    assert isinstance(port, SwiftPort)  # refused() said so before any call
    return port


def _pods(spec: PolicySpec, replicas: int) -> list[str]:
    return [f"{spec.target.name}-{k}" for k in range(replicas)]


class SwiftDriver(StatefulSetPods):

    def __init__(self) -> None:
        #: the target's object partitions -> bytes of a replica, from the last look at its
        #: pods (what a ring change moves is estimated from it)
        self._sizes: dict[int, int] = {}

    def refused(self, spec: PolicySpec, port: ClusterPort, allowed: Allowed) -> Why | None:
        if not isinstance(port, SwiftPort):
            return ("TargetNotSupported", "this operator's cluster port cannot read Swift "
                                          "pods and rings")
        sw = spec.target.swift
        for field_name, path in (("ringDir", sw.ring_dir), ("devicesDir", sw.devices_dir)):
            if not under(path, allowed.pod_paths):
                return ("PodPathNotAllowed", f"spec.target.swift.{field_name} {path} is not "
                        f"under a directory this operator reads in pods "
                        f"({', '.join(allowed.pod_paths)}; `elastore operator run "
                        "--pod-path`): nothing is run")
        prefix = tuple(spec.target.swift.exec_prefix)
        if prefix not in allowed.exec_prefixes:
            names = "; ".join(" ".join(c) or "(none)" for c in allowed.exec_prefixes)
            return ("ExecPrefixNotAllowed", f"spec.target.swift.execPrefix {list(prefix)} is "
                    f"not one this operator allows ({names}; `elastore operator run "
                    "--exec-prefix`): nothing is done")
        return None

    def data_bytes(self, port: ClusterPort, namespace: str, spec: PolicySpec,
                   replicas: int) -> float | None:
        """The bytes on the target's devices, read in its pods (Swift's exporters have no
        such metric): a pod that cannot be read is ``MetricsMissing``, never 0."""
        try:
            return pods.disk_bytes(_port(port), spec, namespace, _pods(spec, replicas))
        except ElastoreError as exc:
            raise MetricsError("MetricsMissing", f"dataBytes: the Swift pods' devices could "
                                                 f"not be read: {exc}") from exc

    def keep_throttles(self, call: StoreCall, period: bool) -> None:
        return None  # the replicators' rate is the pods' own config (BwMan shapes the links)

    # -- the skew view (issue 38; elastore.operator.skew's DeviceNote, SpreadAdvisor) --------
    def skew_note(self, spec: PolicySpec) -> str:
        return skew.note(spec)

    def skew_advice(self, facts: SkewFacts) -> Advice:
        return skew.advice(facts)

    # -- the skew action (issue 38; elastore.operator.skew's SkewActor): a hot device's
    # weight lowered by a bounded step, restored when the burst has passed (the pure part,
    # the bounds and the record: elastore.stores.swift.weights) ---------------------------
    def skew_in_place(self, record: Mapping[str, Any] | None) -> tuple[int, bool]:
        return weights.in_place(record)

    def skew_act(self, call: StoreCall, view: SkewView, action: str,
                 record: Mapping[str, Any] | None) -> SkewAct:
        """``act``: cut the hot device's weight; ``revert``: restore the last cut device a
        step; ``hold``/``none``: follow a change under way only. Every precondition is seen
        in the store (the rings as read, the pods' ring files and devices); the record only
        says which device and what weight to look for. The effect writes the rings computed
        here to the ConfigMap at the resourceVersion read (idempotent: a write found done
        is not repeated)."""
        try:
            rec = weights.read_record(record)
        except weights.WeightError as exc:
            msg = (f"status.skew.rebalance is not a Swift weights record ({exc}): dropped; "
                   "a device weight it named is not restored automatically "
                   "(swift-ring-builder set_weight restores one)")
            return SkewAct(None, events=(("SkewRecordUnreadable", msg[:1000], True),),
                           said=msg)
        if rec.under_way is not None:
            return self._skew_follow(call, rec)
        if action == "act":
            return self._skew_cut(call, view, rec)
        if action == "revert":
            return self._skew_revert(call, view, rec)
        return SkewAct(None if rec.empty and not record else rec.to_status())

    def _skew_ready(self, call: StoreCall
                    ) -> tuple[str, swiftring.RingFiles, pods.View] | str:
        """The rings (resourceVersion, files) and one look at the pods when a weight change
        may be made now, else why not: every pod ready, the rings readable and labelled,
        every pod on the current rings, and no earlier ring change still moving data."""
        spec, sts = call.spec, call.sts
        if sts.ready_replicas < sts.spec_replicas:
            return f"only {sts.ready_replicas} of {sts.spec_replicas} pods are ready"
        try:
            rv, rings = self._rings(call)
            seen = pods.observe(_port(call.port), spec, call.namespace,
                                _pods(spec, sts.spec_replicas), rings)
        except ElastoreError as exc:
            return f"the rings or the pods could not be read: {exc}"
        if seen.lagging:
            return f"{', '.join(seen.lagging)} do not have the current rings yet"
        if seen.progress is None:
            return seen.why
        busy = [k for k, m in seen.progress.items() if not m.done]
        if busy:
            return f"an earlier ring change is still moving data ({', '.join(busy)})"
        return rv, rings, seen

    def _skew_devices(self, call: StoreCall, rings: swiftring.RingFiles
                      ) -> dict[str, str]:
        """Each pod's device in the object ring ("ip/device"): at the pod's IP, else the one
        recorded as the pod's (``elastore-pod=`` meta)."""
        spec, port = call.spec, _port(call.port)
        table = rings.table("object")
        out: dict[str, str] = {}
        marked: dict[str, tuple[str, float, int]] | None = None
        for pod in _pods(spec, call.sts.spec_replicas):
            ip = port.pod_ip(call.namespace, pod)
            key = f"{ip}/{spec.target.swift.device}"
            if ip is None or key not in table:
                marked = rings.pod_devices("object") if marked is None else marked
                if pod not in marked:
                    raise ElastoreError(f"{pod}'s device is not in the object ring")
                key = marked[pod][0]
            out[pod] = key
        return out

    def _skew_rings(self, call: StoreCall, rings: swiftring.RingFiles, device: str,
                    weight: float) -> tuple[swiftring.RingFiles, float]:
        """The rings with ``device`` (``ip/device``) at ``weight``, rebalanced (computed on a
        copy, nothing written), and the share of partition replicas the change moves, as
        measured on the two object rings."""
        ip, _, dev = device.rpartition("/")
        new, _ = rings.change([{"op": "weight", "ip": ip, "device": dev, "zone": 0,
                                "weight": weight}])
        return new, weights.moved_fraction(rings.assignment("object"),
                                           new.assignment("object"))

    def _skew_change(self, call: StoreCall, rec: weights.Record, rv: str,
                     rings: swiftring.RingFiles, seen: pods.View, pod: str,
                     plan_at: Callable[[float], weights.WeightChange], bound: float
                     ) -> SkewAct:
        """The planned change's rings computed (on a copy) and its move measured on them,
        within ``bound`` (:func:`weights.fit`: a step that moved more is planned again,
        smaller); the record, the effect (the ConfigMap written at ``rv``) and the events.
        :class:`weights.NoCut` when no step fits."""
        def measure(p: weights.WeightChange) -> tuple[swiftring.RingFiles, float]:
            return self._skew_rings(call, rings, p.device, p.to_weight)

        plan, new, moved = weights.fit(plan_at, measure, bound)
        spec = call.spec
        cm = spec.target.swift.ring_configmap
        assert cm
        mv = swiftring.moves(rings.assignment("object"), new.assignment("object"), seen.sizes)
        mibps = call.migration_mibps()
        secs = mv.seconds(mibps, spec.node_overhead_s)
        now = call.now
        before = rec.entry(plan.device)
        original = before.from_weight if before is not None else plan.from_weight
        # a revert that put the weight back keeps the entry until the device holds its
        # partitions again (weights.restored): then the follow or the next revert drops it
        rec = rec.with_entry(weights.Entry(pod, plan.device, original, plan.to_weight, now))
        what = plan.said() + (f"; measured on the rings: {moved:.1%} of the partition "
                              f"replicas reassigned, {mv.total_bytes / 2**20:.1f} MiB to move, "
                              f"expected {secs:.0f} s at {mibps:g} MiB/s")
        if plan.action == "revert" and not plan.complete:
            what += f" (a step toward {original:g}: the rest in later steps)"
        elif plan.action == "revert" and plan.from_weight == plan.to_weight:
            what += " (the weight is back: a rebalance for the partitions still owed)"
        rec = replace(rec, under_way=weights.UnderWay(
            pod, plan.device, plan.action, plan.from_weight, plan.to_weight, now,
            100.0 * moved, secs)).said(f"{pod}: {what}")
        port, ns, device, weight = _port(call.port), call.namespace, plan.device, plan.to_weight

        def effect() -> None:
            try:
                port.write_files(ns, cm, rv, dict(new.files))
            except DriftError:
                _, now_rings = self._rings(call)  # written by an earlier run of this effect?
                try:
                    weights.check_weight(now_rings.table("object"), device, weight)
                except weights.WeightError:
                    raise DriftError(f"ConfigMap {ns}/{cm} changed since it was read: the "
                                     f"weight of {device} was not changed") from None

        reason = "SkewWeightLowered" if plan.action == "cut" else "SkewWeightRaised"
        msg = f"{pod}: {what}; coarse: the partitions that move are chosen at random"
        return SkewAct(rec.to_status(), effect, ((reason, msg[:1000], False),), said=msg)

    def _skew_cut(self, call: StoreCall, view: SkewView, rec: weights.Record) -> SkewAct:
        had = not rec.empty

        def kept(r: weights.Record) -> dict[str, Any] | None:
            return r.to_status() if had else None

        ready = self._skew_ready(call)
        if isinstance(ready, str):
            return SkewAct(kept(rec), said=f"no weight cut: {ready}")
        rv, rings, seen = ready
        events: list[tuple[str, str, bool]] = []
        try:
            devices = self._skew_devices(call, rings)
            if view.partial or set(view.names) != set(devices):
                return SkewAct(kept(rec), said="no weight cut: the loads read are not those "
                                               "of every pod of the target")
            table = rings.table("object")
            rec, events = self._skew_verified(rec, table)
            loads = {devices[n]: v for n, v in zip(view.names, view.load_rps, strict=True)
                     if v is not None}
            original = {e.device: e.from_weight for e in rec.entries}
            replicas = rings.replicas()

            def plan_at(fraction: float) -> weights.WeightChange:
                return weights.plan_cut(table, loads, fraction, replicas, original)

            hot = plan_at(view.max_move_fraction).device  # NoCut: the reason, said
            pod = next(p for p, k in devices.items() if k == hot)
            got = self._skew_change(call, rec, rv, rings, seen, pod, plan_at,
                                    view.max_move_fraction)
        except ElastoreError as exc:  # NoCut: the reason; else bad input or unreadable
            return SkewAct(kept(rec), events=tuple(events), said=f"no weight cut: {exc}")
        return replace(got, events=(*events, *got.events))

    def _skew_verified(self, rec: weights.Record, table: dict[str, tuple[float, int]]
                       ) -> tuple[weights.Record, list[tuple[str, str, bool]]]:
        """The record's entries the rings agree with (the device at the recorded weight);
        each other is dropped, with a Warning: the rings are the truth."""
        events: list[tuple[str, str, bool]] = []
        for e in rec.entries:
            try:
                weights.check_weight(table, e.device, e.to_weight)
            except weights.WeightError as exc:
                rec = rec.without(e.device)
                events.append(("SkewRecordStale", (
                    f"the rings disagree with status.skew.rebalance: {exc}, the record says "
                    f"{e.to_weight:g} (set for {e.pod}): nothing changed, the entry dropped "
                    f"(its weight before the cut was {e.from_weight:g})")[:1000], True))
        return rec, events

    def _skew_revert(self, call: StoreCall, view: SkewView, rec: weights.Record) -> SkewAct:
        entry = rec.latest()
        if entry is None:
            return SkewAct(None if rec.empty else rec.to_status(),
                           said="no weight to restore")
        keep = rec.to_status()
        try:
            _, rings0 = self._rings(call)
            table = rings0.table("object")
            weights.check_weight(table, entry.device, entry.to_weight)
        except weights.WeightError as exc:
            rest, events = self._skew_verified(rec, table)
            msg = f"no weight restored: {exc}"
            return SkewAct(rest.said(msg).to_status(), events=tuple(events), said=msg)
        except ElastoreError as exc:
            return SkewAct(keep, said=f"no weight restored: the rings could not be read: {exc}")
        try:
            done, said = self._skew_restored(rec, rings0, entry)
        except ElastoreError as exc:
            return SkewAct(keep, said=f"no weight restored: {exc}")
        if said:
            return SkewAct(done.to_status(), events=(("SkewWeightRestored", said, False),),
                           said=said)
        ready = self._skew_ready(call)
        if isinstance(ready, str):
            return SkewAct(keep, said=f"no weight restored: {ready}")
        rv, rings, seen = ready
        try:
            table = rings.table("object")
            others = [w for k, (w, _) in table.items() if k != entry.device]
            ceiling = max([call.spec.target.swift.weight, *others])
            replicas = rings.replicas()

            def plan_at(fraction: float) -> weights.WeightChange:
                return weights.plan_revert(table, entry.device, entry.to_weight,
                                           entry.from_weight, fraction, replicas, ceiling)

            return self._skew_change(call, rec, rv, rings, seen, entry.pod, plan_at,
                                     view.max_move_fraction)
        except weights.Disagrees as exc:  # changed between the two reads
            return SkewAct(keep, said=f"no weight restored: {exc}")
        except weights.NoCut as exc:
            return SkewAct(keep, said=f"no weight restored: {exc}")
        except weights.WeightError as exc:
            rest = rec.without(entry.device)
            msg = (f"status.skew.rebalance's entry for {entry.device} cannot be restored "
                   f"({exc}): nothing changed, the entry dropped")
            return SkewAct(rest.said(msg).to_status(),
                           events=(("SkewRecordStale", msg[:1000], True),), said=msg)
        except ElastoreError as exc:
            return SkewAct(keep, said=f"no weight restored: {exc}")

    def _skew_restored(self, rec: weights.Record, rings: swiftring.RingFiles,
                       entry: weights.Entry) -> tuple[weights.Record, str]:
        """The record without ``entry`` and what to say, when the rings show its device
        restored (its weight and the partitions that weight gives it); else as it was."""
        table = rings.table("object")
        if not weights.restored(table, entry.device, entry.from_weight, rings.replicas()):
            return rec, ""
        said = (f"{entry.pod}: device {entry.device} is restored: weight "
                f"{entry.from_weight:g} and {table[entry.device][1]} partition replicas")
        return rec.without(entry.device).said(said), said

    def _skew_follow(self, call: StoreCall, rec: weights.Record) -> SkewAct:
        """The change under way: written (the rings show its weight)? then the pods on the
        rings and nothing out of place clear it. Not written (the rings show the weight
        before it) or overwritten: the record follows the rings."""
        uw = rec.under_way
        assert uw is not None
        try:
            _, rings = self._rings(call)
            table = rings.table("object")
            weights.read_table(table)
        except ElastoreError as exc:
            return SkewAct(rec.to_status(), said=f"the weight change of {uw.device} under "
                                                 f"way could not be followed: {exc}")
        dev = table.get(uw.device)
        w = None if dev is None else dev[0]
        tol = weights.WEIGHT_TOLERANCE
        if w is None or abs(w - uw.to_weight) > tol:
            rest = replace(rec, under_way=None)
            if w is not None and abs(w - uw.from_weight) <= tol:
                # the effect never wrote its rings: the record goes back to what they show
                e = rec.entry(uw.device)
                if e is not None and abs(e.from_weight - w) <= tol:
                    rest = rest.without(uw.device)
                elif e is not None:
                    rest = rest.with_entry(replace(e, to_weight=w))
                msg = (f"the weight change of {uw.device} ({uw.from_weight:g} -> "
                       f"{uw.to_weight:g}) was not written: the rings still show {w:g}")
                return SkewAct(rest.said(msg).to_status(),
                               events=(("SkewWeightNotWritten", msg[:1000], True),), said=msg)
            shown = "no such device" if w is None else f"weight {w:g}"
            rest = rest.without(uw.device)
            msg = (f"the rings disagree with status.skew.rebalance: {uw.device} has "
                   f"{shown}, the record's change set {uw.to_weight:g}: nothing changed, "
                   "the entry dropped")
            return SkewAct(rest.said(msg).to_status(),
                           events=(("SkewRecordStale", msg[:1000], True),), said=msg)
        ready = self._skew_ready(call)
        took = max(0.0, call.now - uw.at)
        if isinstance(ready, str):
            late = took > uw.expected_s * 2 + 300
            msg = (f"the weight change of {uw.device} ({uw.from_weight:g} -> "
                   f"{uw.to_weight:g}) is under way for {took:.0f} s (expected "
                   f"{uw.expected_s:.0f} s{', overdue' if late else ''}): {ready}")
            return SkewAct(rec.said(msg).to_status(), said=msg)
        msg = (f"the weight change of {uw.device} ({uw.from_weight:g} -> {uw.to_weight:g}) "
               f"has moved its data: every pod has the rings and nothing is out of place "
               f"({took:.0f} s, expected {uw.expected_s:.0f} s)")
        done = replace(rec, under_way=None).said(msg)
        events: tuple[tuple[str, str, bool], ...] = (("SkewWeightSettled", msg[:1000], False),)
        entry = done.entry(uw.device)
        if uw.action == "revert" and entry is not None:
            try:
                done, said = self._skew_restored(done, ready[1], entry)
            except ElastoreError:  # the next revert looks again
                said = ""
            if said:
                msg = f"{msg}; {said}"
                events = (*events, ("SkewWeightRestored", said[:1000], False))
        return SkewAct(done.to_status(), events=events, said=msg)

    def holds(self, call: StoreCall, kind: Kind, step_to: int | None) -> Why | None:
        return None

    def supersedable(self, op: OperationState) -> bool:
        return False

    def _rings(self, call: StoreCall) -> tuple[str, swiftring.RingFiles]:
        name = call.spec.target.swift.ring_configmap
        assert name
        rv, files, labels = _port(call.port).read_files(call.namespace, name)
        if labels.get(SWIFT_RINGS_LABEL) != "true":
            raise ElastoreError(f"ConfigMap {call.namespace}/{name} is not labelled "
                                f"{SWIFT_RINGS_LABEL}=true: the operator changes rings only "
                                "where their owner said it may")
        return rv, swiftring.RingFiles(files)

    def refusal(self, call: StoreCall, kind: Kind, step_to: int | None) -> str | None:
        """Why a Swift node step may not start: the bounds, the rings readable, and for a
        scale-in enough pods left for the rings' replicas and no earlier change still
        moving data (a second change then could move a partition's last good copy)."""
        spec, sts = call.spec, call.sts
        out = self.bounds(call, kind)
        if out is not None:
            return out
        if sts.ready_replicas < sts.spec_replicas:  # a scale-out too: the rings need them all
            return f"only {sts.ready_replicas} of {sts.spec_replicas} pods are ready"
        try:
            _, rings = self._rings(call)
            replicas = rings.replicas()
            if kind == "ScaleOut":
                return None
            if sts.spec_replicas - 1 < replicas:
                return (f"the rings keep {replicas:g} replicas: {sts.spec_replicas - 1} "
                        "pods cannot hold them apart")
            view = pods.observe(_port(call.port), spec, call.namespace,
                                     _pods(spec, sts.spec_replicas), rings)
        except ElastoreError as exc:
            return f"the rings or the pods could not be read: {exc}"
        if view.lagging:
            return f"{', '.join(view.lagging)} do not have the current rings yet"
        if view.progress is None:
            return view.why
        busy = [k for k, m in view.progress.items() if not m.done]
        if busy:
            return f"an earlier ring change is still moving data ({', '.join(busy)})"
        return None

    def _facts(self, call: StoreCall, op: OperationState) -> machine.SwiftFacts:
        spec, sts = call.spec, call.sts
        port = _port(call.port)
        exists, ready = call.port.pod(call.namespace, op.pod)
        ip = port.pod_ip(call.namespace, op.pod) if exists else None
        pvc, pvc_marked = pvc_facts(call, op)
        weight = parts = None
        device_ip: str | None = None
        unknown: tuple[str, ...] = ()
        lagging: tuple[str, ...] | None = None
        progress: dict[str, Misplaced] | None = None
        why = ""
        lowering = op.kind == "ScaleIn" and op.phase == "Scaling" and \
            sts.spec_replicas > op.to_replicas  # the rings must show the device gone
        if op.phase in machine.IN_RINGS or lowering:
            try:
                _, rings = self._rings(call)
                device = spec.target.swift.device
                table = rings.table("object")
                dev = None if ip is None else table.get(f"{ip}/{device}")
                n = op.to_replicas if op.kind == "ScaleOut" else op.from_replicas
                marked = rings.pod_devices("object")
                if dev is None and op.pod in marked:  # the pod came back at a new address
                    key, w, p = marked[op.pod]
                    dev, device_ip = (w, p), key.rsplit("/", 1)[0]
                if dev is not None:
                    weight, parts = dev
                pod_ips = {a for a in (port.pod_ip(call.namespace, q)
                                       for q in _pods(spec, max(n, op.from_replicas))) if a}
                known = {k for k, _, _ in marked.values()}
                unknown = tuple(sorted({k.rsplit("/", 1)[0] for k in table
                                        if k.endswith(f"/{device}") and k not in known
                                        and k.rsplit("/", 1)[0] not in pod_ips}))
                view = pods.observe(port, spec, call.namespace, _pods(spec, n), rings)
                lagging, progress, why = view.lagging, view.progress, view.why
                self._sizes = view.sizes
                call.out["swift"] = {"diskBytes": view.disk_bytes,
                                     "laggingPods": list(lagging),
                                     "outOfPlace": None if progress is None else {
                                         k: {"handoffs": m.handoffs, "missing": m.missing,
                                             "handoffBytes": m.handoff_bytes}
                                         for k, m in progress.items()}}
            except ElastoreError as exc:
                why = str(exc)
        return machine.SwiftFacts(sts.spec_replicas, exists, ready, ip, weight, parts,
                                  lagging, progress, why, pvc, pvc_marked,
                                  device_ip=device_ip, unknown_ips=unknown)

    def advance(self, call: StoreCall, op: OperationState) -> Advanced:
        facts = self._facts(call, op)
        new, effect, done = machine.advance(op, facts, call.now, call.spec.pvc_policy)
        return Advanced(new, effect, done)

    def before_effect(self, call: StoreCall, op: OperationState, new: Advanced) -> str | None:
        return None  # the machine read the rings this tick: its facts are the check

    def apply(self, call: StoreCall, op: OperationState, new: Advanced) -> OperationState:
        """Every effect is idempotent given the facts (a device already in the rings is not
        added again; a weight already 0 stays 0). A ring change that fails is retried."""
        port, ns = call.port, call.namespace
        nxt, effect = new.operation, new.effect
        if effect == "scale" and op.kind == "ScaleIn":
            # its data seen gone, by this operation (the machine lowers a scale-in's
            # replicas only on this tick's rings); at every such effect, as Cassandra's
            mark_pvc(call, nxt)
        if effect == "scale" and op.kind == "ScaleOut" and nxt.pvc:
            port.unmark_pvc(ns, nxt.pvc)  # the ordinal comes back
        try:
            if effect == "scale":
                port.scale(ns, call.spec.target.name, nxt.to_replicas, expect=op.from_replicas)
            elif effect in ("ring-add", "ring-drain", "ring-remove", "ring-readdress"):
                nxt = self._ring_change(call, nxt, effect)
                call.save(nxt)
            elif effect == "delete-pvc" and nxt.pvc:
                port.delete_pvc(ns, nxt.pvc)
        except (DriftError, StatusConflict):
            raise  # a conflict: the ring's new state is not recorded, the tick runs again
        except ElastoreError as exc:
            raise EffectFailed("RingChangeFailed", str(exc)) from exc
        return nxt

    def _ring_change(self, call: StoreCall, op: OperationState, effect: str
                     ) -> OperationState:
        """Carry out a ring effect on the ConfigMap (read, change a copy, rebalance, write it
        back only if nobody wrote it meanwhile), and re-estimate the operation's end by the
        migration-time model from what the change moves."""
        spec, port = call.spec, _port(call.port)
        sw = spec.target.swift
        assert sw.ring_configmap
        ip = port.pod_ip(call.namespace, op.pod)
        if ip is None:
            raise ElastoreError(f"{op.pod} has no IP: its device cannot be found in the rings")
        zone = int(op.pod.rsplit("-", 1)[1]) + 1
        rv, rings = self._rings(call)
        if not self._sizes:  # what the partitions weigh: a look before the change
            with contextlib.suppress(ElastoreError):
                self._sizes = pods.observe(
                    port, spec, call.namespace,
                    _pods(spec, max(op.from_replicas, op.to_replicas)), rings).sizes
        op_name = {"ring-add": "add", "ring-drain": "weight", "ring-remove": "remove",
                   "ring-readdress": "readdress"}[effect]
        # the pod's name goes with every change: its device is found by it (and moved to
        # the pod's address) whatever address the rings have for it
        new, rebalanced = rings.change([{"op": op_name, "ip": ip, "device": sw.device,
                                         "zone": zone, "pod": op.pod,
                                         "weight": sw.weight if effect == "ring-add" else 0}])
        port.write_files(call.namespace, sw.ring_configmap, rv, dict(new.files))
        moved = swiftring.moves(rings.assignment("object"), new.assignment("object"),
                                self._sizes)
        mibps = call.migration_mibps()
        secs = moved.seconds(mibps, spec.node_overhead_s)
        what = ", ".join(f"{r.kind} {r.reassigned}" for r in rebalanced)
        msg = (f"{op.message}; rings changed (partition replicas reassigned: {what}); "
               f"{moved.total_bytes / 2**20:.1f} MiB to move, the busiest node "
               f"{max(moved.max_send_bytes, moved.max_receive_bytes) / 2**20:.1f} MiB at "
               f"{mibps:g} MiB/s: expected {secs:.0f} s")
        call.event("RingChanged", msg[:1000], False)
        now = max(call.now, call.clock())
        return replace(op, message=msg, expected_end_s=now + operation.capped(secs),
                       deadline_s=max(op.deadline_s or 0.0, operation.deadline(now, secs)))

    def stopped(self, call: StoreCall, op: OperationState) -> None:
        return None

    def abort_left(self, call: StoreCall, op: OperationState) -> str:
        if op.kind == "ScaleOut":
            return (f"the StatefulSet stays at {call.sts.spec_replicas}; {op.pod}'s device "
                    "stays in the rings if it was added (the replicators finish moving its "
                    "share)")
        if op.phase in ("Draining", "Removing"):
            return (f"{op.pod}'s device keeps the weight it has in the rings (0 once drained: "
                    "swift-ring-builder set_weight restores it) and its pod stays")
        return f"{op.pod} had left the ring; lower the replicas to {op.to_replicas} by hand"
