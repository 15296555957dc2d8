"""``elastore lab ...``: a real local Cassandra or Swift cluster in a network namespace of
its own (:mod:`elastore.lab.cassandra`, :mod:`elastore.lab.swift`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from elastore.cliutil import ElastoreGroup, log
from elastore.errors import ElastoreError
from elastore.lab import netns
from elastore.lab.cassandra import lab
from elastore.lab.host import lab_dir
from elastore.models.capacity import PERCENTILES


@click.group("lab", cls=ElastoreGroup, extra="lab")
def lab_group() -> None:
    """Real Cassandra 5.0 nodes (Maven Central jars, Java 17) on 127.0.0.x inside the
    network namespace 'elastore-lab'. Needs root (network namespaces).

    \b
    Example:
      elastore lab up --nodes 3 && elastore lab status && elastore lab down
    """


@lab_group.command("up")
@click.option("--store", type=click.Choice(["cassandra", "swift"]), default="cassandra",
              show_default=True, help="Cassandra 5.0 (Maven Central jars) or OpenStack Swift "
              "(Debian's packages: a proxy and storage nodes, namespace elastore-swift).")
@click.option("--nodes", type=click.IntRange(1, 6), default=3, show_default=True,
              help=f"Storage nodes (Cassandra: at most {lab.MAX_NODES} on this machine).")
@click.option("--replicas", type=click.IntRange(1, 6), default=2, show_default=True,
              help="Swift: the rings' replica count.")
@click.option("--rsync-bwlimit", type=click.IntRange(min=0), default=0, show_default=True,
              help="Swift: the replicators' rsync_bwlimit, KiB/s (0: none).")
@click.option("--heap", default="256M", show_default=True, help="JVM heap per node.")
@click.option("--veth", is_flag=True, help="Each node in a namespace of its own behind a veth "
              "(a pod on a routed CNI, at 10.88.0.N), the lab's namespace routing between "
              "them as a Kubernetes node does: what the node agent shapes.")
@click.option("--cpu-per-node", type=float, default=0.0, show_default=True,
              help="Each node's CPU limit in cores (its cgroup's CFS quota; 0: none). With "
              "a limit, capacity grows with the nodes on a small machine, as with servers.")
@click.option("--store-cpus", default="", metavar="LIST",
              help="Run the nodes on these CPUs only (e.g. 1); the load generator then keeps "
              "to the others, as clients on machines of their own.")
@click.option("--cfs-period-ms", type=click.FloatRange(1, 1000), default=100.0,
              show_default=True,
              help="The CFS period of the CPU limit (the kubelet's cpuCFSQuotaPeriod). A "
              "node that spends its quota early waits for the next period: with the default "
              "100 ms and 0.3 core that is stalls of up to 70 ms in its tail latency.")
@click.option("--example-exporter", is_flag=True,
              help="Also run, per node, the JMX exporter's standalone server with its example "
              "configuration's naming (Prometheus job cassandra-example): what the "
              "jmx-exporter-example preset reads.")
@click.option("--single-token", is_flag=True,
              help="One token per node (num_tokens: 1 and an initial_token each, spaced "
              "evenly unless --tokens says) instead of 16 vnodes: what `lab move` needs.")
@click.option("--tokens", default="", metavar="LIST",
              help="The nodes' tokens, comma-separated, node 1 first (implies "
              "--single-token), e.g. -9223372036854775808,-3074457345618258603,"
              "3074457345618258602.")
def up_cmd(store: str, nodes: int, replicas: int, rsync_bwlimit: int, heap: str, veth: bool,
           cpu_per_node: float, store_cpus: str, cfs_period_ms: float,
           example_exporter: bool, single_token: bool, tokens: str) -> None:
    """Fetch the jars (cached), create the namespace and start the nodes one by one.

    \b
    Example:
      elastore lab up --nodes 3 --heap 256M
      elastore lab up --nodes 3 --single-token
      elastore lab up --store swift --nodes 3 --replicas 2
    """
    if store == "swift":
        _swift_up(nodes, replicas, rsync_bwlimit)
        return
    if nodes > lab.MAX_NODES:
        raise ElastoreError(f"--nodes must be 1..{lab.MAX_NODES} for Cassandra on this "
                            "machine (2 cores)")
    cpus = [int(c) for c in _floats("--store-cpus", store_cpus)] if store_cpus else []
    token_list = _tokens("--tokens", tokens) if tokens else None
    state = lab.up(nodes, heap, veth=veth, cpu_per_node=cpu_per_node, store_cpus=cpus,
                   cfs_period_us=round(cfs_period_ms * 1000), example_exporter=example_exporter,
                   single_token=single_token, tokens=token_list)
    click.echo(f"lab up in namespace {state.netns} (state: {lab_dir() / 'lab.json'})")
    for n in state.nodes:
        s = n.spec
        where = f" in {n.netns}" if n.netns else ""
        token = f", token {n.token}" if n.token is not None else ""
        click.echo(f"  node {n.n}: CQL {s.ip}:9042, storage {s.ip}:7000, JMX 127.0.0.1:"
                   f"{s.jmx_port}{where}, metrics http://{s.metrics}/metrics, pid {n.pid}, "
                   f"data {n.root}{token}")
    click.echo(f"  Prometheus: http://{lab.PROMETHEUS_ADDR} (pid {state.prometheus_pid})")
    click.echo(f"reach them from inside the namespace: ip netns exec {state.netns} ...")


def _swift_up(nodes: int, replicas: int, rsync_bwlimit: int) -> None:
    from elastore.lab.swift import lab as swift

    st = swift.up(nodes, replicas, rsync_bwlimit_kibps=rsync_bwlimit)
    click.echo(f"Swift lab up in namespace {st.netns} (state: {lab_dir() / 'swift.json'})")
    click.echo(f"  proxy: http://{swift.PROXY_ADDR}/v1/{swift.ACCOUNT} (no auth), pid "
               f"{st.proxy_pids.get('proxy-server')}")
    for nd in st.nodes:
        click.echo(f"  node {nd.n}: {nd.ip} object :{swift.OBJECT_PORT} container "
                   f":{swift.CONTAINER_PORT} account :{swift.ACCOUNT_PORT} rsync "
                   f":{swift.RSYNC_PORT}, device {nd.device} in {nd.devices}, metrics "
                   f"http://{nd.metrics}/metrics")
    click.echo(f"  rings: {st.rings} ({replicas} replicas, 2^{swift.PART_POWER} partitions)")
    click.echo(f"  Prometheus: http://{swift.PROMETHEUS_ADDR} (pid {st.prometheus_pid})")
    click.echo(f"reach them from inside the namespace: ip netns exec {st.netns} ...")


@lab_group.command("status")
@click.option("--json", "as_json", is_flag=True)
def status_cmd(as_json: bool) -> None:
    """The ring, per-node load and the nodes' metrics endpoints.

    \b
    Example:
      elastore lab status
    """
    from elastore.lab.swift import lab as swift

    if swift.SwiftLabState.load(lab_dir()) is not None and \
            lab.LabState.load(lab_dir()) is None:
        sst = swift.status()
        if as_json:
            click.echo(json.dumps(sst, indent=2))
            return
        click.echo(f"Swift lab in {sst['netns']}, proxy {sst['proxy']}, Prometheus "
                   f"{sst['prometheus']}")
        for n in sst["nodes"]:
            down = [k for k, ok in n["alive"].items() if not ok]
            click.echo(f"node {n['n']} {n['ip']} device {n['device']} "
                       f"{n['objects_bytes'] / 2**20:.1f} MiB on disk, "
                       + (f"NOT RUNNING: {', '.join(down)}" if down else "all running"))
        click.echo(sst["ring"])
        return
    st = lab.status()
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    for n in st["nodes"]:
        click.echo(f"node {n['n']} {n['ip']} pid {n['pid']} "
                   f"{'alive' if n['alive'] else 'NOT RUNNING'} metrics {n['metrics']}")
    click.echo(f"Prometheus {st['prometheus']}")
    for t in st["targets"]:
        click.echo(f"  target {t['job']:<10} {t['instance']:<18} {t['health']}")
    click.echo("\n".join(line for line in st["ring"].splitlines() if "DEBUG" not in line))


@lab_group.command("down")
def down_cmd() -> None:
    """Stop exactly what 'up' started (by PID) and remove the namespace. Safe to repeat.

    \b
    Example:
      elastore lab down
    """
    from elastore.lab.swift import lab as swift

    done = lab.down() + swift.down()
    click.echo("\n".join(done) if done else "nothing to do: no lab was up")


def _swift_lab_up() -> bool:
    """Whether the lab that is up is Swift's (and not Cassandra's)."""
    from elastore.lab.swift import lab as swift

    return (swift.SwiftLabState.load(lab_dir()) is not None
            and lab.LabState.load(lab_dir()) is None)


def _swift_wait(timeout: float) -> None:
    from elastore.lab.swift import lab as swift

    state = swift.SwiftLabState.load(lab_dir())
    assert state is not None
    secs = swift.wait_replicated(state, timeout, say=lambda m: click.echo(m, err=True))
    click.echo(f"replication finished in {secs:.0f} s: no partition out of place")


@lab_group.command("add-node")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Swift: wait until the replicators have moved the data.")
@click.option("--timeout", type=click.FloatRange(min=1), default=1800.0, show_default=True)
@click.option("--token", default=None, metavar="TOKEN",
              help="Cassandra, single-token lab: the new node's token (its initial_token; "
              "it bootstraps the range that ends there). Required there.")
def add_node_cmd(wait: bool, timeout: float, token: str | None) -> None:
    """Cassandra: bootstrap one more node and wait until it has joined. Swift: start one
    more storage node, add its device to the rings, rebalance and distribute the rings.

    \b
    Example:
      elastore lab add-node
    """
    if _swift_lab_up():
        from elastore.lab.swift import lab as swift

        nd = swift.add_node()
        click.echo(f"Swift node {nd.n} ({nd.ip}) started and in the rings")
        if wait:
            _swift_wait(timeout)
        return
    n = lab.add_node(token=_tokens("--token", token)[0] if token is not None else None)
    click.echo(f"node {n.n} ({n.spec.ip}) joined, pid {n.pid}"
               + (f", token {n.token}" if n.token is not None else ""))


def _tokens(name: str, spec: str) -> list[int]:
    try:
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"want comma-separated integer tokens, got {spec!r}",
                                 param_hint=name) from None


@lab_group.command("ring")
def ring_cmd() -> None:
    """Each node's token(s), as `nodetool ring` on node 1 says.

    \b
    Example:
      elastore lab ring
    """
    from elastore.actuators.nodetool import ring_tokens

    state = lab.LabState.load(lab_dir())
    if state is None or not state.nodes:
        raise ElastoreError("no lab is up: run 'elastore lab up' first")
    for ip, toks in sorted(ring_tokens(lab.run_nodetool(state.nodes[0].n, "ring")).items(),
                           key=lambda kv: kv[1][0]):
        n = next((x.n for x in state.nodes if x.spec.ip == ip), "?")
        click.echo(f"node {n} {ip}: {len(toks)} token(s) "
                   + (str(toks[0]) if len(toks) == 1 else f"{toks[0]} .. {toks[-1]}"))


@lab_group.command("move", context_settings={"ignore_unknown_options": True})
@click.argument("node")
@click.argument("token")
@click.option("--poll", type=click.FloatRange(min=0.5), default=2.0, show_default=True,
              help="Seconds between progress lines (the node's streams, from netstats).")
def move_cmd(node: str, token: str, poll: float) -> None:
    """Move single-token NODE (number or IP) to TOKEN (nodetool move) and wait until it is
    done, printing its streams as they go. A negative TOKEN may be given as is. Cassandra
    refuses nodes with vnodes, a token that is a node's already, and a node that data is
    streaming to (docs/lab.md). Run `nodetool cleanup` on the nodes that gave ranges up
    to drop the data they no longer replicate.

    \b
    Example:
      elastore lab up --nodes 3 --single-token
      elastore lab move 1 -4611686018427387904
    """
    target = _tokens("TOKEN", token)
    if len(target) != 1:
        raise click.BadParameter(f"want one token, got {token!r}", param_hint="TOKEN")

    def progress(elapsed: float, p: object) -> None:
        from elastore.actuators.nodetool import StreamProgress

        assert isinstance(p, StreamProgress)
        click.echo(f"{elapsed:6.1f} s  {p.mode or '?':<8} received "
                   f"{p.received_bytes / 2**20:.2f}/{p.receive_bytes / 2**20:.2f} MiB, sent "
                   f"{p.sent_bytes / 2**20:.2f}/{p.send_bytes / 2**20:.2f} MiB", err=True)

    secs = lab.move(node, target[0], on_progress=progress, poll_s=poll)
    click.echo(f"node {node} moved to token {target[0]} in {secs:.1f} s")


@lab_group.command("drain")
@click.argument("node")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until the replicators have moved its data away.")
@click.option("--timeout", type=click.FloatRange(min=1), default=1800.0, show_default=True)
def drain_cmd(node: str, wait: bool, timeout: float) -> None:
    """Swift: set NODE's device weight to 0 in every ring and rebalance; its partitions
    move to the other nodes (then `lab remove-node NODE`).

    \b
    Example:
      elastore lab drain 4 && elastore lab remove-node 4
    """
    from elastore.lab.swift import lab as swift

    if not _swift_lab_up():
        raise ElastoreError("drain is Swift's: for Cassandra use 'elastore lab decommission'")
    swift.drain_node(node)
    click.echo(f"Swift node {node} drained in the rings (weight 0)")
    if wait:
        _swift_wait(timeout)


@lab_group.command("remove-node")
@click.argument("node")
def remove_node_cmd(node: str) -> None:
    """Swift: take a drained NODE out of the rings and stop it. Refused while it is not
    drained or any partition is still out of place.

    \b
    Example:
      elastore lab remove-node 4
    """
    from elastore.lab.swift import lab as swift

    if not _swift_lab_up():
        raise ElastoreError("remove-node is Swift's: for Cassandra use 'elastore lab "
                            "decommission'")
    swift.remove_node(node)
    click.echo(f"Swift node {node} removed from the rings and stopped")


@lab_group.command("decommission")
@click.argument("node")
def decommission_cmd(node: str) -> None:
    """Decommission NODE (number or IP) safely: refuse below RF, fix the system keyspaces'
    RF, wait until it has LEFT, then stop its JVM.

    \b
    Example:
      elastore lab decommission 3
    """
    secs = lab.decommission(node)
    click.echo(f"node {node} decommissioned in {secs:.0f} s")


@lab_group.command("set-stream-throughput")
@click.argument("node")
@click.argument("mib_s", type=float)
def stream_cmd(node: str, mib_s: float) -> None:
    """Throttle NODE's outgoing streaming to MIB_S MiB/s (nodetool setstreamthroughput).

    nodetool takes whole MiB/s or whole Mbit/s; the closer of the two is used and the rate
    actually set is printed.

    \b
    Example:
      elastore lab set-stream-throughput 3 2
      elastore lab set-stream-throughput 3 0.6     # 5 Mbit/s = 0.596 MiB/s
    """
    applied = lab.set_stream_throughput(node, mib_s)
    log.info("node %s: stream throughput %g MiB/s (asked %g)", node, applied, mib_s)
    click.echo(f"node {node}: stream throughput {applied:.4g} MiB/s"
               + (f" (asked {mib_s:g}; nodetool takes whole MiB/s or Mbit/s)"
                  if abs(applied - mib_s) > 1e-9 else ""))


@lab_group.command("bwman")
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=None,
              help="'lab' (default: the shipped lab profile), 'placeholder', or a file from "
                   "`elastore models fit`.")
@click.option("--total-mbit", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Each node's link, Mbit/s (what it sends): tc gives every node a link "
                   "of this rate and BwMan splits it between clients and migration.")
@click.option("--headroom", type=click.FloatRange(0, 2), default=0.2, show_default=True,
              help="Provision clients for their observed load plus this fraction.")
@click.option("--policy", type=click.Choice(["PreferClients", "PreferMigration"]),
              default="PreferClients", show_default=True)
@click.option("--wanted-mibps", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Fixed migration rate wanted (default: f() of each node's client load).")
@click.option("--period", type=click.FloatRange(min=1), default=5.0, show_default=True)
@click.option("--duration", type=click.FloatRange(min=1), default=60.0, show_default=True)
def bwman_cmd(model_path: Path | None, total_mbit: float, headroom: float, policy: str,
              wanted_mibps: float | None, period: float, duration: float) -> None:
    """Run BwMan on the lab: every PERIOD s, read each node's client load and streaming from
    Prometheus, split its link with the models (client model: bandwidth for the load;
    migration model: speed of the rest), set tc and setstreamthroughput, and log the
    decision with its reason. The HTB is removed on exit.

    \b
    Example:
      sudo elastore lab bwman --total-mbit 8 --policy PreferClients --duration 300
    """
    import time

    from elastore.errors import MetricsError
    from elastore.lab.bwman import ActuationError
    from elastore.models.bandwidth import Policy
    from elastore.models.bundle import ModelSet
    from elastore.planner.bwman import BwManConfig
    from elastore.sim.cli import model_choice

    models = ModelSet.load(model_choice(model_path)[0])
    cfg = BwManConfig(total_mbit=total_mbit, policy=Policy(policy), wanted_mibps=wanted_mibps,
                      load_headroom=headroom)
    loop, shaper = lab.bwman_loop(models, cfg)
    end = time.monotonic() + duration
    try:
        while time.monotonic() < end:
            try:
                for d in loop.step():
                    click.echo(d.reason)
            except ActuationError as exc:  # the other nodes were served
                for d in exc.decisions:
                    click.echo(d.reason)
                log.error("%s", exc)
            except MetricsError as exc:  # nothing actuated this period
                log.error("%s", exc)
            time.sleep(period)
    finally:
        shaper.remove()


def _interrupt_on_term() -> None:
    """SIGTERM (and SIGINT, which a shell's background job ignores) end a long sweep as
    Ctrl-C does, so its co-runners, shaping and files are cleaned up."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def _floats(name: str, spec: str) -> list[float]:
    try:
        return [float(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"want comma-separated numbers, got {spec!r}",
                                 param_hint=name) from None


@lab_group.command("profile")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("profile-samples.csv"), show_default=True,
              help="Samples CSV for `elastore models fit` (rows appended as points finish).")
@click.option("--loads", default="50,150,250,350,450,550", show_default=True,
              help="Cluster load levels, requests/s.")
@click.option("--read-ratios", default="0.8,0.95", show_default=True)
@click.option("--migrations", default="0,2,8", show_default=True,
              help="Stream throttle per sending node, MiB/s (0: no migration).")
@click.option("--interference", default="0,0.5", show_default=True,
              help="Noisy-neighbour levels: fraction of the machine's cores kept busy.")
@click.option("--point-seconds", type=click.FloatRange(min=1), default=20.0,
              show_default=True)
@click.option("--window-seconds", type=click.FloatRange(min=1), default=5.0,
              show_default=True, help="Latency window (one sample row each).")
@click.option("--bulk-rows", type=click.IntRange(min=0), default=20000, show_default=True,
              help="10 KiB rows (RF 2) written once for the migrations to stream.")
@click.option("--resume", is_flag=True, help="Continue an interrupted sweep in --out.")
@click.option("--routing", type=click.Choice(["token-aware", "round-robin"]),
              default="token-aware", show_default=True,
              help="The load generator's request routing (see `elastore load run`).")
@click.option("--warmup-seconds", type=click.FloatRange(min=0), default=0.0,
              show_default=True,
              help="Serve the first point's load this long, unrecorded, before the sweep "
                   "(a store just started reads its JIT and caches warming as a latency "
                   "curve; docs/lab.md). The committed profile was measured without.")
@click.option("--stop-above-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Skip a setting's higher loads once two loads in a row had a median "
                   "window p95 above this (the border is behind them; a real store is not "
                   "pushed deeper into overload). Default: every load.")
@click.option("--keys-from", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A workload file (`elastore trace build`): request its keys with their "
                   "popularity, so the sweep measures the border of the request mix a "
                   "replay of it meets. Default: 4000 keys, Zipf-like with the traces' "
                   "slope.")
def profile_cmd(out: Path, loads: str, read_ratios: str, migrations: str, interference: str,
                point_seconds: float, window_seconds: float, bulk_rows: int,
                resume: bool, routing: str, warmup_seconds: float,
                stop_above_ms: float | None, keys_from: Path | None) -> None:
    """Sweep load x read ratio x migration rate x interference on the running lab and
    record per-window p95/p99 latency and throughput per server: the samples CSV that
    `elastore models fit` consumes. Migration is real streaming (nodetool rebuild under
    setstreamthroughput), its rate measured from the nodes' exporters.

    \b
    Example:
      elastore lab up --nodes 3
      elastore lab profile --out experiments/profiles/lab-samples.csv
      elastore models fit --samples experiments/profiles/lab-samples.csv --slo-ms 50 \\
          -o experiments/profiles/lab-model.json
    """

    from elastore.lab.cassandra.profile import plan, run_profile
    from elastore.lab.sweep import key_table

    if _swift_lab_up():
        from elastore.lab.swift import lab as swift
        from elastore.lab.swift.profile import run_swift_profile

        if set(_floats("--migrations", migrations)) - {0.0} or \
                set(_floats("--interference", interference)) - {0.0}:
            raise ElastoreError("the Swift lab's profile sweeps load and read ratio only: "
                                "give --migrations 0 --interference 0")
        sst = swift.SwiftLabState.load(lab_dir())
        assert sst is not None
        netns.run_inside(sst.netns)
        path = run_swift_profile(_floats("--loads", loads), _floats("--read-ratios",
                                                                    read_ratios), out,
                                 point_s=point_seconds, window_s=window_seconds,
                                 warmup_s=warmup_seconds, stop_above_ms=stop_above_ms,
                                 echo=lambda m: click.echo(m, err=True))
        click.echo(f"samples: {path}")
        return
    keys = key_table(keys_from) if keys_from is not None else None
    state = lab.LabState.load(lab_dir())
    if state is None or not state.nodes:
        raise ElastoreError("no lab is up: run 'elastore lab up' first")
    points = plan(_floats("--loads", loads), _floats("--read-ratios", read_ratios),
                  _floats("--migrations", migrations), _floats("--interference", interference))
    netns.run_inside(state.netns)  # the driver reaches the nodes from inside
    path = run_profile(points, out, point_s=point_seconds, window_s=window_seconds,
                       bulk_rows=bulk_rows, resume=resume, echo=lambda m: click.echo(m, err=True),
                       routing=routing, warmup_s=warmup_seconds, stop_above_ms=stop_above_ms,
                       keys=keys)
    click.echo(f"samples: {path}")


@lab_group.command("profile-interference")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("lab-interference.csv"), show_default=True,
              help="Samples CSV (the capacity samples' columns, `interference` measured); "
                   "the summary goes beside it (.json).")
