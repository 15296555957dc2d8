"""``elastore operator ...``: run the ElasticPolicy operator, render its CRD."""

from __future__ import annotations

import os
from pathlib import Path

import click

from elastore.cli import ElastoreGroup
from elastore.errors import ElastoreError

CRD = Path(__file__).resolve().parent.parent.parent / "charts" / "elastore" / "crds" / \
    "elasticpolicies.elastore.io.yaml"


@click.group("operator", cls=ElastoreGroup)
def operator_group() -> None:
    """The Kubernetes operator for ElasticPolicy (kopf).

    \b
    Example:
      kubectl apply -f charts/elastore/crds/        # the CRDs, once
      elastore operator run --namespace storage     # Recommend mode by default
      kubectl get elasticpolicies -n storage
    """


@operator_group.command("run")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Default: in-cluster, else $KUBECONFIG or ~/.kube/config.")
@click.option("-n", "--namespace", "namespaces", multiple=True,
              help="Serve these namespaces (repeatable); default: all.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=9808,
              show_default=True, help="Port of /metrics (0: off).")
@click.option("--metrics-addr", default="0.0.0.0", show_default=True)
@click.option("--liveness", default=None, metavar="URL",
              help="kopf's liveness endpoint, e.g. http://0.0.0.0:8080/healthz.")
@click.option("--standalone", is_flag=True,
              help="No leader election (one replica only).")
@click.option("--priority", type=int, default=None,
              help="Peering priority (default: random, so exactly one replica acts).")
@click.option("--peering", default="elastore", show_default=True,
              help="Name of the ClusterKopfPeering object the replicas share.")
def run_cmd(kubeconfig: Path | None, namespaces: tuple[str, ...], metrics_port: int,
            metrics_addr: str, liveness: str | None, standalone: bool, priority: int | None,
            peering: str) -> None:
    """Run the operator until SIGTERM/SIGINT: a control loop per ElasticPolicy, leader
    election among replicas, Events for every decision and action, metrics on /metrics.

    \b
    Example:
      elastore operator run --kubeconfig ~/.kube/config --standalone
      elastore operator run -n storage --metrics-port 9808    # in a pod: its ServiceAccount
    """
    import kopf

    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise ElastoreError("no such kubeconfig", str(kubeconfig))
        os.environ["KUBECONFIG"] = str(kubeconfig)
    os.environ["ELASTORE_METRICS_PORT"] = str(metrics_port)
    os.environ["ELASTORE_METRICS_ADDR"] = metrics_addr
    os.environ["ELASTORE_PEERING"] = peering
    if standalone:
        os.environ["ELASTORE_STANDALONE"] = "1"
    if priority is not None:
        os.environ["ELASTORE_PEERING_PRIORITY"] = str(priority)
    import elastore.operator.handlers  # noqa: F401 - registers the handlers

    kopf.configure(verbose=False)
    kopf.run(clusterwide=not namespaces, namespaces=list(namespaces),
             standalone=standalone, liveness_endpoint=liveness)


@operator_group.command("crd")
def crd_cmd() -> None:
    """Print the ElasticPolicy CRD (kubectl apply -f -).

    \b
    Example:
      elastore operator crd | kubectl apply -f -
    """
    click.echo(CRD.read_text(), nl=False)
