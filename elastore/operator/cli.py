"""``elastore operator ...``: run the ElasticPolicy operator, render its CRD."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from elastore.cliutil import WHEN, ElastoreGroup, emit_json, need_extra
from elastore.errors import ElastoreError


@click.group("operator", cls=ElastoreGroup, extra="operator")
def operator_group() -> None:
    """The Kubernetes operator for ElasticPolicy (kopf).

    \b
    Example:
      elastore operator crd | kubectl apply -f -    # the CRDs, once
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
@click.option("--pod-path", "pod_paths", multiple=True, metavar="DIR",
              help="A directory under which a policy's paths in the store's pods may lie "
                   "(Swift's spec.target.swift.ringDir and devicesDir; repeatable). "
                   "Default: /etc/swift and /srv/node.")
@click.option("--prometheus-url", "prometheus_urls", multiple=True, metavar="PATTERN",
              help="A Prometheus endpoint policies may query (repeatable): a URL whose host "
                   "may hold '*', whose port may be '*', whose path is a prefix, e.g. "
                   "'http://*.svc:9090'. A policy naming another is PrometheusNotAllowed "
                   "and nothing is fetched. Default: any (the chart sets in-cluster "
                   "services).")
@click.option("--concurrent-ticks", type=click.IntRange(1, 256), default=8,
              show_default=True,
              help="Policies' ticks that run at once; the others wait their turn. More "
                   "overlaps more waiting on Prometheus and the API server; past the CPU "
                   "the process has, threads only take the interpreter from each other.")
def run_cmd(kubeconfig: Path | None, namespaces: tuple[str, ...], metrics_port: int,
            metrics_addr: str, liveness: str | None, standalone: bool, priority: int | None,
            peering: str, peering_lifetime: int, nodetools: tuple[str, ...],
            exec_prefixes: tuple[str, ...], pod_paths: tuple[str, ...],
            prometheus_urls: tuple[str, ...], concurrent_ticks: int) -> None:
    """Run the operator until SIGTERM/SIGINT: a control loop per ElasticPolicy, leader
    election among replicas, Events for every decision and action, metrics on /metrics.

    \b
    Example:
      elastore operator run --kubeconfig ~/.kube/config --standalone
      elastore operator run -n storage --metrics-port 9808    # in a pod: its ServiceAccount
    """
    import shlex

    # all of the extra, now: prometheus-api-client is first imported at a policy's first tick
    need_extra("operator")
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
    from elastore.operator.endpoints import valid_pattern

    if any(not p.startswith("/") or p.rstrip("/") == "" for p in pod_paths):
        raise ElastoreError("--pod-path needs an absolute directory other than /")
    bad = [p for p in prometheus_urls if not valid_pattern(p)]
    if bad:
        raise ElastoreError(f"--prometheus-url {bad[0]!r} is not an http(s) URL pattern "
                            "(e.g. 'http://*.svc:9090')")
    options = OperatorOptions(metrics_port=metrics_port, metrics_addr=metrics_addr,
                              peering=peering, standalone=standalone, priority=priority,
                              peering_lifetime_s=peering_lifetime, nodetools=allowed,
                              concurrent_ticks=concurrent_ticks,
                              exec_prefixes=prefixes,
                              prometheus_urls=tuple(prometheus_urls) or None,
                              **({"pod_paths": tuple(p.rstrip("/") for p in pod_paths)}
                                 if pod_paths else {}))
    import elastore.operator.handlers  # noqa: F401 - registers the handlers

    kopf.configure(verbose=False)
    kopf.run(clusterwide=not namespaces, namespaces=list(namespaces),
             standalone=standalone, liveness_endpoint=liveness,
             memo=kopf.Memo(elastore=Runtime(options)))


@operator_group.command("crd")
@click.option("--policy-only", is_flag=True,
              help="Only the ElasticPolicy CRD, not kopf's peering CRDs (which another kopf "
                   "operator in the cluster may have installed already).")
def crd_cmd(policy_only: bool) -> None:
    """Print every CRD the chart installs (its crds/) as one multi-document YAML, for
    kubectl apply -f -: ElasticPolicy, then kopf's ClusterKopfPeering and KopfPeering (the
    replicas' leader election). Needs no extra.

    Replicas that elect a leader (all but --standalone) also need the ClusterKopfPeering
    object that `operator run --peering` names (default: elastore; the chart makes one per
    release): apply it once its CRD is established (docs/install.md).

    \b
    Example:
      elastore operator crd | kubectl apply -f -
      elastore operator crd --policy-only > elasticpolicies.yaml
    """
    from elastore.resources import crd_path, crd_paths

    texts = [p.read_text() for p in ([crd_path()] if policy_only else crd_paths())]
    click.echo("---\n".join(t if t.endswith("\n") else f"{t}\n" for t in texts), nl=False)


@operator_group.command("backtest")
@click.option("-f", "--policy", "policy_file", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="An ElasticPolicy (YAML or JSON, as for kubectl apply; or its spec alone).")
@click.option("--from", "start", required=True, type=WHEN,
              help="Start, UTC: YYYY-MM-DD or 'YYYY-MM-DD HH:MM[:SS]'.")
