"""Swift's rebalancing of a hot device without adding one (issue 38, "act, cheapest first",
3.4): lower the hot device's weight in the rings by a bounded step, and restore it when the
burst has passed. Pure: plain data in and out, no I/O (the driver reads the rings and
writes them, :class:`elastore.stores.swift.driver.SwiftDriver`'s ``skew_act``).

**Why a weight, and why it is coarse.** Swift's ring builder gives each device a number of
partition replicas proportional to its weight (at most one replica of a partition per
device: the operator's layout puts every pod's one device in a zone of its own). A device
of weight ``w`` among devices of total weight ``W`` holds the share ``w / W``; cut by a share
``x``, it holds ``w (1 - x) / (W - w x)``: a little less than ``x`` of its partitions leave
(the others' weight stays; on 3 equal devices a cut of 18.7 % took 12.3 % of them on the
lab). They go to the other devices, *chosen at random* by the builder, and the replicators
then move their data. Objects land in partitions by the hash of their names, so the hot
objects are spread over the device's partitions in no way the operator can see or steer
(Swift has no hot-object sampler): which of them leave is chance. A cut therefore lowers
the hot device's load **only in expectation**, by the share of its partitions that leave;
a device made hot by a few very hot objects may keep all of them. The move is bounded, as a
Cassandra ``nodetool move`` is, by ``spec.skew.maxMovePercent`` of the stored data, counted
as partition replicas (in expectation, a partition replica is as heavy as any other):

* the share of the rings' partition replicas that change device,
  ``moved / (partitions x replicas)``, is planned at most ``max_move_fraction`` less
  :data:`MARGIN_PARTITIONS` (the builder rounds, and moves a few more to keep its balance;
  measured on swift-ring-builder 2.30.1, 3 devices, 2 replicas, 256 partitions: weight 100
  to 80 planned 24.7 partition replicas off the device and moved 26), and the driver
  measures the real move on the rings it computed before it writes them
  (:func:`moved_fraction`), planning a smaller step where it moved too much (:func:`fit`);
* a device is never cut below :data:`MIN_WEIGHT_FRACTION` of its weight before the first
  cut (weight 0 is a scale-in's drain, never a rebalancing's);
* a cut aims the hot device's expected load at the mean of the devices' loads: never
  below it, since the partitions it sheds carry load to the others.

The **revert** raises the weight back to the one recorded before the first cut, bounded by
the same share (one revert may take more than one step), and only while the rings still
show the weight the record says the last change set (else the record is stale: nothing is
touched). It is done when the device also holds the partition replicas its weight gives it
(:func:`restored`): one rebalance moves at most one replica of a partition, so the builder
may give the last of them back only at the next rebalance, which the revert then runs.

**The record** (``status.skew.rebalance``, :class:`Record`; a record, never the proof of an
effect's precondition: the rings are)::

    {"store": "swift",
     "weights": [{"pod": "swift-1", "device": "10.0.0.7/d1", "fromWeight": 100.0,
                  "toWeight": 80.0, "at": 1700000000.0}],
     "underWay": {"pod": "swift-1", "device": "10.0.0.7/d1", "action": "cut",
                  "fromWeight": 100.0, "toWeight": 80.0, "at": 1700000000.0,
                  "movedPercent": 5.1, "expectedSeconds": 130.0} | null,
     "last": "what happened last"}

``weights``: one entry per device cut and not yet restored (``fromWeight``: its weight before
its first cut, what a revert restores; ``toWeight``: the weight the last change set, equal to
``fromWeight`` once a revert has put the weight back while the builder still owes the device
partition replicas, :func:`restored`; ``at``: epoch seconds of that change). ``underWay``:
the ring change whose data the replicators are still moving (``fromWeight`` here: the weight
before *this* change; ``movedPercent``: the share of partition replicas it reassigned,
measured on the rings; ``expectedSeconds``: the migration-time model's estimate). ``last``:
one line for the status.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from elastore.actuators.swiftring import moves
from elastore.errors import ElastoreError

#: the store a record belongs to
STORE = "swift"
#: a device is never cut below this share of its weight before the first cut
MIN_WEIGHT_FRACTION = 0.5
#: partition replicas kept in hand below the bound (the builder's rounding and balancing)
MARGIN_PARTITIONS = 2
#: swift-ring-builder prints weights with 2 decimals: a weight is set and compared at that
WEIGHT_DECIMALS = 2
WEIGHT_TOLERANCE = 0.5 * 10.0 ** -WEIGHT_DECIMALS
#: entries a record keeps at most (the status' bound)
MAX_ENTRIES = 64
MAX_LAST_CHARS = 1000

Action = Literal["cut", "revert"]


class WeightError(ElastoreError):
    """Bad input to a weight change (a table, a load, a bound, a record that cannot be what
    it says)."""


class NoCut(WeightError):
    """Nothing worth changing (not bad input: the reason is the status' message)."""


class Disagrees(WeightError):
    """The rings do not show the weight the record says: the record is stale (someone else
    changed the rings, or its change was never written)."""


@dataclass(frozen=True)
class Device:
    """One device of the object ring as the builder shows it."""

    key: str  # "ip/device"
    weight: float
    partitions: int  # partition replicas assigned to it


def read_table(table: Mapping[str, tuple[float, int]]) -> dict[str, Device]:
    """The builder's device table (``"ip/device" -> (weight, partitions)``,
    :func:`elastore.actuators.swiftring.parse_devices`) checked: not empty, every weight
    finite and >= 0, every partition count an integer >= 0, some partitions assigned."""
    if not table:
        raise WeightError("the object ring has no devices")
    out: dict[str, Device] = {}
    for key, row in table.items():
        try:
            w, p = row
        except (TypeError, ValueError) as exc:
            raise WeightError(f"device {key!r}: not (weight, partitions): {row!r}") from exc
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) \
                or w < 0:
            raise WeightError(f"device {key!r}: weight must be finite and >= 0, got {w!r}")
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise WeightError(f"device {key!r}: partitions must be an integer >= 0, got {p!r}")
        if "/" not in key:
            raise WeightError(f"device {key!r}: not \"ip/device\"")
        out[key] = Device(key, float(w), p)
    if sum(d.partitions for d in out.values()) <= 0:
        raise WeightError("the object ring assigns no partitions (never rebalanced?)")
    return out


