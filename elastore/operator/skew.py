"""The skew view (issue 38, "see the skew"): each node's load, the imbalance, the hot token
ranges and the advice, for ``status.skew``, the gauges and the planner. Pure: plain data in
and out; the math is :mod:`elastore.models.skew`'s (the imbalance, the hot ranges), what
reads the store is its driver's (:class:`HotSampler`, :class:`SpreadAdvisor`).

One control period (:mod:`elastore.operator.period`) gives it:

* each serving pod's load (client requests/s it coordinates) and latency, from the
  preset's per-pod queries (``nodeReadRps``, ``nodeWriteRps``, ``nodeLatencyMs``). A pod
  without a reading is *unread*: listed as such, never a 0. The imbalance (busiest over
  mean, :func:`elastore.models.skew.imbalance`) is then over the pods read only and marked
  ``partial``: shown, but no advice and no gauge rest on it, and the planner gets no
  per-node shares (:attr:`SkewView.shares` is None);
* now and then (``spec.skew.sampleInterval``), a driver's :class:`HotSample`: the ring's
  tokens per pod and the hot partitions with their tokens (Cassandra: ``nodetool info -T``
  and ``profileload`` in every pod), mapped to the ranges and pods that own them
  (:func:`elastore.models.skew.hot_ranges`).

:class:`SkewView` is what the planner is handed (``policyloop.decide(..., skew=...)``).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from elastore.models.skew import (
    SPREADS,
    HotRange,
    Keys,
    Ring,
    SkewError,
    capacity_factors,
    hot_ranges,
    imbalance,
)
from elastore.planner.types import LoadSkew

if TYPE_CHECKING:
    from elastore.stores.base import StoreCall

#: ``spec.skew.mode``
MODES = ("Off", "Advise", "Auto")
#: ``spec.skew.readSpread``: what the user's clients do with reads (models.skew's spreads)
READ_SPREADS: tuple[str, ...] = tuple(SPREADS)

#: below this mean load per pod (requests/s) an imbalance is noise: shown, never advised on
MIN_MEAN_RPS = 1.0
#: sampled reads of placed hot keys needed to judge where reads go (primary or spread)
MIN_PRIMARY_READS = 20
#: the status' bounds: hot ranges, keys per range, characters of a key, tables listed
TOP_RANGES = 5
TOP_KEYS = 3
MAX_KEY_CHARS = 100
MAX_TABLES = 10


@dataclass(frozen=True)
class SkewSettings:
    """``spec.skew``; absent fields are these defaults (the CRD declares none, so the API
    server writes nothing into a policy that does not set them)."""

    mode: str = "Advise"
    #: percent of the stored data one ``nodetool move`` may stream (Auto, Enforce)
    max_move_percent: float = 5.0
    #: what the clients do with reads: spread over the replicas, or on the primary
    read_spread: str = "replicas"
    #: advise when the busiest pod's load is at least this times the mean: at 1.25 the
    #: cluster loses 1 - 1/1.25 = 20 % of its capacity to the busiest node
    imbalance_threshold: float = 1.25
    #: the hysteresis on the busiest node's smoothed utilization, percent: act at or above
    #: ``trigger``, stop below ``stop``, revert below ``revert``
    #: (../shared/reference/storage-qos-thesis-ch3-chunk-placement.txt §3.5.2, Table 3.1)
    trigger_percent: float = 75.0
    stop_percent: float = 55.0
    revert_percent: float = 45.0
    #: how often the hot partitions are sampled (a command in every pod), seconds
    sample_interval_s: float = 3600.0
    #: how long each sample runs, seconds
    sample_duration_s: float = 3.0

    @property
    def max_move_fraction(self) -> float:
        return self.max_move_percent / 100.0

    @property
    def hysteresis(self) -> tuple[float, float, float]:
        """(trigger, stop, revert) as fractions, :class:`elastore.models.skew.Hysteresis`'
        ``high``, ``stop``, ``revert``."""
        return (self.trigger_percent / 100.0, self.stop_percent / 100.0,
                self.revert_percent / 100.0)


@dataclass(frozen=True)
class TableKeys:
    """One table of a sample: its partition key's type as inferred, how many of its hot
    keys were sampled and how many were placed on the ring (their token's replicas include
    every pod that served them)."""

    table: str
    key_type: str | None
    keys: int
    placed: int
    verified: bool  # False: every pod holds every key (RF >= pods), so any type "fits"


@dataclass(frozen=True)
class HotSample:
    """What a driver sampled of the ring and the hot partitions (plain data)."""

    at_s: float
    duration_s: float
    #: the target's pods and their tokens (None: not read; ``notes`` say why)
    ring: Ring | None = None
    #: the placed hot keys: their tokens, client requests/s and names (``ks.table:key``)
    keys: Keys | None = None
    #: of the placed hot keys' sampled reads, the share their primary replica served
    primary_read_share: float | None = None
    #: the sampled reads that share rests on
    primary_reads: int = 0
    #: the table with the most sampled requests
    hot_table: str | None = None
    tables: tuple[TableKeys, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def sampled_rps(self) -> float:
        return self.keys.total_rps if self.keys is not None else 0.0


@dataclass(frozen=True)
class SkewAct:
    """What a driver's rebalancing (:class:`SkewActor`) did this period, as the runner
    carries it out: ``record`` (``status.skew.rebalance``) is written to the status first,
    then ``effect`` runs (a restart in between finds the step recorded and follows it in
    the store, as a node step's operation); ``events`` are said after the effect."""

    #: ``status.skew.rebalance`` as it is to be (None: nothing to keep)
    record: dict[str, Any] | None
    #: the irreversible part (a ``nodetool move``, a ring write), run after the record
    effect: Callable[[], None] | None = None
    #: Events on the policy: (reason, message, warning)
    events: tuple[tuple[str, str, bool], ...] = ()
    #: what the status' message says of it
    said: str = ""
    #: the store's ranges changed: the next period takes a fresh hot-partition sample
    resample: bool = False


@runtime_checkable
class SkewActor(Protocol):
    """A store driver that can rebalance a hot node without adding one (``mode: Auto``,
    Enforce): Cassandra moves a single-token node's token (``nodetool move``), Swift lowers
    a hot device's weight. ``action`` is :func:`elastore.planner.rebalance.decide`'s;
    ``record`` is ``status.skew.rebalance`` as read (a record: every precondition of an
    effect is seen in the store). Called every period, also with ``hold`` or ``none`` (a
    step under way is followed then)."""

    def skew_act(self, call: StoreCall, view: SkewView, action: str,
                 record: Mapping[str, Any] | None) -> SkewAct: ...

    def skew_in_place(self, record: Mapping[str, Any] | None) -> tuple[int, bool]:
        """(rebalancing steps in place that a revert would undo, one under way) as the
        record says: what the hysteresis is told, never the proof of an effect."""
        ...


@runtime_checkable
class HotSampler(Protocol):
    """A store driver that can read its ring and sample the hot partitions (Cassandra)."""

    def skew_sample(self, port: Any, namespace: str, spec: Any, pods: list[str],
                    now_s: float) -> HotSample: ...


@dataclass(frozen=True)
class SkewFacts:
    """What the advice rests on (plain data for a driver's :class:`SpreadAdvisor`)."""

    imbalance: float
    threshold: float
    busiest: str
    replicas_per_key: int  # min(RF, pods)
    read_ratio: float
    read_spread: str  # spec.skew.readSpread, what the user says the clients do
    percentile: int  # the SLO's
    busiest_latency_ms: float | None
    others_latency_ms: float | None  # the median of the other pods' latency
    primary_read_share: float | None  # measured (None: not sampled, or too few reads)
    primary_reads: int
    hot_table: str | None
    sampled: bool  # a hot-partition sample exists


@dataclass(frozen=True)
class Advice:
    advice: tuple[str, ...] = ()
    cannot_check: tuple[str, ...] = ()


@runtime_checkable
class SpreadAdvisor(Protocol):
    """A store driver that knows its read-spreading options (the user's to set)."""

    def skew_advice(self, facts: SkewFacts) -> Advice: ...


@runtime_checkable
class DeviceNote(Protocol):
    """A store driver that says what its per-pod rates stand for (Swift: per device)."""

    def skew_note(self, spec: Any) -> str: ...


@dataclass(frozen=True)
class PodLoad:
    """One pod's reading this period (None: no series for it, never read as 0)."""

    name: str
    read_rps: float | None
    write_rps: float | None
    latency_ms: float | None

    @property
    def load_rps(self) -> float | None:
        if self.read_rps is None or self.write_rps is None:
            return None
        return self.read_rps + self.write_rps

    @property
    def read(self) -> bool:
        return self.load_rps is not None


def _num(v: Any) -> float | None:
    """A finite, non-negative reading, else None (missing, never 0)."""
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and \
        math.isfinite(v) and v >= 0 else None


def pod_loads(pods: Sequence[str], readings: Mapping[str, Any]) -> tuple[PodLoad, ...]:
    """Each pod's load from the per-node readings (objects with ``read_rps``,
    ``write_rps``, ``latency_ms``): a pod without one, or with a NaN, is unread."""
    out = []
    for pod in pods:
        r = readings.get(pod)
        out.append(PodLoad(pod, None if r is None else _num(r.read_rps),
                           None if r is None else _num(r.write_rps),
                           None if r is None else _num(r.latency_ms)))
    return tuple(out)


@dataclass(frozen=True)
class SkewView:
    """The skew as this period saw it, as plain data for the planner (to become
    ``Observation.skew``): the serving pods, their loads and shares, the ring and the hot
    keys when sampled, and the parameters the skew model takes."""

    names: tuple[str, ...]
    #: requests/s per pod (names order); None: unread
    load_rps: tuple[float | None, ...]
    #: each pod's share of the load (sums to 1); None when a pod is unread or no load
    shares: tuple[float, ...] | None
    #: busiest over mean of the pods read (None: none read, or no load)
    imbalance: float | None
    partial: bool
    rf: int
    read_ratio: float
    read_spread: str
    mode: str
    max_move_fraction: float
    #: (trigger, stop, revert) of the busiest node's smoothed utilization, fractions
    hysteresis: tuple[float, float, float]
    #: the ring's tokens per pod (None: not read)
    ring: Ring | None = None
    #: the sampled hot keys (None: not sampled or none placed)
    keys: Keys | None = None
    #: the share of requests outside the sampled keys (the unsampled tail), in [0, 1]
    background: float = 1.0
    sampled_at_s: float | None = None
    #: Auto acts on this target at a scale-out and without one (a split token, a bounded
    #: move): the planner may count on that rebalancing
    rebalances: bool = False

    @property
    def unread(self) -> tuple[str, ...]:
        return tuple(n for n, v in zip(self.names, self.load_rps, strict=True) if v is None)

    @property
    def busiest(self) -> str | None:
        read = [(v, n) for n, v in zip(self.names, self.load_rps, strict=True) if v is not None]
        return max(read)[1] if read else None


def build(settings: SkewSettings, loads: Sequence[PodLoad], rf: int, read_ratio: float,
          total_rps: float, sample: HotSample | None, rebalances: bool = False) -> SkewView:
    """This period's :class:`SkewView`. ``total_rps``: the cluster's client load (the sampled
    keys' share of it sets the background); ``sample``: the last hot-partition sample (its
    ring and keys are used only when its pods are the serving pods)."""
    names = tuple(p.name for p in loads)
    values = tuple(p.load_rps for p in loads)
    read = [v for v in values if v is not None]
    partial = len(read) < len(values)
    imb = None
    if read:
        try:
            imb = imbalance(read)
        except SkewError:  # every pod read at 0 requests/s: no busiest to speak of
            imb = None
    shares = None
    if not partial and read and sum(read) > 0:
        total = sum(read)
        shares = tuple(v / total for v in read)
    ring = keys = None
    background, at = 1.0, None
    if sample is not None and sample.ring is not None and set(sample.ring.names) == set(names):
        ring, keys, at = sample.ring, sample.keys, sample.at_s
        if keys is not None and total_rps > 0:
            background = min(1.0, max(0.0, 1.0 - keys.total_rps / total_rps))
    return SkewView(names=names, load_rps=values, shares=shares, imbalance=imb,
                    partial=partial, rf=int(rf),
                    read_ratio=min(1.0, max(0.0, float(read_ratio))),
                    read_spread=settings.read_spread, mode=settings.mode,
                    max_move_fraction=settings.max_move_fraction,
                    hysteresis=settings.hysteresis, ring=ring, keys=keys,
                    background=background, sampled_at_s=at, rebalances=rebalances)


def load_skew(view: SkewView | None, settings: SkewSettings, n_max: int
              ) -> tuple[LoadSkew | None, str]:
    """What the planner sizes the busiest node for (``Observation.load_skew``), and why.

    None (the mean node, as before issue 38) with ``mode: Off``, a pod unread (a partial
    imbalance is not planned on), or an imbalance below ``imbalanceThreshold`` (the noise
    of per-pod rates: below it the planner's headroom covers the busiest node). Above it:

    * with a sample of a single-token ring (its pods the serving pods): the busiest node
      over the mean at each size from the skew model
      (:func:`elastore.models.skew.capacity_factors`): where the operator rebalances
      (``view.rebalances``: Auto in Enforce on a StatefulSet of Cassandra) new nodes at
      the token that splits the hot range and one bounded move, what it carries out;
      otherwise new nodes where count-only scaling puts them (the largest range bisected)
      and no move. The model is scaled to the imbalance observed now where the sampled keys
      explain less of it;
    * otherwise (vnodes, no sample): the observed imbalance at every size (adding nodes
      with their own random or allocated tokens moves no hot key)."""
    if view is None:
        return None, ""
    if view.partial or view.shares is None or view.imbalance is None:
        return None, "sized for the mean node: a pod's load is unread"
    if view.imbalance < settings.imbalance_threshold:
        return None, (f"sized for the mean node: imbalance {view.imbalance:.2f} is below the "
                      f"threshold {settings.imbalance_threshold:g}")
    ring, keys = view.ring, view.keys
    if ring is not None and keys is not None and len(keys) > 0 and ring.single_token and \
            set(ring.names) == set(view.names) and n_max >= len(ring):
        smart = view.rebalances
        try:
            f = capacity_factors(ring, keys, view.rf, view.read_ratio, view.read_spread,
                                 view.background, view.max_move_fraction if smart else 0.0,
                                 n_max, smart=smart)
        except SkewError as exc:
            return (LoadSkew(((1, view.imbalance),), "the observed imbalance at every size"),
                    f"the skew model refused the sample ({exc}): the observed imbalance")
        now = 1.0 / f[len(ring)]
        scale = max(1.0, view.imbalance / now)
        busiest = tuple((n, max(1.0, scale / v)) for n, v in sorted(f.items()))
        why = ("new nodes at the tokens that split the hot ranges, one bounded move" if smart
               else "new nodes at balanced tokens, no move")
        if scale > 1.0 + 1e-9:
            why += f"; the sample's model scaled by {scale:.2f} to the observed imbalance"
        return LoadSkew(busiest, why), f"sized for the busiest node ({why})"
    return (LoadSkew(((1, view.imbalance),), "the observed imbalance at every size"),
            "sized for the busiest node: the observed imbalance at every size (no sample of "
            "a single-token ring)")


def ranges(view: SkewView, top: int = TOP_RANGES) -> list[HotRange]:
    """The hottest primary ranges (:func:`elastore.models.skew.hot_ranges`) when the ring and
    the hot keys are known; else none."""
    if view.ring is None or view.keys is None or len(view.keys) == 0:
        return []
    return hot_ranges(view.ring, view.keys, view.rf, view.read_ratio, view.read_spread,
                      view.background, top=top)


def facts(view: SkewView, loads: Sequence[PodLoad], settings: SkewSettings, percentile: int,
          sample: HotSample | None) -> SkewFacts | None:
    """What the advice rests on; None without a complete imbalance."""
    busiest = view.busiest
    if view.imbalance is None or view.partial or busiest is None:
        return None
    lat = {p.name: p.latency_ms for p in loads}
    others = [v for n, v in lat.items() if n != busiest and v is not None]
    used = sample if sample is not None and view.ring is not None else None
    share = used.primary_read_share if used is not None and \
        used.primary_reads >= MIN_PRIMARY_READS else None
    return SkewFacts(
        imbalance=view.imbalance, threshold=settings.imbalance_threshold, busiest=busiest,
        replicas_per_key=max(1, min(view.rf, len(view.names))), read_ratio=view.read_ratio,
        read_spread=view.read_spread, percentile=percentile,
        busiest_latency_ms=lat.get(busiest),
        others_latency_ms=statistics.median(others) if others else None,
        primary_read_share=share, primary_reads=used.primary_reads if used else 0,
        hot_table=used.hot_table if used else None, sampled=used is not None)


def judge(view: SkewView, settings: SkewSettings, f: SkewFacts | None,
          advisor: SpreadAdvisor | None, operating: bool) -> tuple[Advice, str]:
    """The advice and the status' message: advice only on a complete view whose busiest pod
    is at least ``imbalanceThreshold`` times the mean, with load enough to judge, and never
    while a node step shifts the load."""
    read = [v for v in view.load_rps if v is not None]
    if not read:
        return Advice(), "no pod has a load reading (the per-pod queries returned no series " \
                         "for the serving pods): no imbalance, no advice"
    if view.partial:
        return Advice(), (f"{len(view.unread)} of {len(view.names)} pod(s) unread "
                          f"({', '.join(view.unread)}): the imbalance is over the pods read "
                          "only; no advice rests on it")
    if view.imbalance is None or f is None:
        return Advice(), "no load on any pod: no imbalance"
    mean = sum(read) / len(read)
    said = (f"busiest {f.busiest} at {f.imbalance:.2f} x the mean load "
            f"({mean:,.1f} requests/s per pod)")
    if operating:
        return Advice(), said + "; a node step is in progress (the load is moving): no advice"
    if mean < MIN_MEAN_RPS:
        return Advice(), said + f"; under {MIN_MEAN_RPS:g} request/s per pod: too little " \
                                "load to judge"
    if f.imbalance < settings.imbalance_threshold:
        return Advice(), said + f"; within spec.skew.imbalanceThreshold " \
                                f"{settings.imbalance_threshold:g}"
    if advisor is None:
        return Advice(), said + "; this store's driver names no read-spreading option"
    got = advisor.skew_advice(f)
    if f.read_ratio < 0.5:
        said += (f"; writes are {1 - f.read_ratio:.0%} of the requests and every replica "
                 "writes: read spreading cannot relieve the busiest node, only moving the "
                 "hot range can")
    return got, said


_NUMBER = re.compile(r"[0-9][0-9.,]*")


def advice_changed(before: Sequence[str] | None, after: Sequence[str]) -> bool:
    """Whether the advice names other options than before: the figures in it (a share, a
    latency) move every period and are not a change (no Event for them)."""
    def shape(xs: Sequence[str]) -> list[str]:
        return [_NUMBER.sub("#", x) for x in xs]

    return shape(before or []) != shape(after)


def mode_said(settings: SkewSettings, enforce: bool, acting: bool = True) -> str:
    """What the mode does for this policy."""
    if settings.mode == "Auto":
        if not enforce:
            return "Auto acts only in mode Enforce (spec.mode is Recommend): advising"
        if not acting:
            return "Auto: this store's driver has no rebalancing action: advising only"
        return (f"Auto: a hot pod is rebalanced without a node (a bounded move, at most "
                f"{settings.max_move_percent:g} % of the data each; undone when the burst "
                "passes), then the advice")
    return "Advise: the advice is the user's to apply; nothing is changed"


def _key(k: str) -> str:
    return k if len(k) <= MAX_KEY_CHARS else k[:MAX_KEY_CHARS - 1] + "…"


def to_status(settings: SkewSettings, enforce: bool, view: SkewView,
              loads: Sequence[PodLoad], hot: Sequence[HotRange], advice: Advice,
              message: str, sample: HotSample | None, sample_said: str,
              attempted_s: float | None, next_sample_s: float | None, note: str | None,
              now_s: float, iso: Any, n_max: int = 1, acting: bool = False
              ) -> dict[str, Any]:
    """``status.skew`` (``n_max``: the policy's ``replicas.max``, for what the planner sizes
    for)."""
    total = sum(v for v in view.load_rps if v is not None)
    out: dict[str, Any] = {
        "mode": settings.mode,
        "acting": settings.mode == "Auto" and enforce and acting,
        "imbalance": None if view.imbalance is None else round(view.imbalance, 4),
        "partial": view.partial,
        "threshold": settings.imbalance_threshold,
        "busiestPod": view.busiest,
        "readRatio": round(view.read_ratio, 4),
        "readSpread": settings.read_spread,
        "pods": [{"name": p.name, "read": p.read,
                  "loadRps": None if p.load_rps is None else round(p.load_rps, 3),
                  "latencyMs": None if p.latency_ms is None else round(p.latency_ms, 3),
                  "share": None if p.load_rps is None or view.partial or total <= 0
                  else round(p.load_rps / total, 4)} for p in loads],
        "unread": list(view.unread),
        "hotRanges": [{"start": str(r.start), "end": str(r.end), "owner": r.owner,
                       "replicas": list(r.replicas), "loadShare": round(r.load_share, 4),
                       "dataShare": round(r.data_share, 6),
                       "topKeys": [_key(k) for k in r.top_keys[:TOP_KEYS]]}
                      for r in hot[:TOP_RANGES]],
        "primaryReadShare": None,
        "tables": [],
        "sampledAt": None, "sampledEpoch": None,
        "attemptedEpoch": attempted_s,
        "nextSampleEpoch": next_sample_s,
        "sample": sample_said[:1000],
        "advice": [a[:1000] for a in advice.advice[:10]],
        "cannotCheck": [c[:500] for c in advice.cannot_check[:10]],
        "planning": load_skew(view, settings, n_max)[1][:1000] or "sized for the mean node",
        "message": "; ".join(x for x in (mode_said(settings, enforce, acting), message,
                                          note) if x)[:2000],
        "at": iso(now_s),
    }
    if sample is not None:
        out["sampledAt"], out["sampledEpoch"] = iso(sample.at_s), sample.at_s
        if sample.primary_read_share is not None:
            out["primaryReadShare"] = round(sample.primary_read_share, 4)
        out["tables"] = [{"table": t.table, "keyType": t.key_type, "keys": t.keys,
                          "placed": t.placed, "verified": t.verified}
                         for t in sample.tables[:MAX_TABLES]]
    return out


@dataclass
class SampleClock:
    """When the hot partitions were last sampled (an attempt counts, failed or not: the
    cost is paid either way), and the sample kept for the periods in between."""

    last: HotSample | None = None
    attempted_s: float | None = None
    said: str = "not sampled yet"
    #: the ranges changed (a move done): the next period samples, whatever the interval
    force: bool = False

    def due(self, now_s: float, interval_s: float, status_epoch: float | None) -> bool:
        """A sample is due when none was attempted within ``interval_s`` (by this process,
        or by the one before it, as the status says)."""
        if self.force:
            return True
        last = self.attempted_s
        if last is None and isinstance(status_epoch, int | float):
            last = float(status_epoch)
        return last is None or now_s - last >= interval_s - 0.5
