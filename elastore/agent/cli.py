"""``elastore agent ...``: the BwMan node agent (the chart's DaemonSet runs ``agent run``)."""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any

import click

from elastore.cliutil import ElastoreGroup
from elastore.errors import ElastoreError


@click.group("agent", cls=ElastoreGroup)
def agent_group() -> None:
    """The BwMan node agent: shapes each managed store pod's traffic with tc (HTB per pod,
    client and storage classes, both directions) at the split the operator publishes in
    the policy's status.bandwidth.

    \b
    Example (what the chart's DaemonSet runs):
      elastore agent run --node "$NODE_NAME"
    """


def _common(f: Any) -> Any:
    f = click.option("--netns", default=None, metavar="NAME",
                     help="Work in this network namespace (one of elastore's: a test bed's "
                          "'host'). Default: the agent's own (the node's, with "
                          "hostNetwork).")(f)
    return f


@agent_group.command("run")
@click.option("--node", envvar="NODE_NAME", show_envvar=True, required=True,
              help="The node this agent shapes (its pods: field selector spec.nodeName).")
@click.option("--period", "period_s", type=click.FloatRange(0.5, 300), default=5.0,
              show_default=True, help="Seconds between reconciles.")
@click.option("--watch-namespace", "namespaces", multiple=True,
              help="Only policies and pods in these namespaces (repeatable); default: all.")
@click.option("--kubeconfig", default=None, help="Default: in-cluster, else ~/.kube/config.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=9103,
              show_default=True, help="Port of /metrics and /healthz (0: off).")
@click.option("--metrics-addr", default="0.0.0.0", show_default=True)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning"]), default="info",
              show_default=True, help="What the agent logs (every change it makes: info).")
@click.option("--once", is_flag=True, help="One reconcile, print what it did as JSON, exit "
                                           "(the shaping stays).")
@_common
def run_cmd(node: str, period_s: float, namespaces: tuple[str, ...], kubeconfig: str | None,
            metrics_port: int, metrics_addr: str, log_level: str, once: bool,
            netns: str | None) -> None:
    """Reconcile every PERIOD seconds until SIGTERM/SIGINT, then remove every qdisc, class,
    filter and ifb device of the agent's and exit.

    \b
    Example:
      elastore agent run --node "$NODE_NAME" --period 5 --metrics-port 9103
      elastore agent run --node kwok-node-0 --netns elastore-lab --once   # a test bed
    """
    import logging

    from elastore.agent.agent import Agent, AgentMetrics, KubeReader, netlink_factory, serve

    logging.getLogger("elastore").setLevel(log_level.upper())
    if not node.strip():
        raise ElastoreError("--node is empty (the chart sets NODE_NAME from spec.nodeName)")
    reader = KubeReader(namespaces, kubeconfig)
    metrics = AgentMetrics(node)
    agent = Agent(reader, netlink_factory(netns), node, metrics)
    metrics.agent = agent
    if once:
        rep = agent.reconcile()
        click.echo(json.dumps({"shaped": {k: {"interface": s.host_ifname,
                                              "clientMbit": s.target.rates.client_mbit,
                                              "storageMbit": s.target.rates.storage_mbit,
                                              "totalMbit": s.target.rates.total_mbit}
                                          for k, s in rep.shaped.items()},
                               "actions": rep.actions,
                               "problems": [[p.reason, p.message] for p in rep.problems]},
                              indent=2))
        raise SystemExit(0 if rep.api_ok else 1)
    stop = threading.Event()
    me = os.getpid()

    def on_signal(signum: int, _frame: Any) -> None:
        if os.getpid() != me:
            # a child that inherited the handler (pyroute2's NetNS runs one in the target
            # namespace, and stops it with SIGTERM): it just ends
            os._exit(0)
        click.echo(f"signal {signum}: removing the agent's tc state and exiting", err=True)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if metrics_port:
        serve(metrics, agent, metrics_port, metrics_addr, period_s)
    click.echo(f"elastore agent on node {node}: reconciling every {period_s:g} s"
               + (f", /metrics on {metrics_addr}:{metrics_port}" if metrics_port else ""),
               err=True)
    agent.run(period_s, stop)


@agent_group.command("cleanup")
@_common
def cleanup_cmd(netns: str | None) -> None:
    """Remove every qdisc, class, filter and ifb device of the agent's on this node (what a
    killed agent left, when no agent will run here again).

    \b
    Example:
      elastore agent cleanup                      # on the node, as root
      elastore agent cleanup --netns elastore-lab
    """
    from elastore.actuators.tc import PodShaper
    from elastore.agent.agent import netlink_factory

    open_ = netlink_factory(netns)
    ipr = open_()
    try:
        shaper = PodShaper(ipr)
        inv = shaper.inventory()
        done = []
        for idx in sorted(inv.interfaces()):
            done += shaper.unshape(idx)
        for name in sorted(inv.ifbs):
            if shaper.ipr.link_lookup(ifname=name):
                done += shaper.unshape(None, ifb=name)
        left = shaper.inventory().counts()
    finally:
        ipr.close()
    for d in done:
        click.echo(d)
    click.echo(f"left of ours: {left}")
    if any(left.values()):
        raise ElastoreError(f"some of the agent's state could not be removed: {left}")