def _check_fraction(max_move_fraction: float) -> float:
    f = max_move_fraction
    if isinstance(f, bool) or not isinstance(f, int | float) or not math.isfinite(f) or \
            not 0.0 < f <= 1.0:
        raise WeightError(f"max_move_fraction must be in (0, 1], got {f!r}")
    return float(f)


def _check_replicas(replicas: float, devices: Mapping[str, Device]) -> tuple[int, int]:
    """(partition replicas of the ring, partitions): each device holds at most one replica
    of a partition."""
    if isinstance(replicas, bool) or not isinstance(replicas, int | float) or \
            not math.isfinite(replicas) or replicas < 1:
        raise WeightError(f"replicas must be finite and >= 1, got {replicas!r}")
    total = sum(d.partitions for d in devices.values())
    parts = round(total / replicas)
    if parts < 1:
        raise WeightError(f"{total} partition replica(s) cannot be {replicas:g} replicas")
    return total, parts


def expected_partitions(weights: Mapping[str, float], total: int, cap: int
                        ) -> dict[str, float]:
    """Each device's partition replicas as the builder targets them: ``total`` shared in
    proportion to the weights, no device above ``cap`` (one replica of each partition),
    what a capped device cannot take shared among the others (water-filling). Pure."""
    if total < 0 or cap < 0:
        raise WeightError(f"total ({total}) and cap ({cap}) must be >= 0")
    if any(not math.isfinite(w) or w < 0 for w in weights.values()):
        raise WeightError(f"weights must be finite and >= 0: {dict(weights)}")
    out = {k: 0.0 for k in weights}
    free = {k for k, w in weights.items() if w > 0}
    left = float(total)
    while free and left > 1e-9:
        wsum = sum(weights[k] for k in free)
        share = {k: left * weights[k] / wsum for k in free}
        over = {k for k in free if share[k] >= cap - 1e-9}
        if not over:
            for k in free:
                out[k] = share[k]
            return out
        for k in over:
            out[k] = float(cap)
            left -= cap
        free -= over
    return out


