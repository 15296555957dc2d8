"""Cassandra's side of the skew view (issue 38): the ring's tokens per pod and the hot
partitions, read through ``nodetool`` in the pods, mapped to tokens; and the read-spreading
options that are the user's to set.

A sample (:func:`sample`), every pod at once: ``nodetool info -T`` (the pod's own tokens),
``nodetool profileload -a READS,WRITES -k <top> <ms>`` (the partitions its local reads and
writes touched most, every table: Cassandra 4.1 and later; measured on 5.0.4, see
``tests/data/skew-5.0.4/``), and ``nodetool ring`` once (every token of the cluster: the
pods' tokens must be all of them, or the ring has members the target does not have, such
as another datacentre, and the pods' ranges would be wrong). Each command starts a JVM
(about 2 s of CPU); the pods' samples overlap in time but are not one window.

The mapping (:func:`map_sample`, pure): a key's token is Murmur3 of its serialized bytes
(:mod:`elastore.stores.cassandra.partitioner`), and profileload prints keys without their
type, so each table's type is the one (of bigint, int, uuid, blob, text) under which most
of its keys' tokens are replicated on every pod that served them; a key that does not fit
is left out, and counted. With RF >= pods every pod holds every key and nothing can be
checked: the status says ``verified: false``. A key's client requests/s are its sampled
reads (each served by one replica at consistency ONE) plus its writes over the replicas
(every replica writes), per second of the sample. Replicas are placed as SimpleStrategy
places them (NetworkTopologyStrategy with one datacentre and one rack places them alike).
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import numpy as np

from elastore.actuators.nodetool import (
    PartitionProfile,
    failure_summary,
    parse_info_tokens,
    parse_profileload,
    profileload_args,
    ring_tokens,
)
from elastore.errors import ElastoreError
from elastore.models.skew import Keys, Ring, SkewError
from elastore.operator.skew import Advice, HotSample, SkewFacts, TableKeys
from elastore.stores.cassandra.partitioner import KEY_TYPES, key_encodings, murmur3_token

log = logging.getLogger("elastore.operator")

#: the partitions each pod lists per sampler (profileload's ``-k``)
TOP_PARTITIONS = 20
#: nodetool calls in flight at once
MAX_PARALLEL = 8


@runtime_checkable
class NodetoolCalls(Protocol):
    """A cluster port that runs any allowed nodetool command in a pod and returns its exit
    code and output (``KubeActuator.nodetool``)."""

    def nodetool(self, ns: str, pod: str, container: str, nodetool: tuple[str, ...],
                 *args: str, timeout_s: float = 120.0) -> Any: ...


def sample(port: Any, namespace: str, container: str, nodetool: tuple[str, ...],
           pods: Sequence[str], rf: int, now_s: float, duration_s: float,
           known: Mapping[str, tuple[int, ...]] | None = None,
           top: int = TOP_PARTITIONS) -> HotSample:
    """Every pod's hot partitions (all at once) and the ring through the first pod; each
    pod's own tokens (``info -T``) only when ``known`` (the last sample's) does not cover
    the pods or no longer makes up the ring. Mapped by :func:`map_sample`. A pod that does
    not answer is said in the notes; without every pod's tokens there is no ring."""
    if not isinstance(port, NodetoolCalls):
        return HotSample(now_s, duration_s, notes=(
            "this cluster port cannot run nodetool commands in the pods: not sampled",))
    ms = max(1, round(duration_s * 1000))
    args = profileload_args(ms, top)

    def one(call: tuple[str, str, list[str], float]) -> tuple[str, str, str | None, str | None]:
        what, pod, argv, timeout = call
        try:
            res = port.nodetool(namespace, pod, container, nodetool, *argv, timeout_s=timeout)
            if res.rc != 0:
                return what, pod, None, (f"nodetool {argv[0]} in {pod} exited {res.rc}: "
                                         f"{failure_summary(res.stdout, res.stderr, 300)}")
            return what, pod, str(res.stdout), None
        except ElastoreError as exc:
            return what, pod, None, str(exc)[:300]

    def run(calls: list[tuple[str, str, list[str], float]]
            ) -> list[tuple[str, str, str | None, str | None]]:
        if not calls:
            return []
        with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(calls))),
                                thread_name_prefix="skew") as pool:
            return list(pool.map(one, calls))

    first = [("profile", pod, args, 120.0 + duration_s) for pod in pods]
    if pods:
        first.append(("ring", pods[0], ["ring"], 120.0))
    answers = run(first)
    every: dict[str, list[int]] | None = None
    for what, _, text, _ in answers:
        if what == "ring" and text is not None:
            with contextlib.suppress(ElastoreError):  # unreadable: said below, as not read
                every = ring_tokens(text)
    held = {t for p in pods for t in (known or {}).get(p, ())}
    reuse = known is not None and all(p in known for p in pods) and every is not None and \
        {t for ts in every.values() for t in ts} == held
    if not reuse:
        answers += run([("tokens", pod, ["info", "-T"], 120.0) for pod in pods])
    tokens: dict[str, tuple[int, ...]] = {p: tuple(known[p]) for p in pods} \
        if reuse and known is not None else {}
    profiles: dict[str, PartitionProfile] = {}
    notes: list[str] = []
    for what, pod, text, err in answers:
        if err is not None or text is None:
            notes.append(f"{pod}: {err}")
            continue
        try:
            if what == "tokens":
                tokens[pod] = parse_info_tokens(text)
            elif what == "profile":
                profiles[pod] = parse_profileload(text)
            else:
                ring_tokens(text)  # read above; an unreadable one is said here
        except ElastoreError as exc:
            notes.append(f"{pod}: {exc}"[:300])
    return map_sample(list(pods), tokens, every, profiles, rf, now_s, duration_s,
                      tuple(notes))


