"""What every Cassandra target shares, a StatefulSet of elastore's or a cass-operator
datacenter: the stream throttle kept on every node, the repair hold, and the ring and space
checks before a decommission, all through ``nodetool`` in the pods."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from elastore.actuators.ports import ClusterPort, NodetoolPort, TokenMovePort
from elastore.errors import ElastoreError
from elastore.operator.skew import Advice, HotSample, SkewAct, SkewFacts, SkewView
from elastore.operator.spec import PolicySpec
from elastore.stores.base import Allowed, Kind, StoreCall, Why
from elastore.stores.cassandra import move, skew
from elastore.stores.cassandra.ring import decommission_refusal

log = logging.getLogger("elastore.operator")

#: nodetool calls in flight at once (one per pod): throttles, repair reads
MAX_PARALLEL_EXECS = 8


def nodetool(port: ClusterPort) -> NodetoolPort:
    """The port's nodetool calls (a Cassandra driver's ``refused`` said it has them)."""
    assert isinstance(port, NodetoolPort)
    return port


class CassandraNodes:
    """The nodetool side of a Cassandra driver. Remembers, for its one policy, which pods
    got which throttle from this process (never the status: a restarted operator sets every
    pod again)."""

    def __init__(self) -> None:
        #: pod -> (its identity, the stream throttle it got, MiB/s as applied)
        self._throttled: dict[str, tuple[str, float]] = {}
        #: pod -> (its identity, the throttle that failed on it): retried the next period
        self._throttle_failed: dict[str, tuple[str, float]] = {}
        #: the stream throttle this process decided last (MiB/s, as asked)
        self.stream_mibps: float | None = None
        #: each pod's tokens as the last skew sample read them (reused while the ring
        #: shows the same tokens)
        self._skew_tokens: dict[str, tuple[int, ...]] | None = None

    # -- what the operator lets a policy run -----------------------------------------------
    def refused(self, spec: PolicySpec, port: ClusterPort, allowed: Allowed) -> Why | None:
        if not isinstance(port, NodetoolPort):
            return ("TargetNotSupported", "this operator's cluster port cannot run nodetool "
                                          "in pods")
        if spec.enforce and tuple(spec.target.nodetool) not in allowed.nodetools:
            names = "; ".join(" ".join(c) for c in allowed.nodetools)
            return ("NodetoolNotAllowed", f"spec.target.nodetool "
                    f"{list(spec.target.nodetool)} is not one of the commands this operator "
                    f"runs ({names}; `elastore operator run --nodetool`, the chart's "
                    "nodetool.allowed): nothing is done")
        return None

    def data_bytes(self, port: ClusterPort, namespace: str, spec: PolicySpec,
                   replicas: int) -> float | None:
        return None  # Cassandra's exporters have the load

    # -- the skew view (issue 38; elastore.operator.skew's HotSampler, SpreadAdvisor) --------
    def skew_sample(self, port: ClusterPort, namespace: str, spec: PolicySpec,
                    pods: list[str], now_s: float) -> HotSample:
        """The ring's tokens per pod and the hot partitions (:mod:`.skew`); each pod's
        tokens are read again only when the ring no longer matches the last sample's."""
        got = skew.sample(port, namespace, spec.target.container, spec.target.nodetool,
                          pods, spec.target.replication_factor, now_s,
                          spec.skew.sample_duration_s, known=self._skew_tokens)
        if got.ring is not None:
            self._skew_tokens = dict(zip(got.ring.names, got.ring.tokens, strict=True))
        return got

    def skew_advice(self, facts: SkewFacts) -> Advice:
        return skew.advice(facts)

    # -- Auto's bounded move (issue 38; elastore.operator.skew's SkewActor) ----------------
    def skew_in_place(self, record: Mapping[str, Any] | None) -> tuple[int, bool]:
        return move.in_place(record)

    def skew_act(self, call: StoreCall, view: SkewView, action: str,
                 record: Mapping[str, Any] | None) -> SkewAct:
        """Follow a move under way, else carry out ``act`` (a bounded move) or ``revert``
        (the last move undone), each seen in the store first (:mod:`.move`)."""
        port = call.port
        if not isinstance(port, TokenMovePort):
            return SkewAct(None if record is None else dict(record),
                           said="this operator's port cannot move tokens")
        try:
            rec = move.read_record(record)
        except ElastoreError as exc:
            return SkewAct(move.Record(last=f"the record was not read: {exc}; nothing in it "
                                            "is acted on", last_s=call.now).to_status(),
                           events=(("SkewRecordRejected", f"status.skew.rebalance was not "
                                    f"read ({exc}): nothing in it is acted on", True),),
                           said=f"the record was not read: {exc}")
        spec, ns = call.spec, call.namespace
        box, tool = spec.target.container, spec.target.nodetool
        if rec.under_way is not None:
            return self._follow_move(call, port, rec)
        if action not in ("act", "revert"):
            return SkewAct(rec.to_status())
        pods = list(view.names)
        try:
            store = move.StoreRing(
                {p: port.node_tokens(ns, p, box, tool) for p in pods},
                tuple(n.state for n in nodetool(port).ring(ns, pods[0], box, tool).nodes))
        except ElastoreError as exc:
            return SkewAct(rec.to_status(), said=f"the ring could not be read: {exc}; no move")
        unfit = store.unfit(pods)
        if unfit is not None:
            return SkewAct(rec.to_status(), said=f"no move: {unfit}")
        rf = spec.target.replication_factor
        if action == "revert":
            if not rec.moves:
                return SkewAct(rec.to_status())
            last, why = move.revert_target(rec, store, pods, rf, view.max_move_fraction)
            if last is None:
                drop = rec.moves[-1]
                msg = (f"the move of {drop.pod} ({drop.from_token} -> {drop.to_token}) is not "
                       f"undone: {why}; it is dropped from the record, nothing is touched")
                new = move.Record(rec.moves[:-1], None, msg, call.now)
                return SkewAct(new.to_status(), events=(("SkewRevertSkipped", msg, True),),
                               said=msg)
            uw = move.UnderWay(last.pod, last.to_token, last.from_token, "Revert", call.now,
                               last.streamed_percent)
            msg = (f"undoing the move of {last.pod}: token {last.to_token} -> "
                   f"{last.from_token} ({why} of the data streamed)")
            new_rec = move.Record(rec.moves[:-1], None, rec.last, rec.last_s)
            return move.start(new_rec, uw, msg, port, ns, box, tool,
                              ("SkewRevertStarted", msg, False))
        mv, why = move.plan(view, rec)
        if mv is None:
            return SkewAct(rec.to_status(), said=f"no move: {why}")
        sampled = view.ring
        assert sampled is not None
        if any(store.tokens[p] != tuple(sampled.tokens[sampled.index(p)]) for p in pods):
            return SkewAct(rec.to_status(), resample=True,
                           said="no move: the ring changed since the sample (sampled again)")
        if store.tokens.get(mv.node) != (mv.from_token,) or \
                any(mv.to_token in t for t in store.tokens.values()):
            return SkewAct(rec.to_status(), resample=True,
                           said=f"no move: the store does not bear out the planned move of "
                                f"{mv.node}")
        pct = 100.0 * mv.moved_fraction
        uw = move.UnderWay(mv.node, mv.from_token, mv.to_token, "Move", call.now, pct)
        msg = (f"moving {mv.node}'s token {mv.from_token} -> {mv.to_token}: {pct:.2f} % of "
               f"the data streams (maxMovePercent {spec.skew.max_move_percent:g}); the "
               f"busiest pod's modelled share x{mv.imbalance_before:.2f} -> "
               f"x{mv.imbalance_after:.2f} of the mean")
        return move.start(rec, uw, msg, port, ns, box, tool, ("SkewMoveStarted", msg, False))

    def _moved(self, call: StoreCall, pod: str, token: int) -> None:
        """A move is done: what else records the pod's token (a StatefulSet's ConfigMap)."""

    def _follow_move(self, call: StoreCall, port: TokenMovePort, rec: move.Record) -> SkewAct:
        uw = rec.under_way
        assert uw is not None
        spec, ns = call.spec, call.namespace
        box, tool = spec.target.container, spec.target.nodetool
        try:
            tokens: tuple[int, ...] | None = port.node_tokens(ns, uw.pod, box, tool)
        except ElastoreError:
            tokens = None
        mode = nodetool(call.port).node_mode(ns, uw.pod, box, tool)
        state, msg = move.follow(uw, tokens, mode, port.move_failure(ns, uw.pod), call.now)
        if state == "running":
            return SkewAct(rec.to_status(), said=msg)
        moves = rec.moves
        if state == "done":
            self._moved(call, uw.pod, uw.to_token)
        if state == "done" and uw.purpose == "Move":
            moves = (*moves, move.MoveEntry(uw.pod, uw.from_token, uw.to_token, call.now,
                                            uw.streamed_percent))
        new = move.Record(moves, None, msg, call.now)
        reason = {"done": f"Skew{uw.purpose}Done", "failed": f"Skew{uw.purpose}Failed",
                  "lost": f"Skew{uw.purpose}Lost"}[state]
        return SkewAct(new.to_status(), events=((reason, msg, state != "done"),), said=msg,
                       resample=True)

    # -- the stream throttle ---------------------------------------------------------------
    def keep_throttles(self, call: StoreCall, period: bool) -> None:
        """The stream throttle in force, on every ready pod of the target that has not got
        it from this process: after a change of rate, on a new or restarted pod, and on
        every pod after the operator restarted. One call per pod: a pod whose call fails is
        retried the next period; the others keep theirs. Every pod's identity is read once a
        period (a restart is seen then); between periods (every few seconds while an
        operation runs) only the pods without the rate."""
        from elastore.actuators.nodetool import stream_setting

        spec = call.spec
        if not spec.enforce:
            return
        rate = call.decided_mibps if call.decided_mibps is not None else self.stream_mibps
        if rate is None:  # a restarted operator: the rate its predecessor set, within bounds
            prev = call.status.get("migrationMiBps")
            if not isinstance(prev, int | float) or isinstance(prev, bool):
                return
            rate = float(prev)
        rate = min(max(rate, spec.min_migration_mibps), spec.max_migration_mibps)
        self.stream_mibps = rate
        _, applied = stream_setting(rate)
        call.out["migrationMiBps"] = applied
        pods = self.pods_now(call)
        for gone in set(self._throttled) - set(pods):
            del self._throttled[gone]
        for gone in set(self._throttle_failed) - set(pods):
            del self._throttle_failed[gone]
        done: list[str] = []
        failed: list[str] = []
        waiting: list[str] = []
        todo: list[tuple[str, str]] = []  # (pod, its identity)
        for pod in pods:
            if not period:  # between periods only the pods without this rate are read
                if self._throttled.get(pod, ("", -1.0))[1] == applied:
                    continue
                if self._throttle_failed.get(pod, ("", -1.0))[1] == applied:
                    failed.append(pod)  # retried the next period
                    continue
            try:
                ident = call.port.pod_identity(call.namespace, pod, spec.target.container)
            except ElastoreError as exc:
                log.warning("%s/%s: %s", call.namespace, call.policy, exc)
                ident = None
            if ident is None:  # absent, not running or not ready: set once it is
                waiting.append(pod)
                continue
            if self._throttled.get(pod) != (ident, applied):
                todo.append((pod, ident))
        for (pod, ident), err in zip(todo, self._set_throttles(call, [p for p, _ in todo], rate),
                                     strict=True):
            if err is not None:
                self._throttle_failed[pod] = (ident, applied)
                failed.append(pod)
                call.event("ThrottleFailed", err, True)
                continue
            self._throttle_failed.pop(pod, None)
            self._throttled[pod] = (ident, applied)
            done.append(pod)
        if done:
            call.event("Throttle", f"stream throughput {applied:.3f} MiB/s on "
                                   f"{', '.join(done)}", False)
        if failed:
            call.cond("Throttling", False, "ThrottleFailed",
                      f"setstreamthroughput {applied:.3f} MiB/s failed on {', '.join(failed)} "
                      "(retried the next period); the Event ThrottleFailed says why")
            return
        ready = len(pods) - len(waiting)
        msg = f"migration at {applied:.3f} MiB/s per node on {ready} of {len(pods)} pod(s)"
        if waiting:
            msg += f"; {', '.join(waiting)} not ready: set once ready"
        call.cond("Throttling", applied < spec.max_migration_mibps, "Throttle", msg)

    def pods_now(self, call: StoreCall) -> list[str]:
        """The target's pods as this tick leaves them (a driver says which)."""
        raise NotImplementedError

    def _set_throttles(self, call: StoreCall, pods: list[str], rate: float
                       ) -> list[str | None]:
        """One ``setstreamthroughput`` per pod, all at once: each is an exec that starts a
        JVM (seconds each on a busy node), and one after another they held a tick for 20 s
        and a planned scale-out waited behind them. Per pod: None, or why it failed."""
        spec = call.spec

        def one(pod: str) -> str | None:
            try:
                nodetool(call.port).set_stream_throughput(
                    call.namespace, [pod], spec.target.container, spec.target.nodetool, rate)
            except ElastoreError as exc:
                return str(exc)
            return None

        if len(pods) <= 1:
            return [one(p) for p in pods]
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_EXECS, len(pods)),
                                thread_name_prefix="throttle") as pool:
            return list(pool.map(one, pods))

    # -- holds and checks ------------------------------------------------------------------
    def repair_hold(self, call: StoreCall, kind: Kind, pods: list[str]) -> str | None:
        """Why no topology change starts now: a repair running on a node (it stalls or fails
        with one: cassandra-reaper #1367, #1220), unless the forecast puts the SLO at risk at
        the size there is (then it starts, said in a RepairOverridden Event). A node whose
        repairs cannot be read holds it too: unknown is not "none"."""
        spec = call.spec
        if not spec.hold_for_repairs:
            return None

        def ask(pod: str) -> str | None:
            try:
                return nodetool(call.port).repair_running(
                    call.namespace, pod, spec.target.container, spec.target.nodetool)
            except ElastoreError as exc:
                return f"its repairs could not be read ({str(exc)[:200]})"

        # every node at once: each read is a nodetool run (a JVM start, seconds on a busy
        # node), and one after another they delayed a step past its planned time (20 s for
        # 3 nodes in the lab)
        with ThreadPoolExecutor(max_workers=max(1, min(len(pods), MAX_PARALLEL_EXECS))) as pool:
            answers = list(pool.map(ask, pods))
        seen = [f"{pod}: {said}" for pod, said in zip(pods, answers, strict=True)
                if said is not None]
        if not seen:
            return None
        what = "; ".join(seen)
        if kind == "ScaleOut" and call.slo_at_risk:
            call.event("RepairOverridden",
                       f"a scale-out starts during a repair ({what}): the forecast puts the "
                       f"SLO at risk at {call.sts.spec_replicas} replicas", True)
            return None
        return f"a repair is running ({what}); no topology change starts until it ends" + \
            ("" if kind == "ScaleIn" else " or the forecast puts the SLO at risk")

    def ring_refusal(self, call: StoreCall, pod: str, leaving: int = 1) -> str | None:
        """The checks before every decommission, on the cluster as nodetool shows it in
        ``pod`` (:mod:`elastore.stores.cassandra.ring`); unreadable is a refusal. For a
        datacenter, read through one of its pods, for ``leaving`` nodes."""
        spec = call.spec
        if not pod:
            return "no pod to read the ring through"
        try:
            ring = nodetool(call.port).ring(call.namespace, pod, spec.target.container,
                                  spec.target.nodetool)
        except ElastoreError as exc:
            return f"the ring could not be read through {pod}: {exc}"
        # the free space on spec.storage's budget (the planner's own model), unless the
        # policy set the older scaleDown fields
        min_free, margin = ((spec.min_free_fraction, spec.compaction_margin)
                            if spec.legacy_free_space else (1 - spec.storage.budget, 0.0))
        refused = decommission_refusal(ring, self._volume_bytes(call), min_free, margin,
                                       leaving)
        return None if refused is None else f"{pod}: {refused}"

    @staticmethod
    def _volume_bytes(call: StoreCall) -> float | None:
        """Each node's volume: the smallest of the pods' PVCs (a grown PVC is larger than
        the volumeClaimTemplate, which cannot change), else the template's request."""
        sts = call.sts
        sizes = []
        if sts.pvc_template:
            for k in range(sts.spec_replicas):
                v = call.port.volume(call.namespace, f"{sts.pvc_template}-{sts.name}-{k}")
                size = None if v is None else (v.capacity_bytes or v.requested_bytes)
                if size:
                    sizes.append(size)
        return min(sizes) if sizes else call.sts.volume_bytes