@dataclass(frozen=True)
class WeightChange:
    """One planned weight change of one device (a cut or a revert step)."""

    action: Action
    device: str
    from_weight: float  # its weight in the rings now
    to_weight: float
    partitions: int  # its partition replicas now
    expected_partitions: float  # after the rebalance, by weight
    total_partitions: int  # the ring's partition replicas
    #: the device's load now and, in expectation, after (requests/s; None for a revert,
    #: which is not planned by load)
    load_rps: float | None = None
    expected_load_rps: float | None = None
    mean_rps: float | None = None
    #: the weight it had before its first cut (what a revert restores)
    original_weight: float | None = None

    @property
    def expected_moved_fraction(self) -> float:
        """The share of the ring's partition replicas expected to change device."""
        return abs(self.partitions - self.expected_partitions) / self.total_partitions

    @property
    def complete(self) -> bool:
        """A revert step that reaches the original weight (the builder may still owe the
        device partition replicas: :func:`restored`)."""
        return self.original_weight is not None and \
            abs(self.to_weight - self.original_weight) <= WEIGHT_TOLERANCE

    def said(self) -> str:
        what = "lowered" if self.action == "cut" else "raised"
        if abs(self.to_weight - self.from_weight) <= WEIGHT_TOLERANCE:
            change = f"device {self.device} at weight {self.to_weight:g} rebalanced"
        else:
            change = (f"device {self.device} weight {what} {self.from_weight:g} -> "
                      f"{self.to_weight:g}")
        out = (f"{change}: partition replicas {self.partitions} -> about "
               f"{self.expected_partitions:.0f} (about "
               f"{self.expected_moved_fraction:.1%} of the ring's {self.total_partitions} "
               "moved, to devices the builder picks at random)")
        if self.load_rps is not None and self.expected_load_rps is not None:
            out += (f"; its load {self.load_rps:,.1f} requests/s falls, in expectation "
                    f"only, to {self.expected_load_rps:,.1f} (mean "
                    f"{self.mean_rps or 0.0:,.1f})")
        return out


def _ceil_weight(w: float) -> float:
    q = 10.0 ** WEIGHT_DECIMALS
    return math.ceil(w * q - 1e-6) / q


def _floor_weight(w: float) -> float:
    q = 10.0 ** WEIGHT_DECIMALS
    return math.floor(w * q + 1e-6) / q


def _expected_at(devices: Mapping[str, Device], key: str, weight: float, total: int,
                 cap: int) -> float:
    ws = {k: d.weight for k, d in devices.items()}
    ws[key] = weight
    return expected_partitions(ws, total, cap)[key]


def _bisect(lo: float, hi: float, ok: Callable[[float], bool], smallest: bool) -> float:
    """The smallest (or largest) weight in [lo, hi] for which ``ok`` holds (``ok``
    monotone); ``hi`` (or ``lo``) when only it does."""
    for _ in range(80):
        mid = (lo + hi) / 2
        if ok(mid) == smallest:
            hi = mid
        else:
            lo = mid
    return hi if smallest else lo


