"""``elastore demo``: the main job on its built-in default.

Until the trace-replay simulator lands, the main job is what exists: a summary of the
built-in Wikipedia window 2009-03-08 .. 2009-03-22 and a rolling-origin forecast of it,
written to a small report directory.
"""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
import pandas as pd

from elastore.predictor.evaluate import evaluate
from elastore.predictor.registry import METHODS
from elastore.traces.inspect import render, summarize
from elastore.traces.readers import DEFAULT_WINDOW, builtin_trace_path, read_hourly_csv

WARMUP_HOURS = 672  # 4 weeks


@click.command("demo")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("elastore-report"), show_default=True, help="Report directory.")
@click.option("--horizon", type=int, default=1, show_default=True, help="Forecast horizon, h.")
def demo_cmd(out: Path, horizon: int) -> None:
    """Run the main job on the built-in default trace and write a report.

    \b
    Example:
      elastore demo --out elastore-report
    """
    series = read_hourly_csv(builtin_trace_path()).cleaned()
    start = pd.Timestamp(DEFAULT_WINDOW[0])
    end = pd.Timestamp(DEFAULT_WINDOW[1]) + pd.Timedelta(hours=23)
    window = series.window(start, end)
    click.echo(render(summarize(window)))
    history = series.window(start - pd.Timedelta(hours=WARMUP_HOURS), end)
    values = history.values
    methods = [(n, METHODS[n]) for n in ("prorenata", "holt-winters", "seasonal-naive-168")]
    scores, forecasts = evaluate(methods, values, horizon, WARMUP_HOURS)
    click.echo(f"\nforecast of the window at H={horizon} h, {WARMUP_HOURS} h warm-up "
               "(rolling origin):")
    click.echo(f"  {'method':<20} {'sMAPE %':>8} {'MAPE %':>8}")
    for name, s in scores.items():
        click.echo(f"  {name:<20} {s.smape:8.2f} {s.mape:8.2f}")
    out.mkdir(parents=True, exist_ok=True)
    png = out / "forecast.png"
    _plot(history.index[WARMUP_HOURS:], values[WARMUP_HOURS:],
          {k: v[WARMUP_HOURS:] for k, v in forecasts.items()}, horizon, png)
    click.echo(f"\nreport: {png}")


def _plot(index: pd.DatetimeIndex, actual: np.ndarray, forecasts: dict[str, np.ndarray],
          horizon: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4))
    ax.plot(index, actual / 1e6, color="black", lw=1.6, label="actual")
    for name, fc in forecasts.items():
        ax.plot(index, fc / 1e6, lw=0.9, label=f"{name} (H={horizon} h)")
    ax.set_ylabel("requests per hour (millions)")
    ax.set_xlabel("hour (UTC)")
    ax.set_title("Wikipedia, all projects, 2009-03-08 .. 2009-03-22: rolling-origin forecasts")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