def _ring(pods: Sequence[str], tokens: Mapping[str, tuple[int, ...]],
          every: Mapping[str, Sequence[int]] | None) -> tuple[Ring | None, str | None]:
    missing = [p for p in pods if p not in tokens]
    if missing:
        return None, f"no tokens from {', '.join(missing)}: the ring is not mapped"
    held = {t for p in pods for t in tokens[p]}
    if every is not None:
        beyond = {t for ts in every.values() for t in ts} - held
        if beyond:
            return None, (f"nodetool ring lists {len(beyond)} token(s) no pod of the target "
                          "holds (another datacentre, or nodes outside the target): its "
                          "ranges are not mapped")
    try:
        return Ring(tuple(pods), tuple(tokens[p] for p in pods)), None
    except SkewError as exc:
        return None, f"the pods' tokens do not make a ring: {exc}"


def map_sample(pods: Sequence[str], tokens: Mapping[str, tuple[int, ...]],
               every: Mapping[str, Sequence[int]] | None,
               profiles: Mapping[str, PartitionProfile], rf: int, at_s: float,
               duration_s: float, notes: tuple[str, ...] = ()) -> HotSample:
    """The ring and the hot keys from the pods' answers (``tokens``: each pod's own,
    ``nodetool info -T``; ``every``: each address' tokens in ``nodetool ring``, None if
    not read). Pure."""
    said = list(notes)
    ring, why = _ring(pods, tokens, every)
    if why is not None:
        said.append(why)
    if every is None and ring is not None:
        said.append("nodetool ring was not read: the pods' tokens are taken as the whole ring")
    unprofiled = [p for p in pods if p not in profiles]
    if unprofiled:
        said.append(f"no hot partitions from {', '.join(unprofiled)}")
    # per key: the reads and writes each pod counted
    reads: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    writes: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for pod, prof in profiles.items():
        for row in prof.reads:
            reads[(row.table, row.key)][pod] = reads[(row.table, row.key)].get(pod, 0) + row.count
        for row in prof.writes:
            writes[(row.table, row.key)][pod] = writes[(row.table, row.key)].get(pod, 0) + \
                row.count
    seen = sorted(set(reads) | set(writes))
    load: dict[str, int] = defaultdict(int)
    for k in seen:
        load[k[0]] += sum(reads.get(k, {}).values()) + sum(writes.get(k, {}).values())
    hot_table = max(load, key=lambda t: (load[t], t)) if load else None
    if ring is None or not seen:
        if not seen and profiles:
            said.append("the sample recorded no partition (no load during it?)")
        return HotSample(at_s, duration_s, ring=ring, hot_table=hot_table,
                         notes=tuple(said))
    r = min(int(rf), len(ring))
    verified = r < len(ring)
    by_table: dict[str, list[str]] = defaultdict(list)
    for table, key in seen:
        by_table[table].append(key)
    names, toks, rates, tables = [], [], [], []
    prim_reads = all_reads = 0
    for table in sorted(by_table):
        keys = by_table[table]
        best: tuple[int, int, str, dict[str, int]] | None = None
        for order, ktype in enumerate(KEY_TYPES):
            encoded = [key_encodings(k).get(ktype) for k in keys]
            if any(e is None for e in encoded):
                continue
            placed: dict[str, int] = {}
            for key, enc in zip(keys, encoded, strict=True):
                assert enc is not None
                tok = murmur3_token(enc)
                holders = {ring.names[int(i)] for i in ring.replicas([tok], r)[0]}
                served = set(reads.get((table, key), {})) | set(writes.get((table, key), {}))
                if served <= holders:
                    placed[key] = tok
            score = (len(placed), -order, ktype, placed)
            if best is None or score[:2] > best[:2]:
                best = score
        if best is None or best[0] == 0:
            tables.append(TableKeys(table, None, len(keys), 0, verified))
            said.append(f"{table}: no key type puts its hot keys on the pods that served "
                        "them (a composite partition key?): not mapped")
            continue
        _, _, ktype, placed = best
        tables.append(TableKeys(table, ktype, len(keys), len(placed), verified))
        for key, tok in placed.items():
            rd = reads.get((table, key), {})
            wr = writes.get((table, key), {})
            rps = (sum(rd.values()) + sum(wr.values()) / r) / duration_s
            names.append(f"{table}:{key}")
            toks.append(tok)
            rates.append(rps)
            primary = ring.names[int(ring.replicas([tok], r)[0][0])]
            prim_reads += rd.get(primary, 0)
            all_reads += sum(rd.values())
    keys_out = Keys(np.array(toks, dtype=np.int64), np.array(rates, dtype=np.float64),
                    tuple(names)) if names else None
    return HotSample(at_s, duration_s, ring=ring, keys=keys_out,
                     primary_read_share=prim_reads / all_reads if all_reads else None,
                     primary_reads=all_reads, hot_table=hot_table, tables=tuple(tables),
                     notes=tuple(said))