def plan_cut(table: Mapping[str, tuple[float, int]], loads: Mapping[str, float],
             max_move_fraction: float, replicas: float,
             original: Mapping[str, float] | None = None) -> WeightChange:
    """The hot device's weight cut: the device with the highest load (requests/s, keyed as
    the table) among those with a weight, cut so that its expected load falls to the mean,
    bounded by ``max_move_fraction`` of the ring's partition replicas (less
    :data:`MARGIN_PARTITIONS`) and by :data:`MIN_WEIGHT_FRACTION` of its weight before the
    first cut (``original``: device -> that weight, from the record's verified entries).

    :class:`WeightError` on bad input (a device with a weight but no load, a load for a
    device the rings do not have, a load not finite or negative, a bound out of (0, 1]);
    :class:`NoCut` when nothing is worth changing (no device above the mean, a device
    draining, every device holding every partition, a step under one partition replica)."""
    devices = read_table(table)
    f = _check_fraction(max_move_fraction)
    total, parts = _check_replicas(replicas, devices)
    original = dict(original or {})
    unknown = sorted(set(loads) - set(devices))
    if unknown:
        raise WeightError(f"loads for device(s) the rings do not have: {', '.join(unknown)}")
    for k, v in loads.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or \
                v < 0:
            raise WeightError(f"device {k}: load must be finite and >= 0 requests/s, got {v!r}")
    live = {k: d for k, d in devices.items() if d.weight > 0}
    unread = sorted(k for k in live if k not in loads)
    if unread:
        raise WeightError(f"no load for device(s) {', '.join(unread)}: an unread device is "
                          "never taken as idle")
    draining = sorted(k for k, d in devices.items() if d.weight <= 0 and d.partitions > 0)
    if draining:
        raise NoCut(f"device(s) {', '.join(draining)} are draining (weight 0, partitions "
                    "still assigned): a scale-in goes first")
    if len(live) < 2:
        raise NoCut("one device has a weight: there is no other to take its partitions")
    mean = sum(loads[k] for k in live) / len(live)
    hot = max(live, key=lambda k: (loads[k], k))
    dev, load = live[hot], float(loads[hot])
    if mean <= 0 or load <= mean * (1 + 1e-9):
        raise NoCut(f"no device carries more than the mean ({mean:,.1f} requests/s)")
    if dev.partitions <= 0:
        raise NoCut(f"device {hot} holds no partitions: its load is not its partitions'")
    before = float(original.get(hot, dev.weight))
    if not math.isfinite(before) or before < dev.weight - WEIGHT_TOLERANCE:
        raise WeightError(f"device {hot}: the weight before its first cut ({before!r}) is "
                          f"below its weight now ({dev.weight:g})")
    floor_w = MIN_WEIGHT_FRACTION * before
    if dev.weight <= floor_w + WEIGHT_TOLERANCE:
        raise NoCut(f"device {hot} is at {dev.weight:g}, already cut to "
                    f"{MIN_WEIGHT_FRACTION:.0%} of its weight {before:g}")
    budget = math.floor(f * total) - MARGIN_PARTITIONS
    if budget < 1:
        raise NoCut(f"maxMovePercent {f:.1%} of {total} partition replicas leaves less than "
                    "one to move")
    want = dev.partitions * mean / load  # its expected load at the mean
    target = max(want, dev.partitions - budget)
    at_floor = _expected_at(devices, hot, floor_w, total, parts)
    if at_floor >= dev.partitions - 1:
        raise NoCut(f"the rings keep {replicas:g} replicas on {len(live)} device(s): each "
                    "holds every partition it can, and a weight moves none")
    w = _bisect(floor_w, dev.weight,
                lambda x: _expected_at(devices, hot, x, total, parts) >= target, True)
    w = min(dev.weight, max(_ceil_weight(w), _ceil_weight(floor_w)))
    exp = _expected_at(devices, hot, w, total, parts)
    if dev.weight - w <= WEIGHT_TOLERANCE or dev.partitions - exp < 1:
        raise NoCut(f"a cut of device {hot} within the bounds moves less than one partition "
                    "replica")
    return WeightChange("cut", hot, dev.weight, w, dev.partitions, exp, total,
                        load_rps=load, expected_load_rps=load * exp / dev.partitions,
                        mean_rps=mean, original_weight=before)


def check_weight(table: Mapping[str, tuple[float, int]], device: str, weight: float) -> None:
    """:class:`Disagrees` unless the rings give ``device`` the weight ``weight``."""
    devices = read_table(table)
    d = devices.get(device)
    if d is None:
        raise Disagrees(f"device {device} is not in the rings")
    if abs(d.weight - weight) > WEIGHT_TOLERANCE:
        raise Disagrees(f"device {device} has weight {d.weight:g} in the rings, not "
                        f"{weight:g}")