@click.option("--to", "end", required=True, type=WHEN, help="End, UTC (inclusive).")
@click.option("-n", "--namespace", default=None,
              help="The policy's namespace (default: its metadata.namespace, else 'default'); "
                   "the default queries are scoped to it.")
@click.option("--prometheus", "url", default=None, metavar="URL",
              help="Read this Prometheus instead of spec.metrics.prometheus.url.")
@click.option("--replicas", type=click.IntRange(1, 1000), default=None,
              help="Replay this fixed size (default: the nodes reporting at each period).")
@click.option("--model", "model_path", type=click.Path(dir_okay=False, exists=True,
                                                        path_type=Path), default=None,
              help="A capacity model (elastore models fit); default: the built-in lab "
                   "profile (a configMapRef is not read from a file).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows and a summary as JSON.")
def backtest_cmd(policy_file: Path, start: Any, end: Any, namespace: str | None,
                 url: str | None, replicas: int | None, model_path: Path | None,
                 as_json: bool) -> None:
    """Replay a Prometheus range through the policy's loop: what Enforce would have done
    each control period (wouldScale: +1 a node out, -1 in), and whether the size there was
    would have missed the SLO at the forecast load (sloAtRisk).

    \b
    Example:
      elastore operator backtest -f policy.yaml --from '2026-11-20 00:00' \\
          --to '2026-11-21 00:00' --prometheus http://127.0.0.1:9090
    """
    import sys
    from dataclasses import replace

    import yaml

    from elastore.models.bundle import ModelSet
    from elastore.operator import backtest
    from elastore.operator.metrics import PrometheusSource
    from elastore.operator.spec import parse
    from elastore.resources import builtin_model

    try:
        doc = yaml.safe_load(policy_file.read_text())
    except yaml.YAMLError as exc:
        raise ElastoreError(f"not YAML or JSON: {exc}", str(policy_file)) from None
    spec_doc, doc_ns = backtest.policy_spec(doc, str(policy_file))
    ns = namespace or doc_ns or "default"
    if url is not None:
        metrics = dict(spec_doc.get("metrics") or {})
        metrics["prometheus"] = {**(metrics.get("prometheus") or {}), "url": url}
        spec_doc = {**spec_doc, "metrics": metrics}
    # strict, as the API server's field validation: a misspelt field is refused, not
    # silently left at its default
    spec = parse(spec_doc, strict=True)
    if spec.prometheus is None:
        raise ElastoreError("the policy has no spec.metrics.prometheus (or give --prometheus)")
    if spec.prometheus.auth.any:
        raise ElastoreError("the policy's Prometheus needs credentials from Secrets, which "
                            "a backtest from a file cannot read: point --prometheus at a "
                            "URL it can read without them (e.g. through kubectl "
                            "port-forward)")
    path = model_path or builtin_model("lab")
    models = ModelSet.load(path).for_slo(spec.slo_latency_ms, spec.slo_percentile)
    t0, t1 = float(start.timestamp()), float(end.timestamp())
    source = PrometheusSource(spec.prometheus, ns, spec.target.name)
    base = "the built-in lab profile" if model_path is None else str(path)
    notes = [f"policy {policy_file} (namespace {ns}, target {spec.target.name}), "
             f"Prometheus {spec.prometheus.url}, every {spec.control_period_s:g} s",
             (f"capacity model {base} x{spec.prior_scale:g} as the prior, learned online "
              "from each period's per-node metrics as the operator does, from the prior at "
              "--from (a learned model kept in the cluster is not read)") if spec.learn else
             f"capacity model {base} as it is (spec.capacityModel.learn is false)",
             "interference-blind; the size at each period: the nodes serving requests"
             if replicas is None else f"interference-blind; a fixed size of {replicas}"]
    if spec.skew.mode != "Off":
        notes.append("the load skew from each pod's load (its imbalance at every size); no "
                     "hot-partition sample, so not a single-token ring's model")

    def progress(k: int, n: int, row: backtest.Row) -> None:
        if not as_json and (k == n or k % 50 == 0):
            click.echo(f"  {k}/{n} periods", err=True)

    try:
        rows = backtest.replay(replace(spec, mode="Recommend"), source, models, t0, t1,
                               replicas, progress)
    except ValueError as exc:
        raise ElastoreError(str(exc)) from None
    s = backtest.summary(rows)
    if as_json:
        emit_json({"notes": notes, "summary": s, "rows": [r.as_dict() for r in rows]})
    else:
        for n in notes:
            click.echo(f"# {n}")
        click.echo(backtest.table(rows))
        click.echo(f"# {s['periods']} periods: {s['decided']} decided, {s['failed']} without "
                   f"a decision; would scale out {s['scaleOuts']}x, in {s['scaleIns']}x"
                   + (f" ({s['scaleInsHeld']} held: the learned model not yet confident)"
                      if s["scaleInsHeld"] else "")
                   + f"; SLO at risk in {s['sloAtRisk']}")
    sys.stdout.flush()
    why = backtest.nothing_decided(rows)
    if why is not None:  # the rows are printed; the exit says the replay judged nothing
        raise ElastoreError(why)
