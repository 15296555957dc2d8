"""``elastore predict ...``: evaluate forecasters on a trace."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
import pandas as pd

from elastore.cliutil import WHEN, WHEN_END, ElastoreGroup, emit_json, log, need_extra
from elastore.errors import ElastoreError
from elastore.predictor.evaluate import Scores, evaluate
from elastore.predictor.registry import BASELINES, METHODS, NEEDS_EXTRA, parse_methods
from elastore.traces.readers import builtin_trace_path, read_series


@click.group(cls=ElastoreGroup)
def predict() -> None:
    """Workload forecasting: ProRenaTa's predictor and the baselines.

    \b
    Example:
      elastore predict evaluate --start 2009-01-01 --end 2009-06-30 --horizon 1
    """


@predict.command("evaluate")
@click.option("--trace", "trace_path", type=click.Path(path_type=Path), default=None,
              help="Trace (any format `elastore trace` reads); default: the built-in one.")
@click.option("--column", default="requests", show_default=True)
@click.option("--start", type=WHEN, default=None, help="First hour (UTC).")
@click.option("--end", type=WHEN_END, default=None, help="Last hour; a bare date = whole day.")
@click.option("--horizon", type=click.IntRange(min=1), required=True, help="Hours ahead, H.")
@click.option("--warmup-hours", type=click.IntRange(min=1), default=672, show_default=True,
              help="Hours each method sees before scoring starts (not scored).")
@click.option("--methods", default="all", show_default=True,
              help=f"A comma list of: all (every policy method), {', '.join(METHODS)}, and the "
                   f"baselines {', '.join(BASELINES)} (mstl needs "
                   "pip install 'elastore[forecast]').")
@click.option("--per-key", is_flag=True,
              help="Per-page trace only: also forecast every page and sum (prorenata-per-key).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG: one week of actuals against each method's forecast.")
@click.option("--quantiles", default=None, metavar="C1,C2",
              help="Also score calibrated central prediction intervals of these coverages "
                   "(e.g. 0.8,0.95): the share of actuals inside each ('coverage' in the "
                   "JSON) and its mean width relative to the forecast.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def evaluate_cmd(trace_path: Path | None, column: str, start: pd.Timestamp | None,
                 end: pd.Timestamp | None, horizon: int, warmup_hours: int, methods: str,
                 per_key: bool, plot: Path | None, quantiles: str | None,
                 as_json: bool) -> None:
    """Rolling-origin evaluation: each method sees data up to t and forecasts t+H.

    Prints sMAPE %, MAPE %, RMSE, MASE and seconds per method; the warm-up hours are not
    scored, and hours without an actual (gaps) are skipped. Flagged outliers are scored as
    gaps too (they are measurement faults, not load).

    \b
    Examples:
      elastore predict evaluate --start 2009-01-01 --end 2009-06-30 --horizon 1
      elastore predict evaluate --horizon 3 --methods prorenata,holt-winters --json
      elastore predict evaluate --trace ../shared/traces/wikipedia/en-2016-01-pages-hourly.csv.gz \\
          --horizon 1 --warmup-hours 336 --per-key
    """
    names = parse_methods(methods)
    for extra in sorted({NEEDS_EXTRA[n] for n in names if n in NEEDS_EXTRA}):
        need_extra(extra)  # now, not after the other methods ran
    coverages: list[float] = []
    if quantiles:
        try:
            coverages = [float(x) for x in quantiles.split(",") if x.strip()]
        except ValueError:
            raise ElastoreError(f"--quantiles {quantiles!r}: want coverages such as "
                                "0.8,0.95") from None
        if not coverages or not all(0 < c < 1 for c in coverages):
            raise ElastoreError(f"--quantiles {quantiles!r}: every coverage must be in (0, 1)")
    source = trace_path if trace_path is not None else builtin_trace_path()
    series = read_series(source, "auto", column)
    if start is not None or end is not None:
        try:
            series = series.window(start, end)
        except ValueError as exc:
            raise ElastoreError(str(exc), str(source)) from exc
    series = series.cleaned()
    values = series.values
    if horizon > warmup_hours:
        raise ElastoreError(
            f"--horizon {horizon} h is longer than the warm-up ({warmup_hours} h): the first "
            "forecast is made at the end of the warm-up for H hours later, so raise "
            "--warmup-hours to at least the horizon")
    if warmup_hours >= len(values):
        raise ElastoreError(
            f"the warm-up ({warmup_hours} h) leaves nothing to score in {len(values)} h of "
            "trace: shorten --warmup-hours or widen --start/--end"
        )
    log.info("evaluating %d method(s) on %d h (%d scored) at H=%d ...", len(names),
             len(values), len(values) - warmup_hours, horizon)
    factories = [(n, {**METHODS, **BASELINES}[n]) for n in names]
    scores, forecasts = evaluate(factories, values, horizon, warmup_hours,
                                 progress=lambda n: log.info("  %s done", n),
                                 coverages=coverages)
    if per_key:
        from elastore.predictor.perkey import evaluate_per_key

        s, fc = evaluate_per_key(source, series, horizon, warmup_hours, start, end)
        scores["prorenata-per-key"] = s
        forecasts["prorenata-per-key"] = fc
    points = next(iter(scores.values())).points if scores else 0
    if as_json:
        emit_json({"horizon": horizon, "points": points,
                   "methods": {n: s.as_dict() for n, s in scores.items()}})
    else:
        click.echo(render_table(scores, horizon, points, series.start, warmup_hours))
    if plot is not None:
        plot_week(series.index, values, forecasts, horizon, warmup_hours, plot)
        if not as_json:
            click.echo(f"plot: {plot}")


def render_table(scores: dict[str, Scores], horizon: int, points: int, start: pd.Timestamp,
                 warmup: int) -> str:
    first = start + pd.Timedelta(hours=warmup)
    lines = [f"H={horizon} h, {points} scored hours from {first:%Y-%m-%d %H:%M}",
             f"{'method':<26}{'sMAPE %':>9}{'MAPE %':>9}{'RMSE':>14}{'MASE':>8}{'seconds':>9}"]
    cov = next((s.coverage for s in scores.values() if s.coverage), None) or {}
    lines[-1] += "".join(f"{'cover ' + c:>12}" for c in cov)
    for name, s in sorted(scores.items(), key=lambda kv: kv[1].smape):
        lines.append(f"{name:<26}{s.smape:9.3f}{s.mape:9.3f}{s.rmse:14,.0f}{s.mase:8.3f}"
                     f"{s.seconds:9.2f}"
                     + "".join(f"{(s.coverage or {}).get(c, float('nan')):12.3f}"
                               for c in cov))
    return "\n".join(lines)


def plot_week(index: pd.DatetimeIndex, actual: np.ndarray, forecasts: dict[str, np.ndarray],
              horizon: int, warmup: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lo = warmup
    hi = min(len(actual), lo + 168)
    fig, ax = plt.subplots(figsize=(12, 4.5))
    ax.plot(index[lo:hi], actual[lo:hi] / 1e6, color="black", lw=2, label="actual")
    for name, fc in forecasts.items():
        ax.plot(index[lo:hi], fc[lo:hi] / 1e6, lw=0.9, label=name)
    ax.set_ylabel("requests per hour (millions)")
    ax.set_xlabel("hour (UTC)")
    ax.set_title(f"First scored week: actuals vs forecasts at H={horizon} h (rolling origin)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