def restored(table: Mapping[str, tuple[float, int]], device: str, original_weight: float,
             replicas: float) -> bool:
    """Whether ``device`` is back: at ``original_weight`` in the rings, and holding the
    partition replicas that weight gives it (within :data:`MARGIN_PARTITIONS`). One
    rebalance moves at most one replica of a partition, and the builder spends some of that
    on evening out the other devices: measured on 2.30.1, 3 devices, 2 replicas, a device
    raised back from 149 to weight 100 got 163 of its 171 partition replicas, the rest at
    the next rebalance. :class:`Disagrees` when the rings do not have the device."""
    devices = read_table(table)
    total, parts = _check_replicas(replicas, devices)
    d = devices.get(device)
    if d is None:
        raise Disagrees(f"device {device} is not in the rings")
    if abs(d.weight - original_weight) > WEIGHT_TOLERANCE:
        return False
    owed = _expected_at(devices, device, original_weight, total, parts) - d.partitions
    return owed <= MARGIN_PARTITIONS


def plan_revert(table: Mapping[str, tuple[float, int]], device: str, recorded_weight: float,
                original_weight: float, max_move_fraction: float, replicas: float,
                ceiling: float) -> WeightChange:
    """The next step of restoring ``device`` to ``original_weight`` (the record's
    ``fromWeight``): the whole way when the expected move is within ``max_move_fraction``
    of the ring's partition replicas (less :data:`MARGIN_PARTITIONS`), else the largest
    step that is (the entry stays, at its new weight). Once the weight is back, a step is
    a rebalance at that weight, for the partition replicas the builder still owes it
    (:func:`restored`).

    :class:`Disagrees` unless the rings give the device ``recorded_weight`` (the record's
    ``toWeight``); :class:`WeightError` when the record cannot be a cut's (the original
    below it, or above ``ceiling``: the highest weight a device of this target may have,
    the driver's ``max(spec.target.swift.weight, every other device's weight)``, so that a
    forged record cannot raise a device above its peers); :class:`NoCut` when the device
    is restored already, or the bound leaves less than one partition replica to move (or,
    the weight back, less than the builder owes)."""
    devices = read_table(table)
    f = _check_fraction(max_move_fraction)
    total, parts = _check_replicas(replicas, devices)
    for name, v in (("recorded", recorded_weight), ("original", original_weight),
                    ("ceiling", ceiling)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or \
                v <= 0:
            raise WeightError(f"the {name} weight must be finite and > 0, got {v!r}")
    check_weight(table, device, recorded_weight)
    dev = devices[device]
    if original_weight < dev.weight - WEIGHT_TOLERANCE:
        raise WeightError(f"device {device}: the weight to restore ({original_weight:g}) is "
                          f"below its weight now ({dev.weight:g}): not a cut's record")
    if original_weight > ceiling + WEIGHT_TOLERANCE:
        raise WeightError(f"device {device}: the weight to restore ({original_weight:g}) is "
                          f"above any this target's devices have ({ceiling:g}): not trusted")
    if restored(table, device, original_weight, replicas):
        raise NoCut(f"device {device} is restored: weight {original_weight:g} and its "
                    f"{dev.partitions} partition replicas")
    budget = math.floor(f * total) - MARGIN_PARTITIONS
    if budget < 1:
        raise NoCut(f"maxMovePercent {f:.1%} of {total} partition replicas leaves less than "
                    "one to move")
    full = _expected_at(devices, device, original_weight, total, parts)
    back = abs(original_weight - dev.weight) <= WEIGHT_TOLERANCE
    if full - dev.partitions <= budget:
        w = original_weight
    elif back:
        raise NoCut(f"device {device} is at {original_weight:g} again and the builder owes it "
                    f"{full - dev.partitions:.0f} partition replicas, more than "
                    f"maxMovePercent {f:.1%} allows in one rebalance")
    else:
        limit = dev.partitions + budget
        w = _bisect(dev.weight, original_weight,
                    lambda x: _expected_at(devices, device, x, total, parts) <= limit, False)
        w = _floor_weight(w)
        if w <= dev.weight + WEIGHT_TOLERANCE:
            raise NoCut(f"a step of device {device} toward {original_weight:g} within the "
                        "bound moves less than one partition replica")
    exp = _expected_at(devices, device, w, total, parts)
    return WeightChange("revert", device, dev.weight, w, dev.partitions, exp, total,
                        original_weight=original_weight)


def moved_fraction(before: Mapping[int, Iterable[str]], after: Mapping[int, Iterable[str]]
                   ) -> float:
    """The share of ``before``'s partition replicas that a ring change puts on another
    device (partition -> "ip/device" lists, :meth:`RingFiles.assignment`), as measured on
    the two rings."""
    total = sum(len(list(devs)) for devs in before.values())
    if total <= 0:
        raise WeightError("the ring before the change assigns no partition replicas")
    return moves(before, after, {}).partitions / total


T = TypeVar("T")
#: tries of :func:`fit` (each a rebalance on a copy of the rings)
FIT_TRIES = 3


def fit(plan_at: Callable[[float], WeightChange],
        measure: Callable[[WeightChange], tuple[T, float]], bound: float,
        tries: int = FIT_TRIES) -> tuple[WeightChange, T, float]:
    """The planned step whose *measured* move is within ``bound``: ``plan_at(fraction)``
    plans for a share (:func:`plan_cut`, :func:`plan_revert`), ``measure(plan)`` applies it
    to a copy of the rings and returns them with the share of partition replicas they
    moved (:func:`moved_fraction`). The builder moves more than the weights say when it
    also evens out the other devices (measured on 2.30.1: raising a device back from 150 to
    its 171 partition replicas moved 31 where 21 were planned), so a step that moved too
    much is planned again, smaller by the excess and a tenth, up to ``tries`` times; then
    :class:`NoCut`. Returns (the plan, what ``measure`` made, the share measured)."""
    f = _check_fraction(bound)
    fraction, moved = f, math.nan
    for _ in range(max(1, tries)):
        plan = plan_at(fraction)
        made, moved = measure(plan)
        if not math.isfinite(moved) or moved < 0:
            raise WeightError(f"a measured move must be a share >= 0, got {moved!r}")
        if moved <= f:
            return plan, made, moved
        fraction = fraction * f / moved * 0.9
    raise NoCut(f"the ring builder moved {moved:.1%} of the partition replicas, over "
                f"maxMovePercent {f:.1%}, in {max(1, tries)} tries with smaller steps")


# --- the record -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """A device whose weight a cut lowered (``weights[]``)."""

    pod: str
    device: str
    from_weight: float  # before its first cut: what a revert restores
    to_weight: float  # what the last change set
    at: float


@dataclass(frozen=True)
class UnderWay:
    """The ring change whose data is still moving (``underWay``)."""

    pod: str
    device: str
    action: Action
    from_weight: float  # before this change
    to_weight: float
    at: float
    moved_percent: float
    expected_s: float


@dataclass(frozen=True)
class Record:
    entries: tuple[Entry, ...] = ()
    under_way: UnderWay | None = None
    last: str = ""

    def entry(self, device: str) -> Entry | None:
        return next((e for e in self.entries if e.device == device), None)

    def latest(self) -> Entry | None:
        """The entry changed last (what a revert undoes first)."""
        return max(self.entries, key=lambda e: (e.at, e.device), default=None)

    def with_entry(self, e: Entry) -> Record:
        rest = tuple(x for x in self.entries if x.device != e.device)
        return replace(self, entries=(*rest, e)[-MAX_ENTRIES:])

    def without(self, device: str) -> Record:
        return replace(self, entries=tuple(x for x in self.entries if x.device != device))

    def said(self, last: str) -> Record:
        return replace(self, last=last[:MAX_LAST_CHARS])

    @property
    def empty(self) -> bool:
        return not self.entries and self.under_way is None

    def to_status(self) -> dict[str, Any]:
        uw = self.under_way
        return {
            "store": STORE,
            "weights": [{"pod": e.pod, "device": e.device, "fromWeight": e.from_weight,
                         "toWeight": e.to_weight, "at": e.at} for e in self.entries],
            "underWay": None if uw is None else {
                "pod": uw.pod, "device": uw.device, "action": uw.action,
                "fromWeight": uw.from_weight, "toWeight": uw.to_weight, "at": uw.at,
                "movedPercent": round(uw.moved_percent, 3),
                "expectedSeconds": round(uw.expected_s, 1)},
            "last": self.last[:MAX_LAST_CHARS],
        }


def _num(d: Mapping[str, Any], key: str, where: str, positive: bool = False) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or \
            v < 0 or (positive and v <= 0):
        raise WeightError(f"{where}.{key}: not a finite number {'> 0' if positive else '>= 0'}"
                          f": {v!r}")
    return float(v)


def _str(d: Mapping[str, Any], key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v or len(v) > 300:
        raise WeightError(f"{where}.{key}: not a name: {v!r}")
    return v


def read_record(raw: Mapping[str, Any] | None) -> Record:
    """``status.skew.rebalance`` as a :class:`Record` (None or ``{}``: an empty one).
    :class:`WeightError` when it is not a Swift weights record: another store's, or a field
    missing or of the wrong kind (the status is anyone's to write: read, never trusted)."""
    if raw is None or (isinstance(raw, Mapping) and not raw):
        return Record()
    if not isinstance(raw, Mapping):
        raise WeightError(f"not an object: {type(raw).__name__}")
    if raw.get("store") != STORE:
        raise WeightError(f"store is {raw.get('store')!r}, not {STORE!r}")
    ws = raw.get("weights", [])
    if not isinstance(ws, list) or len(ws) > MAX_ENTRIES:
        raise WeightError(f"weights: not a list of at most {MAX_ENTRIES}")
    entries: list[Entry] = []
    for i, e in enumerate(ws):
        where = f"weights[{i}]"
        if not isinstance(e, Mapping):
            raise WeightError(f"{where}: not an object")
        entry = Entry(_str(e, "pod", where), _str(e, "device", where),
                      _num(e, "fromWeight", where, True), _num(e, "toWeight", where, True),
                      _num(e, "at", where))
        if entry.to_weight > entry.from_weight + WEIGHT_TOLERANCE:
            raise WeightError(f"{where}: toWeight {entry.to_weight:g} is above "
                              f"fromWeight {entry.from_weight:g}: not a cut's")
        if any(x.device == entry.device for x in entries):
            raise WeightError(f"{where}: device {entry.device} listed twice")
        entries.append(entry)
    uw_raw = raw.get("underWay")
    uw = None
    if uw_raw is not None:
        where = "underWay"
        if not isinstance(uw_raw, Mapping):
            raise WeightError(f"{where}: not an object")
        action = uw_raw.get("action")
        if action not in ("cut", "revert"):
            raise WeightError(f"{where}.action: not cut or revert: {action!r}")
        uw = UnderWay(_str(uw_raw, "pod", where), _str(uw_raw, "device", where), action,
                      _num(uw_raw, "fromWeight", where, True),
                      _num(uw_raw, "toWeight", where, True), _num(uw_raw, "at", where),
                      _num(uw_raw, "movedPercent", where), _num(uw_raw, "expectedSeconds",
                                                                where))
    last = raw.get("last", "")
    return Record(tuple(entries), uw, last[:MAX_LAST_CHARS] if isinstance(last, str) else "")


def in_place(raw: Mapping[str, Any] | None) -> tuple[int, bool]:
    """(devices cut that a revert would restore, a change under way) as the record says
    (an unreadable record: none, none: the driver's next period says why and drops it)."""
    try:
        rec = read_record(raw)
    except WeightError:
        return 0, False
    return len(rec.entries), rec.under_way is not None
