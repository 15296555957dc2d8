"""``elastore load run``: the trace-driven load generator (runs inside the lab namespace)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from elastore.cliutil import ElastoreGroup
from elastore.errors import ElastoreError


@click.group("load", cls=ElastoreGroup)
def load_group() -> None:
    """Drive the lab's Cassandra with a workload from `elastore trace build`.

    \b
    Example:
      elastore trace build PAGES.csv.gz --peak-rps 300 -o wl.json.gz
      sudo elastore load run wl.json.gz --windows 0:60 --out load.csv
    """


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
@click.option("--keyspace", default="wiki", show_default=True)
@click.option("--no-preload", is_flag=True, help="Do not write every key first.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--routing", type=click.Choice(["token-aware", "round-robin"]),
              default="token-aware", show_default=True,
              help="Send each request to a replica of its key (the driver's production "
                   "default), or round robin over all nodes.")
def run_cmd(workload: Path, out: Path, concurrency: int, rate_scale: float,
            windows: str | None, keyspace: str, no_preload: bool, seed: int,
            routing: str) -> None:
    """Replay WORKLOAD open-loop with cassandra-driver: scheduled rates, 50 clients, keys by
    popularity, 10 KiB incompressible values; per-window CSV and Prometheus metrics.

    \b
    Example:
      sudo elastore load run wl.json.gz --windows 0:60 --rate-scale 0.5 --out load.csv
    """
    from elastore.lab import lab, netns
    from elastore.traces.workload import Workload

    state = lab.LabState.load(lab.lab_dir())
    if state is None or not state.nodes:
        raise ElastoreError("no lab is up: run 'elastore lab up' first")
    wl = Workload.load(workload)
    lab.keep_off_store_cpus(state)
    netns.run_inside(state.netns)  # re-enter the lab's namespace
    from elastore.lab.loadgen import run

    lab_d = lab.lab_dir()

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
    sched = sum(r["scheduled_rps"] for r in rows) / len(rows)
    got = sum(r["achieved_rps"] for r in rows) / len(rows)
    worst = max(r["p95_ms"] for r in rows)
    click.echo(f"{len(rows)} windows: scheduled {sched:.1f} req/s, achieved {got:.1f} req/s, "
               f"worst window p95 {worst:.1f} ms; per-window CSV: {out}")
