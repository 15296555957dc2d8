"""``elastore simulate``: the main job."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
import pandas as pd

from elastore.cliutil import WHEN, WHEN_END, emit_json, log
from elastore.errors import ElastoreError
from elastore.models.bundle import ModelSet
from elastore.models.storage import COMPACTION_HEADROOM, DEFAULT_COMPACTION
from elastore.resources import builtin_model
from elastore.sim.controllers import CONTROLLERS, KNOWN
from elastore.sim.run import SimConfig, locate, simulate, with_slo
from elastore.traces.readers import DEFAULT_WINDOW, builtin_trace_path, read_series

PLACEHOLDER = builtin_model("placeholder")
LAB_MODEL = builtin_model("lab")
LAB_NOTE = (
    "LAB PROFILE. The capacity and latency model was fitted (`elastore models fit`) to "
    "samples measured on real Cassandra 5.0.4 by `elastore lab profile`: 3 nodes with 256 MiB "
    "heaps sharing one 2-core machine, the open-loop load generator, real streaming "
    "(nodetool rebuild under setstreamthroughput) and a CPU noisy neighbour; samples and "
    "the exact commands in experiments/profiles/. Servers in this simulation are servers "
    "of that size; a bigger machine has a bigger capacity, so profile your own hardware.")
PEAK_SERVERS = 18  # the default trace scaling: its busiest hour needs about this many servers
PLACEHOLDER_NOTE = (
    "PLACEHOLDER. The capacity and latency model was fitted to samples drawn from the "
    "documented law in elastore/models/synthetic.py (an M/M/1-style server of a few hundred "
    "requests/s), not to a lab measurement. Treat the numbers as a comparison of "
    "controllers under the same assumed physics, not as a prediction for a real cluster.")


def controller_names(spec: str) -> list[str]:
    """``--controllers``: the names, each former name (``ideal``) as the controller's name
    now, with a one-line warning."""
    # imported here: a process that loaded an older controllers module still imports this one
    from elastore.sim.controllers import RENAMED

    names = []
    for c in (c.strip() for c in spec.split(",")):
        if c in RENAMED:
            log.warning("controller %r is deprecated: it is now %r (the same controller)",
                        c, RENAMED[c])
            c = RENAMED[c]
        if c:
            names.append(c)
    return names


def default_model() -> tuple[Path, str]:
    return LAB_MODEL, LAB_NOTE


def model_choice(spec: Path | None) -> tuple[Path, str]:
    """``--model``: the lab profile (default), ``placeholder``, or a model file."""
    if spec is None or str(spec) == "lab":
        return default_model()
    if str(spec) == "placeholder":
        return PLACEHOLDER, PLACEHOLDER_NOTE
    return spec, f"model {spec}"


@click.command("simulate")
@click.option("--trace", "trace_path", type=click.Path(path_type=Path), default=None,
              help="Any trace `elastore trace` reads; default: the built-in all-projects one.")
@click.option("--column", default="requests", show_default=True)
@click.option("--start", type=WHEN, default=None, help=f"default {DEFAULT_WINDOW[0]} (built-in)")
@click.option("--end", type=WHEN_END, default=None, help=f"default {DEFAULT_WINDOW[1]} (built-in)")
@click.option("--controllers", default=",".join(CONTROLLERS), show_default=True,
              help=f"Comma-separated, of: {', '.join(KNOWN)}. 'operator' runs the "
                   "operator's own runner on the simulated cluster.")
@click.option("--slo-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Judge against this SLO (default: the model's).")
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=None,
              help="'lab' (default: the shipped lab profile), 'placeholder' (the documented "
                   "law of elastore/models/synthetic.py) or a file from `elastore models fit`.")
@click.option("--peak-rps", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Scale the trace so its busiest hour runs at this rate (default: what "
                   f"{PEAK_SERVERS} servers of the model carry at read ratio 0.95).")
@click.option("--data-gib", type=click.FloatRange(min=0, min_open=True), default=50.0,
              show_default=True, help="Data stored in the cluster, GiB (replicas included).")
@click.option("--hour-seconds", type=click.IntRange(min=10), default=600, show_default=True,
              help="Replay seconds per trace hour (also the control period): 600 is the "
                   "paper's 1 h -> 10 min; 3600 replays in real time, as the operator lives "
                   "it. Migrations take the same seconds either way.")
@click.option("--penalty", type=click.FloatRange(min=0), default=100.0, show_default=True,
              help="VM-hours one hour of SLO violation costs: what 'optimal' (and the "
                   "penalty-aware planner) minimise, U = VM-hours + penalty x violation-hours.")
@click.option("--interference", multiple=True, metavar="FROM_H:TO_H:INDEX",
              help="Inject an interference phase (trace hours, index 0..1); repeatable.")
@click.option("--learn-online", is_flag=True,
              help="prorenata and its forms (prorenata-window, perfect-forecast-window, ...) "
                   "and operator learn their capacity model from the replay's measured "
                   "latencies (with noise), starting from the model with its capacity times "
                   "--prior-scale; the JSON gains model_error_pct.")
@click.option("--prior-scale", type=click.FloatRange(0.05, 20), default=1.0, show_default=True,
              help="With --learn-online: how wrong the starting model's capacity is (2: "
                   "optimistic, 0.5: pessimistic).")
@click.option("--data-growth-gib-per-day", type=float, default=0.0, show_default=True,
              help="Net GiB the data grows a trace day (writes in step with the write load, "
                   "less what TTL and compaction take back); with it or --volume-gib the "
                   "replay models each node's disk")
@click.option("--volume-gib", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Each node's volume, GiB (default with --data-growth-gib-per-day: the "
                   "starting cluster's data at 60 % of its volumes)")
@click.option("--target-utilization", type=click.FloatRange(0, 0.95, min_open=True),
              default=0.8, show_default=True,
              help="The share of each volume the data may fill (spec.storage)")
@click.option("--compaction", type=click.Choice(list(COMPACTION_HEADROOM)),
              default=DEFAULT_COMPACTION, show_default=True,
              help="The compaction strategy, whose headroom lowers the budget")
@click.option("--no-cleanup", is_flag=True,
              help="No nodetool cleanup after a scale-out (the reference text's cluster: a "
                   "join ends when its data has arrived, and a scale-in may follow at once). "
                   "By default the old nodes clean up in turn at the migration rate, as the "
                   "operator does (spec.scaleUp.cleanup), and scale-ins wait for it.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("elastore-report"), show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def simulate_cmd(trace_path: Path | None, column: str, start: pd.Timestamp | None,
                 end: pd.Timestamp | None, controllers: str, slo_ms: float | None,
                 model_path: Path | None, peak_rps: float | None, data_gib: float,
                 hour_seconds: int, penalty: float, interference: tuple[str, ...],
                 learn_online: bool, prior_scale: float, data_growth_gib_per_day: float,
                 volume_gib: float | None, target_utilization: float, compaction: str,
                 no_cleanup: bool, out: Path, as_json: bool) -> None:
    """Replay a Wikipedia trace through a simulated cluster under each controller.

    With no arguments: the built-in 2009-03-08 .. 2009-03-22 trace, every controller, and a
    report (Markdown + PNGs) in ./elastore-report/.

    \b
    Examples:
      elastore simulate
      elastore simulate --start 2009-05-03 --end 2009-05-16 --json
      elastore simulate --controllers prorenata,hpa --interference 48:96:0.5
      elastore simulate --controllers prorenata --learn-online --prior-scale 2
      elastore simulate --data-growth-gib-per-day 10 --controllers prorenata,optimal,hpa
      elastore simulate --no-cleanup
    """
    names = controller_names(controllers)
    bad = [c for c in names if c not in KNOWN]
    if bad or not names:
        raise ElastoreError(f"unknown controller(s) {', '.join(bad) or '(none)'}; choose from "
                            f"{', '.join(KNOWN)}")
    phases = []
    for spec in interference:
        try:
            a, b, i = (float(x) for x in spec.split(":"))
        except ValueError:
            raise ElastoreError(f"--interference {spec!r}: want FROM_H:TO_H:INDEX") from None
        phases.append((a, b, i))
    source = trace_path if trace_path is not None else builtin_trace_path()
    if trace_path is None and start is None and end is None:
        start = pd.Timestamp(DEFAULT_WINDOW[0])
        end = pd.Timestamp(DEFAULT_WINDOW[1]) + pd.Timedelta(hours=23)
    series = read_series(source, "auto", column).cleaned()
    i0, hours = locate(series, start, end)
    model_path, physics = model_choice(model_path)
    models = ModelSet.load(model_path)
    models.capacity = with_slo(models.capacity, slo_ms)
    if peak_rps is None:
        peak_rps = round(PEAK_SERVERS * float(models.capacity.capacity(0.95, 0.0, 0.0)), -1)
        log.info("peak %.0f requests/s: %d servers of the model at read ratio 0.95",
                 peak_rps, PEAK_SERVERS)
    if prior_scale != 1.0 and not learn_online:
        raise ElastoreError("--prior-scale needs --learn-online (it is where the learning "
                            "starts from)")
    cfg = SimConfig(peak_rps=peak_rps, data_gib=data_gib, hour_seconds=float(hour_seconds),
                    penalty=penalty, interference=tuple(phases), learn_online=learn_online,
                    prior_scale=prior_scale, data_growth_gib_per_day=data_growth_gib_per_day,
                    volume_gib=volume_gib, target_utilization=target_utilization,
                    compaction=compaction, cleanup=not no_cleanup)
    cfg.validate()
    steps = int(hours * cfg.hour_seconds / cfg.step_s) * len(names)
    t0 = time.perf_counter()
    log.info("simulating %d h under %d controller(s) ...", hours, len(names))
    with click.progressbar(length=steps, label="simulating", file=sys.stderr) as bar:
        res = simulate(series, i0, hours, names, models, cfg, physics, progress=bar.update)
    seconds = time.perf_counter() - t0
    from elastore.sim.report import write_report

    report = write_report(res, out, seconds)
    if as_json:
        emit_json(res.to_json())
    else:
        doc = res.to_json()["controllers"]
        w = max(14, *(len(n) + 1 for n in doc))
        click.echo(f"{'controller':<{w}}{'VM-hours':>10}{'SLO viol %':>12}{'p95 med ms':>12}"
                   f"{'util':>7}{'actions':>9}{'U(10)':>9}{'U(100)':>9}")
        for n, m in doc.items():
            click.echo(f"{n:<{w}}{m['vm_hours']:>10.1f}{m['slo_violation_pct']:>12.2f}"
                       f"{m['p95_latency_ms_median']:>12.1f}{m['cpu_util_mean']:>7.2f}"
                       f"{m['scale_actions']:>9}{m['utility']['10']:>9.1f}"
                       f"{m['utility']['100']:>9.1f}")
        for n, m in doc.items():
            if "model_error_pct" in m:
                click.echo(f"{n}: learned capacity {m['model_error_pct']:.1f} % from the "
                           "truth at the end; by day: " + ", ".join(
                               f"{e:.1f} %" for e in m["model_error_pct_by_day"]))
        click.echo(f"\nreport: {report} ({seconds:.1f} s)")
        if physics == PLACEHOLDER_NOTE:
            click.echo("physics: PLACEHOLDER model (see the report), not a lab profile")
        elif physics == LAB_NOTE:
            click.echo(f"physics: the lab profile ({LAB_MODEL.name}, measured on real "
                       f"Cassandra; see the report); peak {peak_rps:,.0f} requests/s")
