"""The simulated storage cluster: nodes with their data, one topology change at a time.

Time advances in ``step_s`` steps (10 s by default). Accounting is exact at that
resolution: a node is billed for every step it exists (booting, joining, serving, leaving),
data moves at the migration rate in force during the step, and latency is evaluated per
step from the capacity model.

* **Adding a node:** ``boot_s`` of boot, then it streams D/N - D/(N+1) from each of the N
  serving nodes in parallel, each sending at the migration rate; it serves once it has all
  its data.
* **Removing a node:** the highest node streams all its data to the others, spread evenly,
  at the migration rate (one sender); it keeps serving until it has handed everything over
  and is removed only then.
* A change is never aborted; the cluster walks towards the current target one node at a
  time.
* **Cleanup after a scale-out** (``cleanup="after-join"``, the operator's
  ``spec.scaleUp.cleanup``, the replay's default): once a node has joined, each old node
  runs ``nodetool cleanup`` in turn (ordinal 0 first), rewriting its data and the bytes
  it streamed to that node (D in all) at the migration rate in force (the operator
  throttles it to that rate), so the whole takes D / rate. (After a cut-short cleanup, a
  node not yet cleaned also holds the earlier join's bytes, D/(n(n+1)) more; its cleanup
  drops them too, their rewrite not timed: the operator's migration-time model and the
  planner's count D.) Until it has run
  everywhere no removal starts (the operator holds scale-ins: a node removed before cleanup
  hands stale copies back). A further addition supersedes it, and its own cleanup covers
  every old node again. The node being cleaned serves with that rewrite beside it (a
  ``cleanup`` step: one node in n at that rate). ``cleanup="drain"`` is the reference
  text's cluster: a join ends when its data has arrived, nothing waits, and the
  streamed-away bytes drain at ``cleanup_mibps`` per node. ``cleanup="external"``: another
  party runs the cleanups (:class:`~elastore.sim.kube.SimulatedKube`, for the operator's
  own runner) and frees each node's bytes (:meth:`Cluster.cleaned`).
* **The bytes** (with a ``volume_bytes``): the data a sender streams stays on its disk
  until ``nodetool cleanup`` has run on it after the bootstrap;
  new data (:meth:`Cluster.grow`) spreads over the serving nodes, and a full volume takes
  no more (writes are rejected: :meth:`Cluster.full`; a decommission into full disks
  stalls, as Cassandra's fails, and its node stays).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from elastore.units import MIB

FloatArray = npt.NDArray[np.float64]
Cleanup = Literal["drain", "after-join", "external"]


@dataclass
class NodeOp:
    kind: str  # "add" | "remove"
    started_s: float
    boot_left_s: float = 0.0
    new_data: float = 0.0  # bytes the joining node holds so far
    per_sender_left: float = 0.0  # add: bytes each sender still has to send
    share: float = 0.0  # add: bytes each sender sends in all
    leaving_data: float = 0.0  # remove: bytes the leaving node still holds
    from_replicas: int = 0
    to_replicas: int = 0


@dataclass
class Cluster:
    data: list[float]  # bytes on each serving node
    boot_s: float
    op: NodeOp | None = None
    target: int = 0
    actions: int = 0  # node additions and removals started
    log: list[tuple[float, str]] = field(default_factory=list)
    volume_bytes: float | None = None  # each node's volume (None: the bytes are not modelled)
    cleanup_mibps: float = 64.0  # per node, after a bootstrap (``cleanup="drain"``)
    #: the bytes each node streamed away and still holds on disk until its cleanup (tracked
    #: with or without a volume: a cleanup rewrites them)
    garbage: list[float] = field(default_factory=list)
    rejected_bytes: float = 0.0  # writes a full volume refused
    #: who cleans up after a join: "drain" (nothing waits), "after-join" (the old nodes in
    #: turn at the migration rate, removals held), "external" (SimulatedKube)
    cleanup: Cleanup = "drain"
    #: the cleanup under way: bytes each old node still has to rewrite, in ordinal order
    #: (the first is being cleaned)
    cleaning: list[float] = field(default_factory=list)
    joined_share: float = 0.0  # bytes each old node streamed to the last node that joined
    cleanups_superseded: int = 0  # cleanups a further scale-out cut short
    held_s: float = 0.0  # seconds a wanted removal waited for a cleanup

    @classmethod
    def balanced(cls, n: int, total_bytes: float, boot_s: float,
                 volume_bytes: float | None = None) -> Cluster:
        return cls([total_bytes / n] * n, boot_s, target=n, volume_bytes=volume_bytes,
                   garbage=[0.0] * n)

    def used(self) -> list[float]:
        """Each serving node's bytes on disk: its data plus what awaits its cleanup."""
        g = self.garbage + [0.0] * (len(self.data) - len(self.garbage))
        return [d + x for d, x in zip(self.data, g, strict=False)]

    def disk_utilization(self) -> float:
        """The fullest node's share of its volume (0 without a volume)."""
        if not self.volume_bytes:
            return 0.0
        return max(self.used()) / self.volume_bytes

    def full(self) -> bool:
        return bool(self.volume_bytes) and self.disk_utilization() >= 1.0 - 1e-9

    def grow(self, nbytes: float) -> None:
        """New data (negative: TTL and compaction took some back), spread evenly over the
        serving nodes; a full volume takes none of it (the write is rejected)."""
        n = len(self.data)
        share = nbytes / n
        used = self.used()
        for i in range(n):
            if share > 0 and self.volume_bytes:
                room = max(0.0, self.volume_bytes - used[i])
                took = min(share, room)
                self.rejected_bytes += share - took
                self.data[i] += took
            else:
                self.data[i] = max(0.0, self.data[i] + share)

    def _cleanup(self, dt: float) -> None:
        step = self.cleanup_mibps * MIB * dt
        for i, g in enumerate(self.garbage):
            if g > 0:
                self.garbage[i] = max(0.0, g - step)

    @property
    def serving(self) -> int:
        return len(self.data)

    @property
    def billed(self) -> int:
        """Nodes that cost money now: serving ones plus a joining node."""
        return self.serving + (1 if self.op is not None and self.op.kind == "add" else 0)

    def total_bytes(self) -> float:
        extra = 0.0
        if self.op is not None and self.op.kind == "add":
            extra = self.op.new_data
        return float(sum(self.data)) + extra

    def _start(self, now_s: float) -> None:
        n = self.serving
        if self.target > n:
            if self.cleaning:  # superseded: the next join's cleanup covers every old node
                self.cleaning = []
                self.cleanups_superseded += 1
            share = self.total_bytes() / n - self.total_bytes() / (n + 1)
            self.op = NodeOp("add", now_s, boot_left_s=self.boot_s, per_sender_left=share,
                             share=share, from_replicas=n, to_replicas=n + 1)
        elif self.target < n and n > 1:
            if self.cleaning:  # no removal before the cleanup has run everywhere
                return
            self.op = NodeOp("remove", now_s, leaving_data=self.data[-1], from_replicas=n,
                             to_replicas=n - 1)
        else:
            return
        self.actions += 1
        self.log.append((now_s, f"{self.op.kind} {n} -> {self.op.to_replicas}"))

    def step(self, now_s: float, dt: float, rate_mibps: float) -> tuple[str, float, int]:
        """Advance ``dt`` seconds with migration at ``rate_mibps`` per sender.

        Returns what the step was (``idle``, ``boot``, ``bootstrap``, ``decommission``,
        ``cleanup``), the migration rate actually used (for the latency accounting; a
        cleanup's is the rate its node rewrites at), and the nodes billed during the step
        (a node that joins or leaves within it is billed for it).
        """
        if self.op is None:
            self._start(now_s)
        if self.op is None and self.cleaning:
            if self.target < self.serving:
                self.held_s += dt
            return "cleanup", self._clean(dt, rate_mibps), self.billed
        if self.cleanup == "drain" and (self.op is None or self.op.kind != "add"):
            self._cleanup(dt)  # cleanup runs once a bootstrap has ended
        billed = self.billed
        kind, used = self._advance(dt, rate_mibps)
        return kind, used, billed

    def _clean(self, dt: float, rate_mibps: float) -> float:
        """One step of the cleanup under way at ``rate_mibps``: the nodes in turn, the next
        starting within the step where the last ends; a node done holds only its data.
        Returns the rate the node being cleaned rewrites at."""
        rate = max(rate_mibps, 0.0)
        left = rate * MIB * dt
        while self.cleaning and left > 0:
            take = min(left, self.cleaning[0])
            self.cleaning[0] -= take
            left -= take
            if self.cleaning[0] <= 1e-6:
                # the old nodes are 0 .. serving - 2 (the newest is not cleaned)
                self.cleaned(self.serving - 1 - len(self.cleaning))
                self.cleaning.pop(0)
        return rate

    def cleanup_bytes_of(self, k: int) -> float:
        """What old node ``k``'s cleanup after the last join rewrites: its data and what it
        streamed to the new node."""
        return self.data[k] + self.joined_share if k < self.serving else 0.0

    def cleaned(self, k: int) -> None:
        """Node ``k``'s cleanup has ended: it drops the bytes it streamed away."""
        if 0 <= k < len(self.garbage):
            self.garbage[k] = 0.0

    def cleanup_bytes(self) -> float:
        """What the cleanup under way still has to rewrite, over every node left."""
        return float(sum(self.cleaning))

    def cleanup_left_s(self, rate_mibps: float) -> float:
        """Seconds the cleanup under way still needs at ``rate_mibps``."""
        return self.cleanup_bytes() / (max(rate_mibps, 0.1) * MIB)

    def _advance(self, dt: float, rate_mibps: float) -> tuple[str, float]:
        op = self.op
        if op is None:
            return "idle", 0.0
        rate_b = max(rate_mibps, 0.0) * MIB
        if op.kind == "add":
            if op.boot_left_s > 0:
                op.boot_left_s -= dt
                return "boot", 0.0
            n = self.serving
            moved = min(op.per_sender_left, rate_b * dt)
            self.garbage += [0.0] * (n - len(self.garbage))
            for i in range(n):  # on its disk until its cleanup, after the bootstrap
                self.data[i] -= moved
                self.garbage[i] += moved
            op.new_data += moved * n
            op.per_sender_left -= moved
            if op.per_sender_left <= 1e-6:
                self.data.append(op.new_data)
                self.garbage = [*self.garbage[:n], 0.0]
                self.op = None
                self.joined_share = op.share
                if self.cleanup == "after-join":  # the old nodes rewrite in turn
                    self.cleaning = [self.cleanup_bytes_of(i) for i in range(n)]
            return "bootstrap", rate_mibps
        # remove: the last node hands its data to the others
        n = self.serving
        moved = min(op.leaving_data, rate_b * dt)
        if self.volume_bytes:  # a full receiver takes no more: the stream stalls there
            used = self.used()
            room = min(max(0.0, self.volume_bytes - used[i]) for i in range(n - 1))
            moved = min(moved, room * (n - 1))
        for i in range(n - 1):
            self.data[i] += moved / (n - 1)
        self.data[-1] -= moved
        op.leaving_data -= moved
        if op.leaving_data <= 1e-6:
            leftover = self.data.pop()
            self.garbage = self.garbage[: len(self.data)]
            for i in range(len(self.data)):  # rounding dust stays in the cluster
                self.data[i] += leftover / len(self.data)
            self.op = None
        return "decommission", rate_mibps


