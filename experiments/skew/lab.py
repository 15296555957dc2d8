"""Balance before buy (issue 38) on real Cassandra: one planned ``nodetool move`` under a
skewed per-page replay, measured; and what ``nodetool move`` refuses on Cassandra 5.0.4.

What it does, in order (all inside a network namespace of its own, as root):

1. brings up the lab's Cassandra 5.0.4 with one token per node (``lab up --single-token``:
   ``num_tokens: 1``, tokens spaced evenly), 3 nodes, 256 MiB heaps;
2. builds the workload from one hour of the per-page trace (default 2016-01-01 00:00; the
   noise pages removed as ``elastore trace build`` does; every other page of the hour a
   text partition key with a 10 KiB incompressible value, RF 2), writes every key at CL ALL
   and flushes;
3. replays the hour's popularity through the lab's load generator (CL ONE, token-aware,
   replicas not shuffled, the driver's default) and reads each node's local reads and
   writes from its exporter (``elastore.lab.cassandra.skewload.measure_move``);
4. plans one move with ``elastore.models.skew.plan_move`` on the keys' real tokens
   (``SELECT token(k)``) and the popularity table, at most ``--max-move-fraction`` of the
   stored bytes, and runs it (``nodetool move``); the bytes streamed are the growth of every
   node's ``TotalIncomingBytes`` (the exporter's Streaming metrics) during the move, over the
   sum of every node's Load (all replicas) just before it, flushed and compacted; it then runs
   ``nodetool cleanup`` everywhere and replays the same requests (same seed);
5. reads every row back at CL ALL and compares each value;
6. unless ``--no-refusals``: asks Cassandra for the moves it should refuse (a token that is
   a node's; a node that data is streaming to; and, to record what 5.0.4 does *not* refuse,
   a second move of the moving node and a move of an uninvolved node while one is running,
   under a 1 Mbit/s stream throttle), reads every row again, and brings up a one-node vnode
   lab to ask it to move;
7. writes ``lab.json`` (``--out``): ``max_move_data_pct`` (the largest share of the stored
   data one move streamed, percent: what ``experiments/skew/run.py`` reports as
   ``skew_move_data_pct_lab``), the shares before and after, the bytes and how they were
   measured, the refusals with Cassandra's words, the run's parameters.

    sudo .venv/bin/python experiments/skew/lab.py [--out experiments/skew/lab.json]

About 4 minutes on 2 cores (the refusals ~1.5 of them).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

from results import Target, git_state, machine, record  # noqa: E402

from elastore.errors import ElastoreError  # noqa: E402
from elastore.lab.cassandra import lab, skewload  # noqa: E402
from elastore.models.skew import Ring  # noqa: E402

TRACE_NAME = "en-2016-01-pages-hourly.csv.gz"
NAMESPACE = "elastore-skew-lab"
SLOW_STREAM_MIBPS = 0.125  # 1 Mbit/s: a move's stream lasts long enough to ask during it


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def shared_trace() -> Path:
    env = os.environ.get("ELASTORE_SHARED")
    for base in ([Path(env)] if env else []) + [REPO.parent / "shared"]:
        path = base / "traces" / "wikipedia" / TRACE_NAME
        if path.is_file():
            return path
    raise SystemExit(f"error: {TRACE_NAME} not found in ../shared/traces/wikipedia; set "
                     "ELASTORE_SHARED or pass --trace")


def _pct(x: float) -> float:
    return round(100.0 * x, 3)


def summarize(r: skewload.MoveRun) -> dict[str, Any]:
    """The measurement as lab.json holds it."""
    hot = r.hot_node
    names_b, names_a = list(r.ring_before), list(r.ring_after)
    toks = np.array(r.key_tokens, dtype=np.int64)
    rf = int(r.params["rf"])
    rep_b = Ring.single(names_b, list(r.ring_before.values())).replicas(toks, rf)
    rep_a = Ring.single(names_a, list(r.ring_after.values())).replicas(toks, rf)
    sd_b = skewload.share_sigma(rep_b, names_b.index(hot), r.replay_before.reads,
                                r.replay_before.writes, r.params["spread"])
    sd_a = skewload.share_sigma(rep_a, names_a.index(hot), r.replay_after.reads,
                                r.replay_after.writes, r.params["spread"])
    exp_b, exp_a = skewload.shares(r.expected_before), skewload.shares(r.expected_after)
    grew = {ip: r.load_after_move[ip] - r.stored_bytes[ip] for ip in r.stored_bytes}
    shrank = {ip: r.stored_bytes[ip] - r.load_after_cleanup[ip] for ip in r.stored_bytes}
    n = len(r.shares_before)

    def p95(rows: list[dict[str, Any]]) -> float:
        return max(float(x["p95_ms"]) for x in rows)

    return {
        "max_move_data_pct": _pct(r.moved_fraction),
        "hot_node": hot,
        "hot_share_before": round(r.shares_before[hot], 4),
        "hot_share_after": round(r.shares_after[hot], 4),
        "hot_share_fall": round(r.shares_before[hot] - r.shares_after[hot], 4),
        "hot_share_sd_of_one_replay": [round(sd_b, 4), round(sd_a, 4)],
        "hot_share_fall_margin_3sd": round(3 * math.hypot(sd_b, sd_a), 4),
        "imbalance_before": round(n * max(r.shares_before.values()), 4),
        "imbalance_after": round(n * max(r.shares_after.values()), 4),
        "shares_before": {k: round(v, 4) for k, v in r.shares_before.items()},
        "shares_after": {k: round(v, 4) for k, v in r.shares_after.items()},
        "shares_expected_from_tokens_before": {k: round(v, 4) for k, v in exp_b.items()},
        "shares_expected_from_tokens_after": {k: round(v, 4) for k, v in exp_a.items()},
        "shares_model_before": {k: round(v, 4) for k, v in r.predicted_before.items()},
        "shares_model_after": {k: round(v, 4) for k, v in r.predicted_after.items()},
        "work_before": {k: {"reads": v[0], "writes": v[1]} for k, v in r.work_before.items()},
        "work_after": {k: {"reads": v[0], "writes": v[1]} for k, v in r.work_after.items()},
        "move": {"node": r.move.node, "from_token": r.move.from_token,
                 "to_token": r.move.to_token,
                 "planned_data_pct": _pct(r.move.moved_fraction),
                 "planned_imbalance_before": round(r.move.imbalance_before, 4),
                 "planned_imbalance_after": round(r.move.imbalance_after, 4),
                 "keys_moved_pct": _pct(r.key_moved_fraction),
                 "seconds": round(r.move_seconds, 2),
                 "progress": r.progress},
        "streamed_bytes": r.streamed_bytes,
        "streamed_in_bytes": r.streamed_in,
        "streamed_out_bytes": r.streamed_out,
        "stored_bytes": r.stored_bytes,
        "stored_total_bytes": r.stored_total,
        "streamed_how": (
            "the growth, during the move, of every node's TotalIncomingBytes "
            "(org.apache.cassandra.metrics:type=Streaming, on each node's JMX exporter), "
            "summed: the bytes that landed, counted once per receiving replica; over the "
            "sum of every node's Load (live SSTables, all replicas, all keyspaces) read "
            "just before the move, after nodetool flush and compact of the keyspace on every "
            "node (one version of each row: the replay's overwrites would otherwise stream "
            "too, and a receiver's compaction of its own old versions would hide its growth). "
            "Cross-checks: the senders' TotalOutgoingBytes, the receivers' Load growth, and "
            "the givers' Load fall after nodetool cleanup"),
        "load_growth_after_move_bytes": grew,
        "load_fall_after_cleanup_bytes": shrank,
        "rows": r.verify,
        "ring_before": r.ring_before,
        "ring_after": r.ring_after,
        "replays": {name: {"requests": rep.requests, "errors": rep.errors,
                           "coordinators": rep.coordinators,
                           "off_first_replica": rep.off_first_replica,
                           "worst_window_p95_ms": p95(rep.windows)}
                    for name, rep in (("before", r.replay_before), ("after", r.replay_after))},
        "seconds": {k: round(v, 2) for k, v in r.seconds.items()},
        "params": r.params,
    }


def _between(ring: dict[str, int], node: str, fraction: float, forward: bool) -> int:
    """A token for ``node``: ``fraction`` of the way back from its own token towards its
    predecessor's (``forward=False``: it gives that part of its primary range to its
    successor), or forward into its successor's range (``forward=True``: it takes that part
    of its successor's range)."""
    order = sorted(ring, key=lambda ip: ring[ip])
    i = order.index(node)
    if forward:
        length = (ring[order[(i + 1) % len(order)]] - ring[node]) % 2**64
        tok = ring[node] + int(length * fraction)
    else:
        length = (ring[node] - ring[order[i - 1]]) % 2**64
        tok = ring[node] - int(length * fraction)
    return (tok + 2**63) % 2**64 - 2**63


