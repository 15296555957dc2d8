"""``elastore load run``: the trace-driven load generator (runs inside the lab namespace)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from elastore.cliutil import ElastoreGroup
from elastore.errors import ElastoreError
from elastore.lab.host import lab_dir


@click.group("load", cls=ElastoreGroup, extra="lab")
def load_group() -> None:
    """Drive the lab's Cassandra with a workload from `elastore trace build`.

    \b
    Example:
      elastore trace build PAGES.csv.gz --peak-rps 300 -o wl.json.gz
      sudo elastore load run wl.json.gz --windows 0:60 --out load.csv
    """


#: the keyspace the lab's generator uses; a user's cluster must name one of its own
LAB_KEYSPACE = "wiki"


def _windows(spec: str | None) -> slice:
    if not spec:
        return slice(None)
    try:
        a, b = spec.split(":")
        return slice(int(a) if a else None, int(b) if b else None)
    except ValueError:
        raise ElastoreError(f"--windows {spec!r}: want START:END (window indices)") from None


@load_group.command("run")
@click.argument("workload", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("load.csv"), show_default=True, help="Per-window CSV.")
@click.option("--concurrency", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--rate-scale", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Multiply every scheduled rate.")
@click.option("--windows", default=None, metavar="START:END",
              help="Replay only these windows (indices), e.g. 0:60.")
@click.option("--keyspace", default=LAB_KEYSPACE, show_default=True,
              help="Cassandra keyspace (Swift: container) the replay reads and writes; "
                   "required against your own cluster.")
@click.option("--no-preload", is_flag=True, help="Do not write every key first.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--routing", type=click.Choice(["token-aware", "round-robin"]),
              default="token-aware", show_default=True,
              help="Send each request to a replica of its key (the driver's production "
                   "default), or round robin over all nodes.")
@click.option("--store", type=click.Choice(["auto", "cassandra", "swift"]), default="auto",
              show_default=True, help="Which lab to drive; auto: the one that is up. Swift: "
              "object GETs and PUTs through the proxy (container = --keyspace).")
@click.option("--contact-points", default=None, metavar="HOST[,HOST...]",
              help="Drive YOUR Cassandra at these addresses instead of the lab (no root, no "
                   "namespace). Needs --keyspace: the generator creates it if missing and "
                   "refuses one that holds other tables.")
@click.option("--port", type=click.IntRange(1, 65535), default=9042, show_default=True,
              help="With --contact-points: the CQL port.")
@click.option("--username", default=None,
              help="With --contact-points: CQL user; the password is read from "
                   "$ELASTORE_CQL_PASSWORD (never from the command line).")
@click.option("--replication-factor", type=click.IntRange(min=1), default=None,
              help="With --contact-points: the keyspace's replication factor when it is "
                   "created (default 3; the lab's: 2).")
@click.option("--swift-url", default=None, metavar="URL",
              help="Drive YOUR Swift at this storage URL, http[s]://HOST[:PORT]/v1/ACCOUNT "
                   "(as 'swift stat -v' prints it); the token is read from "
                   "$ELASTORE_SWIFT_TOKEN. Container: --keyspace.")
@click.option("--metrics-addr", default=None, metavar="HOST:PORT",
              help="With --contact-points or --swift-url: serve the generator's Prometheus "
                   "metrics here (default: none).")
def run_cmd(workload: Path, out: Path, concurrency: int, rate_scale: float,
            windows: str | None, keyspace: str, no_preload: bool, seed: int,
            routing: str, store: str, contact_points: str | None, port: int,
            username: str | None, replication_factor: int | None, swift_url: str | None,
            metrics_addr: str | None) -> None:
    """Replay WORKLOAD open-loop with cassandra-driver: scheduled rates, 50 clients, keys by
    popularity, 10 KiB incompressible values; per-window CSV and Prometheus metrics.

    Against the lab by default (run as root: it enters the lab's network namespace), or
    against your own cluster with --contact-points (Cassandra) or --swift-url (Swift).
    The replay writes: it preloads every key of the workload (--no-preload skips that) and
    turns the workload's write share into overwrites.

    \b
    Examples:
      sudo elastore load run wl.json.gz --windows 0:60 --rate-scale 0.5 --out load.csv
      ELASTORE_CQL_PASSWORD=... elastore load run wl.json.gz --contact-points 10.0.0.5,10.0.0.6 \\
          --username loadtest --keyspace elastore_load --out load.csv
      ELASTORE_SWIFT_TOKEN=... elastore load run wl.json.gz \\
          --swift-url https://swift.example:8080/v1/AUTH_load --keyspace elastore_load
    """
    from elastore.lab import netns
    from elastore.lab.cassandra import lab
    from elastore.lab.swift import lab as swift
    from elastore.traces.workload import Workload

    if contact_points or swift_url:
        _run_yours(workload, out, concurrency, rate_scale, windows, keyspace, no_preload,
                   seed, routing, contact_points, port, username, replication_factor,
                   swift_url, metrics_addr, click.get_current_context())
        return
    lab_only = [name for name, v in (("--username", username),
                                     ("--replication-factor", replication_factor),
                                     ("--metrics-addr", metrics_addr)) if v is not None]
    if lab_only or port != 9042:
        raise ElastoreError(f"{', '.join(lab_only or ['--port'])}: only with --contact-points "
                            "or --swift-url (the lab's are fixed)")

    if store == "auto":
        up = [name for name, st in (("cassandra", lab.LabState.load(lab_dir())),
                                    ("swift", swift.SwiftLabState.load(lab_dir())))
              if st is not None]
        if len(up) > 1:
            raise ElastoreError("both a Cassandra and a Swift lab are up: say --store")
        store = up[0] if up else "cassandra"
    if store == "swift":
        _run_swift(workload, out, concurrency, rate_scale, windows, keyspace, no_preload,
                   seed)
        return
    state = lab.LabState.load(lab_dir())
    if state is None or not state.nodes:
        raise ElastoreError("no lab is up: run 'elastore lab up' first")
    wl = Workload.load(workload)
    lab.keep_off_store_cpus(state)
    netns.run_inside(state.netns)  # re-enter the lab's namespace
    from elastore.lab.cassandra.load import run

    lab_d = lab_dir()

    def node_labels(address: str) -> dict[str, str]:
        """The pod a node stands in for (read again: nodes join while the load runs)."""
        now = lab.LabState.load(lab_d)
        return lab.pod_labels(now, address) if now is not None else {}

    rows = run(wl, [n.spec.ip for n in state.nodes], out, concurrency=concurrency,
               rate_scale=rate_scale, windows=_windows(windows), keyspace=keyspace,
               preload=not no_preload, metrics_addr=lab.LOADGEN_METRICS, seed=seed,
               routing=routing, node_labels=node_labels,
               on_start=lambda mono: click.echo(
                   f"replay starts at epoch {time.time() + mono - time.monotonic():.3f} "
                   "(the CSV's start_s counts from it)", err=True))
    _summary(rows, out)


def _run_yours(workload: Path, out: Path, concurrency: int, rate_scale: float,
               windows: str | None, keyspace: str, no_preload: bool, seed: int, routing: str,
               contact_points: str | None, port: int, username: str | None,
               replication_factor: int | None, swift_url: str | None,
               metrics_addr: str | None, ctx: click.Context) -> None:
    """``load run`` against a cluster the user names: no lab state, no namespace."""
    import os

    from elastore.traces.workload import Workload

    if contact_points and swift_url:
        raise ElastoreError("--contact-points (Cassandra) or --swift-url (Swift), not both")
    src = ctx.get_parameter_source("keyspace")
    if src is not None and src.name == "DEFAULT":
        raise ElastoreError("against your own cluster, name the keyspace (Swift: the "
                            "container) the replay may write into: --keyspace NAME")
    want = "cassandra" if contact_points else "swift"
    if ctx.params.get("store") not in ("auto", want):
        raise ElastoreError(f"--store {ctx.params.get('store')} contradicts "
                            f"{'--contact-points' if contact_points else '--swift-url'}")
    wl = Workload.load(workload)

    def started(mono: float) -> None:
        click.echo(f"replay starts at epoch {time.time() + mono - time.monotonic():.3f} "
                   "(the CSV's start_s counts from it)", err=True)

    if swift_url:
        from elastore.lab.swift.load import parse_storage_url
        from elastore.lab.swift.load import run as run_swift

        ep = parse_storage_url(swift_url)
        token = os.environ.get("ELASTORE_SWIFT_TOKEN") or None
        click.echo(f"driving Swift at {swift_url} (container {keyspace}, "
                   f"{'with' if token else 'without'} a token)", err=True)
        rows = run_swift(wl, ep.proxy, ep.account, out, container=keyspace,
                         concurrency=concurrency, rate_scale=rate_scale,
                         windows=_windows(windows), preload_keys=not no_preload,
                         metrics_addr=metrics_addr, seed=seed, on_start=started,
                         token=token, tls=ep.tls)
        _summary(rows, out)
        return
    from elastore.lab.cassandra.load import run as run_cassandra

    hosts = [h.strip() for h in (contact_points or "").split(",") if h.strip()]
    if not hosts:
        raise ElastoreError("--contact-points: want HOST[,HOST...]")
    password = os.environ.get("ELASTORE_CQL_PASSWORD")
    if username is not None and password is None:
        raise ElastoreError("--username: set the password in $ELASTORE_CQL_PASSWORD")
    click.echo(f"driving Cassandra at {', '.join(hosts)} port {port} (keyspace {keyspace})",
               err=True)
    rows = run_cassandra(wl, hosts, out, concurrency=concurrency, rate_scale=rate_scale,
                         windows=_windows(windows), keyspace=keyspace,
                         preload=not no_preload, metrics_addr=metrics_addr, seed=seed,
                         rf=replication_factor or 3, on_start=started, routing=routing,
                         port=port, username=username, password=password,
                         own_keyspace_only=True, echo=lambda m: click.echo(m, err=True))
    _summary(rows, out)


def _summary(rows: list[dict[str, Any]], out: Path) -> None:
    sched = sum(r["scheduled_rps"] for r in rows) / len(rows)
    got = sum(r["achieved_rps"] for r in rows) / len(rows)
    worst = max(r["p95_ms"] for r in rows)
    click.echo(f"{len(rows)} windows: scheduled {sched:.1f} req/s, achieved {got:.1f} req/s, "
               f"worst window p95 {worst:.1f} ms; per-window CSV: {out}")


def _run_swift(workload: Path, out: Path, concurrency: int, rate_scale: float,
               windows: str | None, container: str, no_preload: bool, seed: int) -> None:
    from elastore.lab import netns
    from elastore.lab.swift import lab as swift
    from elastore.traces.workload import Workload

    state = swift.SwiftLabState.load(lab_dir())
    if state is None or not state.nodes:
        raise ElastoreError("no Swift lab is up: run 'elastore lab up --store swift' first")
    wl = Workload.load(workload)
    netns.run_inside(state.netns)
    from elastore.lab.swift.load import run

    rows = run(wl, swift.PROXY_ADDR, swift.ACCOUNT, out, container=container,
               concurrency=concurrency, rate_scale=rate_scale, windows=_windows(windows),
               preload_keys=not no_preload, metrics_addr=swift.LOADGEN_METRICS, seed=seed,
               on_start=lambda mono: click.echo(
                   f"replay starts at epoch {time.time() + mono - time.monotonic():.3f} "
                   "(the CSV's start_s counts from it)", err=True))
    _summary(rows, out)


@load_group.command("bulk")
@click.option("--objects", type=click.IntRange(min=1), required=True)
@click.option("--kib", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Each object's size, KiB.")
@click.option("--container", default="bulk", show_default=True)
def bulk_cmd(objects: int, kib: int, container: str) -> None:
    """Swift: write OBJECTS incompressible objects of KIB KiB (b0, b1, ...) through the
    proxy: data for the replicators to move; `load verify --bulk` checks them.

    \b
    Example:
      sudo elastore load bulk --objects 200 --kib 1024
    """
    from elastore.lab import netns
    from elastore.lab.swift import lab as swift

    state = swift.SwiftLabState.load(lab_dir())
    if state is None:
        raise ElastoreError("no Swift lab is up: run 'elastore lab up --store swift' first")
    netns.run_inside(state.netns)
    from elastore.lab.swift.load import write_bulk

    secs = write_bulk(swift.PROXY_ADDR, swift.ACCOUNT, objects, kib * 1024,
                      container=container)
    mib = objects * kib / 1024
    click.echo(f"wrote {objects} objects, {mib:.0f} MiB, in {secs:.1f} s "
               f"({mib / max(secs, 1e-9):.1f} MiB/s through the proxy)")


@load_group.command("verify")
@click.argument("workload", type=click.Path(path_type=Path))
@click.option("--container", default="wiki", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True,
              help="The seed the objects were written with.")
@click.option("--bulk", "bulk_n", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also check this many objects of `load bulk` (container bulk).")
@click.option("--bulk-kib", type=click.IntRange(min=1), default=1024, show_default=True)
def verify_cmd(workload: Path, container: str, seed: int, bulk_n: int, bulk_kib: int
               ) -> None:
    """Check that the Swift lab lost nothing: GET every key of WORKLOAD and compare it byte
    for byte (MD5) with what `load run` wrote, and count the container's listing. Exits 1
    when an object is missing, different or unreadable, or the listing is short.

    \b
    Example:
      sudo elastore load verify wl.json.gz
    """
    import json

    from elastore.lab import netns
    from elastore.lab.swift import lab as swift
    from elastore.traces.workload import Workload

    state = swift.SwiftLabState.load(lab_dir())
    if state is None:
        raise ElastoreError("no Swift lab is up: run 'elastore lab up --store swift' first")
    wl = Workload.load(workload)
    netns.run_inside(state.netns)
    from elastore.lab.swift.load import verify

    res = verify(len(wl.keys), swift.PROXY_ADDR, swift.ACCOUNT, container=container, seed=seed)
    bad = res["missing"] or res["corrupt"] or res["failed"] or res["listed"] != res["keys"]
    if bulk_n:
        from elastore.lab.swift.load import verify_bulk

        res["bulk"] = verify_bulk(swift.PROXY_ADDR, swift.ACCOUNT, bulk_n, bulk_kib * 1024)
        bad = bad or res["bulk"]["bad"] or res["bulk"]["listed"] != bulk_n
        click.echo(f"bulk: {res['bulk']['ok']} of {bulk_n} intact, {res['bulk']['listed']} "
                   "listed", err=True)
    click.echo(json.dumps(res))
    click.echo(f"{res['ok']} of {res['keys']} objects intact, {res['listed']} listed; "
               f"missing {len(res['missing'])}, corrupt {len(res['corrupt'])}, unreadable "
               f"{len(res['failed'])}", err=True)
    if bad:
        raise SystemExit(1)
