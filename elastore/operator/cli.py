"""``elastore operator ...``: run the ElasticPolicy operator, render its CRD."""

from __future__ import annotations

import os
from pathlib import Path

import click

from elastore.cliutil import ElastoreGroup
from elastore.errors import ElastoreError


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
@click.option("--peering-lifetime", type=click.IntRange(1, 3600), default=60,
              show_default=True, envvar="ELASTORE_PEERING_LIFETIME", show_envvar=True,
              help="Seconds without keep-alives after which another replica takes over.")
@click.option("--nodetool", "nodetools", multiple=True, metavar="COMMAND",
              help="A nodetool command policies may name in spec.target.nodetool "
                   "(repeatable; split like a shell would). Default: 'nodetool' and "
                   "'/opt/cassandra/bin/nodetool'. A policy naming any other is refused: "
                   "whoever may write a policy must not choose what runs in the store's "
                   "pods.")
@click.option("--exec-prefix", "exec_prefixes", multiple=True, metavar="COMMAND",
              help="A command a Swift policy's commands in its pods may go through "
                   "(spec.target.swift.execPrefix; repeatable, split like a shell would). "
                   "Default: none, the commands (md5sum, du) run as they are.")
def run_cmd(kubeconfig: Path | None, namespaces: tuple[str, ...], metrics_port: int,
            metrics_addr: str, liveness: str | None, standalone: bool, priority: int | None,
            peering: str, peering_lifetime: int, nodetools: tuple[str, ...],
            exec_prefixes: tuple[str, ...]) -> None:
    """Run the operator until SIGTERM/SIGINT: a control loop per ElasticPolicy, leader
    election among replicas, Events for every decision and action, metrics on /metrics.

    \b
    Example:
      elastore operator run --kubeconfig ~/.kube/config --standalone
      elastore operator run -n storage --metrics-port 9808    # in a pod: its ServiceAccount
    """
    import shlex

    import kopf

    from elastore.operator.runtime import DEFAULT_NODETOOLS, OperatorOptions, Runtime

    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise ElastoreError("no such kubeconfig", str(kubeconfig))
        # the one standard way to name a kubeconfig: kopf's login and the kubernetes
        # client both read $KUBECONFIG
        os.environ["KUBECONFIG"] = str(kubeconfig)
    allowed = tuple(tuple(shlex.split(c)) for c in nodetools) or DEFAULT_NODETOOLS
    if any(not argv for argv in allowed):
        raise ElastoreError("--nodetool needs a command, got an empty one")
    prefixes = ((), *(tuple(shlex.split(c)) for c in exec_prefixes))
    options = OperatorOptions(metrics_port=metrics_port, metrics_addr=metrics_addr,
                              peering=peering, standalone=standalone, priority=priority,
                              peering_lifetime_s=peering_lifetime, nodetools=allowed,
                              exec_prefixes=prefixes)
    import elastore.operator.handlers  # noqa: F401 - registers the handlers

    kopf.configure(verbose=False)
    kopf.run(clusterwide=not namespaces, namespaces=list(namespaces),
             standalone=standalone, liveness_endpoint=liveness,
             memo=kopf.Memo(elastore=Runtime(options)))


@operator_group.command("crd")
def crd_cmd() -> None:
    """Print the ElasticPolicy CRD (kubectl apply -f -).

    \b
    Example:
      elastore operator crd | kubectl apply -f -
    """
    from elastore.resources import crd_path

    click.echo(crd_path().read_text(), nl=False)