def _gainers(d: Path, node: str, token: int, tokens: list[int], rf: int) -> dict[str, int]:
    """How many of the keys each node would newly hold (RF ``rf``) if ``node`` moved to
    ``token``."""
    ring = lab.ring_tokens(d)
    ips = list(ring)
    before = Ring.single(ips, [ring[ip] for ip in ips])
    toks = np.array(tokens, dtype=np.int64)
    old, new = before.replicas(toks, rf), before.moved(node, token).replicas(toks, rf)
    gained = np.bincount(new[(new[:, :, None] != old[:, None, :]).all(axis=2)],
                         minlength=len(ips))
    return {ip: int(g) for ip, g in zip(ips, gained, strict=True)}


def _attempt(d: Path, node: str, token: int) -> dict[str, Any]:
    """Ask for a move; its outcome with Cassandra's words."""
    t = time.monotonic()
    try:
        secs = lab.move(node, token, d=d)
        return {"node": node, "token": token, "outcome": "accepted", "seconds": round(secs, 2)}
    except lab.MoveRefused as exc:
        return {"node": node, "token": token, "outcome": "refused", "kind": exc.kind,
                "said": str(exc), "seconds": round(time.monotonic() - t, 2)}


def _during(d: Path, node: str, token: int, asks: list[tuple[str, str, int]]
            ) -> dict[str, Any]:
    """Start a move of ``node`` to ``token`` and, once it streams, make each ask
    (name, node, token) in turn, each in a thread of its own (an accepted move runs
    alongside); wait for them all."""
    results: dict[str, Any] = {}

    def run(name: str, who: str, tok: int) -> None:
        results[name] = _attempt(d, who, tok)

    first = threading.Thread(target=run, args=("first_move", node, token))
    first.start()
    time.sleep(5.0)  # past the move's ring-delay sleep (3 s in the lab): streaming now
    threads = []
    for name, who, tok in asks:
        th = threading.Thread(target=run, args=(name, who, tok))
        th.start()
        threads.append(th)
        time.sleep(3.0)  # one refusal or start at a time
    first.join()
    for th in threads:
        th.join()
    return results


