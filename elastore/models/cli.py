"""``elastore models ...``: fit, query and show capacity and bandwidth models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import numpy as np

from elastore.cliutil import ElastoreGroup, emit_json, log
from elastore.errors import ElastoreError
from elastore.models.bundle import INTERFERENCE_EFFECTS, ModelSet, fit_models
from elastore.models.capacity import PERCENTILES


@click.group(cls=ElastoreGroup)
def models() -> None:
    """Learn the SLO border and BwMan's bandwidth models from profiling samples.

    \b
    Example:
      elastore models fit --samples experiments/profiles/lab-samples.csv --slo-ms 60 -o model.json
      elastore models query model.json --read-ratio 0.95 --json
    """


@models.command("fit")
@click.option("--samples", type=click.Path(path_type=Path), required=True,
              help="CSV: read_rps,write_rps,migration_mibps,interference,p95_ms,p99_ms "
                   "(one row per server per interval).")
@click.option("--bandwidth", type=click.Path(path_type=Path), default=None,
              help="CSV: client_mbit,served_rps and/or migration_mbit,migration_mibps.")
@click.option("--slo-ms", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Latency SLO, milliseconds.")
@click.option("--percentile", type=click.Choice([str(p) for p in PERCENTILES]),
              default=str(PERCENTILES[0]), show_default=True)
@click.option("--pool-by", default=None, metavar="COLUMN",
              help="Pool the rows that share this column's value (e.g. 'point' in an "
                   "'elastore lab profile' CSV) into one sample: median latency, mean rates.")
@click.option("--interference-effect", type=click.Choice(INTERFERENCE_EFFECTS),
              default="profiled", show_default=True,
              help="profiled: the boosted fit's own interference axis (clamped past the "
                   "largest profiled index); learned: the effect g(i) learned from the "
                   "samples' measured interference index, defined on all of [0, 1] "
                   "(docs/operator.md, 'Interference').")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
def fit_cmd(samples: Path, bandwidth: Path | None, slo_ms: float, percentile: str,
            pool_by: str | None, interference_effect: str, output: Path) -> None:
    """Fit the models and write one versioned JSON model file.

    \b
    Example:
      elastore models fit --samples perf.csv --bandwidth bw.csv --slo-ms 30 -o model.json
      elastore models fit --samples perf.csv --slo-ms 30 --interference-effect learned \\
          -o model.json
    """
    log.info("fitting the SLO border (p%s <= %g ms) from %s ...", percentile, slo_ms, samples)
    ms = fit_models(samples, slo_ms, int(percentile), bandwidth, pool_by, interference_effect)
    ms.save(output)
    cap = ms.capacity
    err = cap.fit_error
    top = float(cap.capacity(cap.read_axis[-1]))
    click.echo(f"wrote {output}: {cap.training['samples']} samples, held-out SLO accuracy "
               f"{err['slo_classification_accuracy_heldout']:.1%}, capacity at read ratio "
               f"{cap.read_axis[-1]:g} without migration {top:.0f} requests/s per server")
    effect = cap.interference_effect
    if effect is not None:
        d = effect.details
        click.echo(f"{effect.describe()} ({d.get('observations', 0)} samples used, skipped: "
                   f"{d.get('skipped', {})})")
    else:
        click.echo(f"interference: the profiled axis up to {cap.interference_axis[-1]:g} "
                   "(indexes above it are read as it)")


@models.command("query")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--read-ratio", type=click.FloatRange(0, 1), required=True)
@click.option("--migration-mibps", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--interference", type=click.FloatRange(0, 1), default=0.0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def query_cmd(model: Path, read_ratio: float, migration_mibps: float, interference: float,
              as_json: bool) -> None:
    """Capacity per server under the SLO, and the migration rate still allowed at 80 % of it.

    \b
    Example:
      elastore models query model.json --read-ratio 0.95 --migration-mibps 5 --json
    """
    ms = ModelSet.load(model)
    cap = float(ms.capacity.capacity(read_ratio, migration_mibps, interference))
    mig = float(ms.capacity.max_migration_rate(0.8 * cap, read_ratio, interference))
    inside = ms.capacity.in_profile(cap, read_ratio, migration_mibps, interference)
    if not inside:
        log.warning("query outside the profiled region: values are clamped to its edge")
    effect = ms.capacity.interference_effect
    if as_json:
        emit_json({"capacity_rps": cap, "max_migration_mibps": mig, "in_profile": inside,
                   "interference_factor": None if effect is None else
                   float(effect.factor(interference))})
    else:
        click.echo(f"capacity {cap:.1f} requests/s per server (p{ms.capacity.percentile} <= "
                   f"{ms.capacity.slo_ms:g} ms); at 80 % of it migration may run at "
                   f"{mig:.2f} MiB/s per server")


def _from_configmap(ref: str, key: str) -> tuple[ModelSet, str]:
    """A model kept in a ConfigMap (``NAMESPACE/NAME``): the one a policy learns online,
    ``<policy>-capacity-model``, or one made with ``models fit``. Read with the kubeconfig
    (``$KUBECONFIG``)."""
    import os

    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    ns, _, name = ref.partition("/")
    if not ns or not name:
        raise ElastoreError(f"--configmap {ref!r}: want NAMESPACE/NAME")
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.environ.get("KUBECONFIG") or None)
    except (config.ConfigException, OSError) as exc:
        raise ElastoreError(f"no kubeconfig to read ConfigMap {ref} with: {exc}") from exc
    try:
        cm: Any = client.CoreV1Api().read_namespaced_config_map(name, ns)
    except ApiException as exc:
        raise ElastoreError(f"ConfigMap {ref}: {exc.reason}") from exc
    text = (cm.data or {}).get(key)
    if text is None:
        raise ElastoreError(f"ConfigMap {ref} has no key {key!r}")
    where = f"configmap {ref}"
    return ModelSet.loads(text, where), where


@models.command("show")
@click.argument("model", type=click.Path(path_type=Path), required=False)
@click.option("--configmap", "configmap", metavar="NAMESPACE/NAME", default=None,
              help="Read the model from a ConfigMap instead of a file: a policy's learned "
                   "model is <policy>-capacity-model in its namespace.")
@click.option("--key", default="model.json", show_default=True,
              help="The ConfigMap's key (with --configmap).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG of the SLO-border curves.")
def show_cmd(model: Path | None, configmap: str | None, key: str, plot: Path | None) -> None:
    """Summarise a model file or ConfigMap; --plot draws the SLO border for several
    migration rates and interference levels (reads/s against writes/s, as the paper's Figs
    5.13 and 5.24). A model learned online also shows how far its learning has got.

    \b
    Examples:
      elastore models show model.json --plot border.png
      elastore models show --configmap shop/orders-capacity-model
    """
    if (model is None) == (configmap is None):
        raise ElastoreError("give a model file or --configmap NAMESPACE/NAME (one of them)")
    if configmap is not None:
        ms, where = _from_configmap(configmap, key)
    else:
        assert model is not None
        ms, where = ModelSet.load(model), str(model)
    c = ms.capacity
    training = {k: v for k, v in c.training.items() if k != "online"}
    lines = [f"model     {where}", f"method    {c.method}",
             f"SLO       p{c.percentile} <= {c.slo_ms:g} ms",
             f"training  {training}", f"fit error {c.fit_error}",
             f"grid      load {len(c.load_axis)} x read ratio {len(c.read_axis)} x migration "
             f"{len(c.migration_axis)} x interference {len(c.interference_axis)}",
             "interference " + (c.interference_effect.describe() if c.interference_effect
                                else f"profiled axis {list(np.round(c.interference_axis, 3))}"
                                     " (clamped above its top)")]
    for r in (c.read_axis[0], c.read_axis[-1]):
        row = ", ".join(f"{m:g} MiB/s: {float(c.capacity(r, m, 0)):.0f}"
                        for m in c.migration_axis[:: max(1, len(c.migration_axis) // 4)])
        lines.append(f"capacity  read ratio {r:g}, no interference: {row} (requests/s/server)")
    online = c.training.get("online")
    if isinstance(online, dict) and isinstance(online.get("summary"), dict):
        m = online["summary"]
        lines += [
            f"learned   online by policy {online.get('policy')}, at {online.get('at')}: "
            f"{m.get('samples')} observations in {m.get('bins')} bins",
            f"          capacity {m.get('capacityRps')} req/s per node (10-90 %: "
            f"{m.get('capacityIntervalRps')}), prior {m.get('priorCapacityRps')}, planned "
            f"with {m.get('planningCapacityRps')}",
            f"          confidence {m.get('confidence')}, load range observed "
            f"{m.get('observedFraction')}, border observed {m.get('borderObserved')}, fit "
            f"error {m.get('fitErrorPct')} %, scale-in allowed {m.get('scaleInAllowed')}"]
    bw = ms.bandwidth
    if bw.client is not None:
        lines.append(f"bwman     clients: {bw.client(10):.0f} req/s at 10 Mbit/s, "
                     f"{bw.client(50):.0f} at 50 Mbit/s")
    if bw.migration is not None:
        lines.append(f"bwman     migration: {bw.migration(80):.1f} MiB/s at 80 Mbit/s")
    click.echo("\n".join(lines))
    if plot is not None:
        _plot(ms, plot)
        click.echo(f"plot: {plot}")


def _plot(ms: ModelSet, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = ms.capacity
    ratios = np.linspace(c.read_axis[0], c.read_axis[-1], 40)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    migs = np.unique(np.quantile(c.migration_axis, [0, 0.25, 0.5, 0.75]))
    for m in migs:
        cap = c.capacity(ratios, m, 0.0)
        axes[0].plot(cap * (1 - ratios), cap * ratios, label=f"migration {m:.1f} MiB/s")
    axes[0].set_title(f"SLO border (p{c.percentile} <= {c.slo_ms:g} ms), no interference")
    inters = np.unique(np.quantile(c.interference_axis, [0, 0.33, 0.66, 1]))
    for i in inters:
        cap = c.capacity(ratios, 0.0, i)
        axes[1].plot(cap * (1 - ratios), cap * ratios, label=f"interference {i:.2f}")
    axes[1].set_title("SLO border, no migration, by interference index")
    for ax in axes:
        ax.set_xlabel("writes per second per server")
        ax.set_ylabel("reads per second per server")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