def advice(f: SkewFacts) -> Advice:
    """The read-spreading options that would relieve the busiest node and are the user's to
    set, each only where it can help; and what the operator could not check."""
    out: list[str] = []
    cannot: list[str] = []
    r = f.replicas_per_key
    if r < 2:
        return Advice((), ("read spreading: every key has one replica (RF 1), so no option "
                           "spreads its reads",))
    reads_matter = f.read_ratio >= 0.5
    even = 1.0 / r
    # halfway between an even spread (1/r) and every read on the primary (1)
    concentrated = None if f.primary_read_share is None else \
        f.primary_read_share >= (even + 1.0) / 2
    if concentrated is None:
        why = (f"only {f.primary_reads} sampled read(s) of placed hot keys" if f.sampled
               else "no hot-partition sample with a mapped ring")
        cannot.append(f"whether reads concentrate on the primary replicas ({why}): the "
                      "clients' replica shuffling is judged from spec.skew.readSpread alone")
    if reads_matter and (concentrated or (concentrated is None and f.read_spread == "primary")):
        assert f.primary_read_share is not None or not concentrated
        seen = (f"{f.primary_read_share:.0%} of the hot keys' sampled reads were served by "
                f"their primary replica, {even:.0%} if spread over the {r} replicas"
                if concentrated else "spec.skew.readSpread says the clients read from the "
                "primary replica")
        then = ("then set spec.skew.readSpread: replicas" if f.read_spread == "primary" else
                "until then spec.skew.readSpread: primary describes the clients")
        out.append(f"reads concentrate on primary replicas ({seen}): turn on replica "
                   "shuffling in the clients' token-aware load balancing (DataStax Python "
                   "driver: TokenAwarePolicy(child, shuffle_replicas=True), off by default; "
                   "gocql: TokenAwareHostPolicy(child, ShuffleReplicas()); the Java driver 4 "
                   f"shuffles by default); {then}")
    elif concentrated is False and f.read_spread == "primary":
        out.append(f"spec.skew.readSpread says primary, but the sampled reads spread over the "
                   f"replicas ({f.primary_read_share:.0%} on primaries): set readSpread: "
                   "replicas, so the planner models what the clients do")
    if reads_matter:
        slow = f.busiest_latency_ms is not None and f.others_latency_ms is not None and \
            f.busiest_latency_ms > 1.2 * f.others_latency_ms
        table = f.hot_table or "the hot table"
        if slow:
            assert f.busiest_latency_ms is not None and f.others_latency_ms is not None
            out.append(f"{f.busiest} is slower than the others (p{f.percentile} "
                       f"{f.busiest_latency_ms:,.1f} ms, the others' median "
                       f"{f.others_latency_ms:,.1f} ms): let reads of {table} retry on "
                       f"another replica, ALTER TABLE {table} WITH speculative_retry = "
                       "'99p' (Cassandra's default; check that it is not NONE)")
            cannot.append(f"{table}'s speculative_retry: table options are not readable "
                          "through nodetool (DESCRIBE TABLE shows it)")
        elif f.busiest_latency_ms is None or f.others_latency_ms is None:
            cannot.append("whether the busiest pod is slower than the others (no per-pod "
                          "latency): speculative_retry not judged")
    return Advice(tuple(out), tuple(cannot))
