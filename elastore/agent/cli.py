"""``elastore agent ...``: the BwMan node agent (the chart's DaemonSet runs ``agent run``)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import click

from elastore.cliutil import ElastoreGroup, need_extra
from elastore.errors import ElastoreError

#: --once measures over this long (or the window, if shorter)
ONCE_WINDOW_S = 1.0
#: --log-level's choices, the elastore logger's levels (the chart's agent.logLevel)
LOG_LEVELS = ("debug", "info", "warning", "error")
_SECONDS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")


def _seconds(_ctx: click.Context, param: click.Parameter, value: str) -> float:
    """``15``, ``15s``, ``500ms``, ``1m`` -> seconds."""
    m = _SECONDS.match(str(value))
    if not m or float(m.group(1)) <= 0:
        raise click.BadParameter(f"not a positive duration: {value!r} (e.g. 15s, 500ms, 1m)",
                                 param=param)
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


@click.group("agent", cls=ElastoreGroup, extra="agent")
def agent_group() -> None:
    """The BwMan node agent: shapes each managed store pod's traffic with tc (HTB per pod,
    client and storage classes, both directions) at the split the operator publishes in
    the policy's status.bandwidth; measures each store pod's interference index (PSI, CPU
    steal and throttling, hardware counters) for /metrics.

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
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default="info",
              show_default=True, help="The least severe level the agent logs (every "
                                      "change it makes: info).")
@click.option("--once", is_flag=True, help="One reconcile, print what it did and the "
                                           "interference readings (over 1 s) as JSON, exit "
                                           "(the shaping stays).")
@click.option("--interference/--no-interference", default=True, show_default=True,
              help="Measure each store pod's interference index (files only: PSI, "
                   "/proc/stat, cgroup cpu.stat; hardware counters where allowed).")
@click.option("--proc-root", type=click.Path(path_type=Path), default=Path("/proc"),
              show_default=True, help="Where the node's /proc is (pressure/, stat): both "
                                      "are system-wide even inside a container.")
@click.option("--cgroup-root", type=click.Path(path_type=Path),
              default=Path("/sys/fs/cgroup"), show_default=True,
              help="The node's cgroup mount (v2, or hybrid with v2 at unified/): the chart "
                   "mounts the host's at /host/sys/fs/cgroup.")
@click.option("--interference-window", "window_s", callback=_seconds, default="15s",
              metavar="DURATION",
              show_default=True, help="The index is over the newest snapshot and the "
                                      "newest one at least this much older.")
@_common
def run_cmd(node: str, period_s: float, namespaces: tuple[str, ...], kubeconfig: str | None,
            metrics_port: int, metrics_addr: str, log_level: str, once: bool,
            interference: bool, proc_root: Path, cgroup_root: Path, window_s: float,
            netns: str | None) -> None:
    """Reconcile and measure every PERIOD seconds until SIGTERM/SIGINT, then remove every
    qdisc, class, filter and ifb device of the agent's and exit.

    \b
    Example:
      elastore agent run --node "$NODE_NAME" --period 5 --metrics-port 9103
      elastore agent run --node "$NODE_NAME" --cgroup-root /host/sys/fs/cgroup \\
          --interference-window 15s
      elastore agent run --node kwok-node-0 --netns elastore-lab --once   # a test bed
    """
    import logging

    # all of the extra, now: pyroute2 is first imported at the first reconcile
    need_extra("agent")
    from elastore.agent.agent import Agent, AgentMetrics, KubeReader, netlink_factory, serve
    from elastore.hubbub.probe import Probe

    logging.getLogger("elastore").setLevel(log_level.upper())
    if not node.strip():
        raise ElastoreError("--node is empty (the chart sets NODE_NAME from spec.nodeName)")
    reader = KubeReader(namespaces, kubeconfig)
    metrics = AgentMetrics(node)
    probe = Probe(proc_root, cgroup_root, min(window_s, ONCE_WINDOW_S) if once else window_s
                  ) if interference else None
    if probe is not None:
        lay = probe.finder.layout
        click.echo(f"interference probe: PSI {proc_root / 'pressure'} "
                   f"({'present' if (proc_root / 'pressure').is_dir() else 'absent'}), "
                   f"cgroup v2 {lay.v2 or 'not found'}, v1 cpu {lay.v1_cpu or 'none'}, "
                   f"hardware counters {'on' if probe.hw else f'off ({probe.hw_error})'}, "
                   f"window {probe.window_s:g} s", err=True)
    agent = Agent(reader, netlink_factory(netns), node, metrics, probe)
    metrics.agent = agent
    if once:
        rep = agent.reconcile()
        readings = None
        if probe is not None:
            agent.measure()
            time.sleep(probe.window_s)
            readings = agent.measure()
            probe.close()
        click.echo(json.dumps({"shaped": {k: {"interface": s.host_ifname,
                                              "clientMbit": s.target.rates.client_mbit,
                                              "storageMbit": s.target.rates.storage_mbit,
                                              "totalMbit": s.target.rates.total_mbit}
                                          for k, s in rep.shaped.items()},
                               "actions": rep.actions,
                               "problems": [[p.reason, p.message] for p in rep.problems],
                               "interference": readings_json(readings, probe)},
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
    failed = [a for a in agent.run(period_s, stop) if "failed" in a]
    if failed:
        click.echo(f"the agent's tc state was removed but for: {'; '.join(failed)}", err=True)
        raise SystemExit(1)


def readings_json(readings: Any, probe: Any) -> dict[str, Any] | None:
    """The probe's readings as --once prints them (None: the probe is off)."""
    if probe is None:
        return None
    out: dict[str, Any] = {"hardwareCounters": probe.hw_error or "on"}
    if readings is None:
        out["error"] = "no readings (see the log)"
        return out

    def one(r: Any) -> dict[str, Any]:
        return {"index": r.index, "scope": r.scope, "reason": r.reason,
                "used": list(r.used), "signals": dict(sorted(r.components.items()))}

    out.update({"windowSeconds": readings.window_s, "node": one(readings.node),
                "pods": {k: one(r) for k, r in sorted(readings.pods.items())},
                "ipc": readings.ipc, "llcMpki": readings.llc_mpki,
                "ipcReference": readings.ipc_reference})
    return out


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