def refusals(d: Path, workload: Path, seed: int, tokens: list[int], rf: int) -> dict[str, Any]:
    """What 5.0.4 refuses and accepts, asked of the single-token lab in ``d``."""
    out: dict[str, Any] = {}
    state = lab.LabState.load(d)
    assert state is not None
    out["keyspaces"] = lab.cql(state, "keyspaces")  # the system keyspaces' RF matter below
    ring = lab.ring_tokens(d)
    ips = sorted(ring, key=lambda ip: ring[ip])
    out["token_taken"] = _attempt(d, ips[0], ring[ips[1]])
    # an out-of-range token: nodetool's own check (move_args would refuse it first)
    try:
        lab.run_nodetool(ips[0], "move", "--", str(2**63), d=d)
        out["invalid_token"] = {"outcome": "accepted"}
    except ElastoreError as exc:
        out["invalid_token"] = {"token": str(2**63), "outcome": "refused", "said": str(exc)}
    for ip in ips:
        lab.set_stream_throughput(ip, SLOW_STREAM_MIBPS, d=d)
    try:
        # A: x gives a quarter of its primary range away: the others receive (the skew
        # keyspace at RF 2, system_auth at RF 1); ask a receiver, then x itself again
        x = ips[0]
        give = _between(ring, x, 0.25, forward=False)
        gain_a = _gainers(d, x, give, tokens, rf)
        y = max((ip for ip in ips if ip != x), key=lambda ip: gain_a[ip])
        res = _during(d, x, give, [
            ("receiving_node_asked_to_move", y, _between(ring, y, 0.25, forward=False)),
            ("moving_node_moved_again", x, give + 1)])
        out["while_giving"] = {"mover": x, "keys_gained": gain_a, **res}
        # B: x takes a quarter of its successor's range: only x receives; ask another node
        ring = lab.ring_tokens(d)
        ips = sorted(ring, key=lambda ip: ring[ip])
        x = ips[0]
        take = _between(ring, x, 0.25, forward=True)
        gain_b = _gainers(d, x, take, tokens, rf)
        z = ips[2]  # neither x nor its successor: holds nothing of what moves
        res = _during(d, x, take, [
            ("moving_node_asked_again", x, take + 1),
            ("other_node_moves_meanwhile", z, _between(ring, z, 0.25, forward=False))])
        out["while_taking"] = {"mover": x, "keys_gained": gain_b, **res}
    finally:
        for ip in ips:
            lab.set_stream_throughput(ip, 24.0, d=d)
    out["stream_throttle_mibps"] = SLOW_STREAM_MIBPS
    out["ring_after_concurrent_moves"] = lab.ring_tokens(d)
    out["rows_after_concurrent_moves"] = skewload.verify(state, workload, seed=seed)
    return out