@click.option("--loads", default="300,600", show_default=True,
              help="Cluster load levels, requests/s.")
@click.option("--kinds", default="cpu,stream,cache,matrix,disk", show_default=True,
              help="Co-runner kinds (stress-ng stressors); empty: only the store alone at "
                   "each load (a load sweep with the index measured).")
@click.option("--levels", default="1,2,3,4", show_default=True,
              help="Co-runner levels: stress-ng workers, pinned to the store's CPUs.")
@click.option("--point-seconds", type=click.FloatRange(min=1), default=30.0,
              show_default=True)
@click.option("--resume", is_flag=True, help="Continue an interrupted sweep in --out.")
@click.option("--warmup-seconds", type=click.FloatRange(min=0), default=90.0,
              show_default=True, help="Serve the first load this long, unrecorded, before "
              "the first point: a fresh JVM is slower and stalls more than a warm one.")
def profile_interference_cmd(out: Path, loads: str, kinds: str, levels: str,
                             point_seconds: float, resume: bool, warmup_seconds: float) -> None:
    """Run the store alone and beside real co-runners (stress-ng: a CPU hog, memory
    bandwidth, cache and matrix thrashers, a disk writer) at rising levels, and record the
    *measured* interference index (the node agent's probe on each node's cgroup) with the
    latency: how well the index ranks the slowdown at equal load.

    \b
    Example:
      elastore lab up --nodes 3 --cpu-per-node 0.3 --store-cpus 1
      elastore lab profile-interference --out experiments/profiles/lab-interference.csv
    """
    from elastore.lab.cassandra.interference import plan as iplan
    from elastore.lab.cassandra.interference import run_interference_profile

    _interrupt_on_term()
    kind_list = [k.strip() for k in kinds.split(",") if k.strip()]
    level_list = [int(v) for v in _floats("--levels", levels)]
    points = iplan(_floats("--loads", loads), kind_list, level_list)
    summary = run_interference_profile(points, out, point_s=point_seconds, resume=resume,
                                       warmup_s=warmup_seconds,
                                       echo=lambda m: click.echo(m, err=True))
    click.echo(f"index_slowdown_spearman: {summary['index_slowdown_spearman']:.3f} "
               f"(with baselines {summary['index_slowdown_spearman_with_baselines']:.3f}; "
               f"on the median latency {summary['index_slowdown_spearman_p50']:.3f})")
    for kind, d in summary["kinds"].items():
        click.echo(f"  {kind}: levels {d['levels']} index {d['index']} slowdown {d['slowdown']}")
    click.echo(f"samples: {out}; summary: {out.with_suffix('.json')}")


@lab_group.command("profile-bandwidth")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("lab-bandwidth.csv"), show_default=True,
              help="The two curves for `elastore models fit --bandwidth`; the raw points go "
                   "beside it (*-points.csv).")
@click.option("--client-mbit", default="2,4,6,8", show_default=True,
              help="Client bandwidths per server to shape, Mbit/s.")
@click.option("--load-fractions", default="0.4,0.55,0.7,0.8,0.9,1.0", show_default=True,
              help="Loads at each client bandwidth, as fractions of its nominal rate "
                   "(bandwidth / one 10 KiB response).")
@click.option("--migration-mbit", default="2,4,8,16", show_default=True,
              help="Storage bandwidths per server to shape, Mbit/s (one rebuild each).")
@click.option("--migration-rows", type=click.IntRange(min=100), default=9000,
              show_default=True, help="10 KiB rows (RF 2) of the keyspace the rebuilds stream.")
@click.option("--slo-ms", type=click.FloatRange(min=0, min_open=True), default=100.0,
              show_default=True)
@click.option("--percentile", type=click.Choice([str(p) for p in PERCENTILES]),
              default=str(PERCENTILES[0]), show_default=True)
@click.option("--read-ratio", type=click.FloatRange(0, 1), default=0.95, show_default=True)
@click.option("--point-seconds", type=click.FloatRange(min=1), default=20.0,
              show_default=True)