def vnode_refusal(ns: str) -> dict[str, Any]:
    """A one-node lab with vnodes (the lab's default, 16 tokens) asked to move."""
    with tempfile.TemporaryDirectory(prefix="elastore-skew-vnodes-") as tmp:
        d = Path(tmp)
        try:
            lab.up(1, "256M", d=d, namespace=ns)
            return _attempt(d, "1", 0)
        finally:
            lab.down(d)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "lab.json")
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--hour", default=skewload.DEFAULT_HOUR)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rf", type=int, default=2)
    ap.add_argument("--peak-rps", type=float, default=220.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--max-move-fraction", type=float, default=0.05)
    ap.add_argument("--no-refusals", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("error: run as root (network namespaces)")
    git = git_state(REPO)
    started = datetime.datetime.now(datetime.UTC)
    trace = args.trace or shared_trace()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="elastore-skew-lab-") as tmp:
        d = Path(tmp)
        try:
            log(f"lab up: {args.nodes} single-token nodes ...")
            lab.up(args.nodes, "256M", d=d, namespace=NAMESPACE, single_token=True)
            up_s = time.monotonic() - t0
            wl = skewload.page_workload(trace, args.hour, peak_rps=args.peak_rps,
                                        seconds=args.seconds, windows=5, seed=args.seed)
            wl.save(d / "workload.json")
            run = skewload.measure_move(d, d / "workload.json", d / "out", rf=args.rf,
                                        seed=args.seed,
                                        max_move_fraction=args.max_move_fraction, say=log)
            doc = summarize(run)
            doc["seconds"]["lab_up_s"] = round(up_s, 2)
            if not args.no_refusals:
                log("refusals ...")
                doc["refusals"] = refusals(d, d / "workload.json", args.seed, run.key_tokens,
                                           args.rf)
        finally:
            lab.down(d)
    if not args.no_refusals:
        log("a vnode lab, asked to move ...")
        doc["refusals"]["vnodes"] = vnode_refusal(NAMESPACE)
    doc["params"].update({"hour": args.hour, "trace": trace.name, "peak_rps": args.peak_rps,
                          "replay_seconds": args.seconds, "heap": "256M",
                          "tokens": "evenly spaced (lab up --single-token)"})
    out = {"experiment": "skew-lab", **doc, "git": git,
           "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "machine": machine(),
           "command": [sys.executable, *sys.argv],
           "run_seconds": round(time.monotonic() - t0, 1)}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    log(f"max_move_data_pct {doc['max_move_data_pct']} ; hot {doc['hot_node']} "
        f"{doc['hot_share_before']} -> {doc['hot_share_after']} ; rows "
        f"{doc['rows']['rows']}/{doc['rows']['expected']} ; written {args.out}")
    # make lab-check's record (experiments/skew/lab/results.json): the figures and targets;
    # lab.json keeps the whole measurement, and the simulator's RESULTS.md reads it
    figures = {"skew_move_data_pct_lab": doc["max_move_data_pct"],
               "hot_share_before": doc["hot_share_before"],
               "hot_share_after": doc["hot_share_after"],
               "hot_share_fall": doc["hot_share_fall"],
               "hot_share_fall_margin_3sd": doc["hot_share_fall_margin_3sd"],
               "rows_missing": doc["rows"]["missing"],
               "rows_mismatched": doc["rows"]["mismatched"],
               "rows": doc["rows"]["rows"], "details": str(args.out)}
    targets = [
        Target("skew_move_data_pct_lab", "<=", 100 * args.max_move_fraction,
               "the largest share of the stored bytes (all replicas) one move streamed, %",
               "issue 38, Targets"),
        Target("rows_missing", "<=", 0, "rows not read back at CL ALL after the move",
               "issue 38, The lab: no row is lost"),
        Target("rows_mismatched", "<=", 0, "rows read back with another checksum",
               "issue 38, The lab: no row is lost"),
    ]
    (HERE / "lab").mkdir(exist_ok=True)
    ok = record(HERE / "lab", "skew-lab", figures, targets, git=git)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