@click.option("--resume", is_flag=True, help="Continue an interrupted sweep.")
@click.option("--bulk-objects", type=click.IntRange(min=1), default=200, show_default=True,
              help="Swift: objects the ring changes move.")
@click.option("--bulk-kib", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Swift: each bulk object's size, KiB.")
def profile_bandwidth_cmd(out: Path, client_mbit: str, load_fractions: str,
                          migration_mbit: str, migration_rows: int, slo_ms: float,
                          percentile: str, read_ratio: float, point_seconds: float,
                          resume: bool, bulk_objects: int, bulk_kib: int) -> None:
    """Measure BwMan's two regressions on the running lab (reference text 5.2.1): the load
    a server serves within the SLO per client bandwidth (its port-9042 egress shaped with
    tc), and the migration speed per storage bandwidth (its port-7000 egress shaped, real
    nodetool rebuilds). On the Swift lab: the object servers' port 6200 and the
    replicators' rsync (port 873), and real ring changes (a node added, then drained) that
    move --bulk-objects objects.

    \b
    Example:
      elastore lab up --nodes 3
      elastore lab profile-bandwidth --out experiments/profiles/lab-bandwidth.csv
      elastore models fit --samples experiments/profiles/lab-samples.csv \\
          --bandwidth experiments/profiles/lab-bandwidth.csv --slo-ms 100 -o model.json
    """

    from elastore.lab.bwprofile import plan_bandwidth
    from elastore.lab.cassandra.bwprofile import run_bandwidth_profile

    if _swift_lab_up():
        from elastore.lab.swift import lab as swift
        from elastore.lab.swift.profile import run_swift_bandwidth_profile

        sst = swift.SwiftLabState.load(lab_dir())
        assert sst is not None
        points = plan_bandwidth(_floats("--client-mbit", client_mbit),
                                _floats("--load-fractions", load_fractions),
                                _floats("--migration-mbit", migration_mbit), len(sst.nodes))
        netns.run_inside(sst.netns)
        path = run_swift_bandwidth_profile(
            points, out, point_s=point_seconds, slo_ms=slo_ms, percentile=int(percentile),
            read_ratio=read_ratio, bulk_objects=bulk_objects, bulk_kib=bulk_kib,
            resume=resume, echo=lambda m: click.echo(m, err=True))
        click.echo(f"bandwidth curves: {path} (raw points: "
                   f"{path.with_name(path.stem)}-points.csv)")
        return
    state = lab.LabState.load(lab_dir())
    if state is None or not state.nodes:
        raise ElastoreError("no lab is up: run 'elastore lab up' first")
    points = plan_bandwidth(_floats("--client-mbit", client_mbit),
                            _floats("--load-fractions", load_fractions),
                            _floats("--migration-mbit", migration_mbit), len(state.nodes))
    netns.run_inside(state.netns)  # the driver reaches the nodes from inside
    path = run_bandwidth_profile(points, out, point_s=point_seconds, slo_ms=slo_ms,
                                 percentile=int(percentile), read_ratio=read_ratio,
                                 migration_rows=migration_rows, resume=resume,
                                 echo=lambda m: click.echo(m, err=True))
    click.echo(f"bandwidth curves: {path} (raw points: {path.with_name(path.stem)}-points.csv)")
