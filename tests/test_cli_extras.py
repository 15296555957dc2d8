"""A command that needs an optional extra (pyproject.toml) whose module is missing says so in
one line: the command, the extra, how to install it, the module; no traceback, exit 1. The
commands that need no extra run without any (``operator crd`` prints every CRD the chart
installs).

A module is made missing by ``sys.modules[name] = None`` (``import name`` then raises
ModuleNotFoundError), its cached submodules dropped, for the test's duration.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner, Result

from elastore.agent.cli import LOG_LEVELS
from elastore.cli import cli, register
from elastore.cliutil import EXTRA_MODULES, ElastoreGroup
from elastore.resources import builtin_model, crd_path, crd_paths

register()

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "elastore"


def block(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        for key in [k for k in sys.modules if k.startswith(f"{name}.")]:
            monkeypatch.delitem(sys.modules, key)
        monkeypatch.setitem(sys.modules, name, None)


def modules_of(extra: str) -> list[str]:
    return [m for m, extras in EXTRA_MODULES.items() if extra in extras]


def line(command: str, extra: str, module: str) -> str:
    return (f"error: {command} needs the {extra!r} extra: pip install 'elastore[{extra}]' "
            f"(missing module: {module})")


def one_line(res: Result) -> str:
    """The one line a failed command printed, checked to be a clean exit 1."""
    assert res.exit_code == 1, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit), res.exception  # not an uncaught error
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", modules_of("operator"))
def test_operator_run_names_the_extra_before_it_starts(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path, module: str) -> None:
    """Every module of the extra is checked up front: prometheus-api-client would otherwise
    be missed until a policy's first tick. (Past the check, the missing kubeconfig stops
    the command.)"""
    block(monkeypatch, module)
    res = CliRunner().invoke(cli, ["operator", "run", "--standalone",
                                   "--kubeconfig", str(tmp_path / "none")])
    assert one_line(res) == line("elastore operator run", "operator", module)


@pytest.mark.parametrize("module", modules_of("agent"))
def test_agent_run_names_the_agent_extra(monkeypatch: pytest.MonkeyPatch,
                                         module: str) -> None:
    """kubernetes is the operator's extra too: the agent's group names its own. (Past the
    check, the empty node stops the command.)"""
    block(monkeypatch, module)
    res = CliRunner().invoke(cli, ["agent", "run", "--node", " "])
    assert one_line(res) == line("elastore agent run", "agent", module)


def test_a_module_missing_at_its_first_import_is_named_too(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No up-front check: the import where the command first needs the module fails, and
    the group turns that into the line (agent cleanup's pyroute2; backtest's PyYAML, and
    prometheus-api-client deep in the metrics source)."""
    block(monkeypatch, "pyroute2")
    res = CliRunner().invoke(cli, ["agent", "cleanup"])
    assert one_line(res) == line("elastore agent cleanup", "agent", "pyroute2")
    monkeypatch.undo()
    pol = tmp_path / "p.json"
    pol.write_text(json.dumps({"target": {"name": "db", "replicationFactor": 3},
                               "replicas": {"min": 3, "max": 6}, "slo": {"latencyMs": 50},
                               "metrics": {"prometheus": {"url": "http://127.0.0.1:9"}}}))
    args = ["operator", "backtest", "-f", str(pol), "--from", "2026-11-20 10:00",
            "--to", "2026-11-20 10:30"]
    for module in ("prometheus_api_client", "yaml"):
        block(monkeypatch, module)
        res = CliRunner().invoke(cli, args)
        assert one_line(res) == line("elastore operator backtest", "operator", module)
        monkeypatch.undo()


def test_a_group_without_an_extra_names_the_modules_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``models show --configmap`` reads with the kubernetes client, which two extras
    install; the models group needs neither otherwise: the first, the operator's."""
    block(monkeypatch, "kubernetes")
    res = CliRunner().invoke(cli, ["models", "show", "--configmap", "shop/m"])
    assert one_line(res) == line("elastore models show", "operator", "kubernetes")


def test_mstl_names_the_forecast_extra_before_any_method_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import elastore.predictor.cli as pcli

    ran: list[object] = []
    monkeypatch.setattr(pcli, "evaluate", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(pcli, "read_series", lambda *a, **k: ran.append(a))
    block(monkeypatch, "statsforecast")
    for methods in ("prorenata,mstl", "mstl-log"):
        res = CliRunner().invoke(cli, ["predict", "evaluate", "--horizon", "1",
                                       "--methods", methods])
        assert one_line(res) == line("elastore predict evaluate", "forecast", "statsforecast")
    assert ran == []  # neither the trace read nor a method evaluated


def test_the_groups_extra_decides_and_other_missing_modules_stay_errors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pyroute2 is the agent's and the lab's: a group of the lab's names the lab's. A
    module no extra installs is a broken installation: its ModuleNotFoundError is not
    dressed up as an extra to install."""

    @click.group("lab", cls=ElastoreGroup, extra="lab")
    def lab() -> None:
        """A lab."""

    @lab.command("shape")
    @click.argument("module")
    def shape(module: str) -> None:
        __import__(module)

    @click.group(cls=ElastoreGroup)
    def root() -> None:
        """elastore."""

    root.add_command(lab)
    block(monkeypatch, "pyroute2", "elastore_no_such_module")
    res = CliRunner().invoke(root, ["lab", "shape", "pyroute2.netlink"])
    assert one_line(res) == line("elastore lab shape", "lab", "pyroute2.netlink")
    res = CliRunner().invoke(root, ["lab", "shape", "elastore_no_such_module"])
    assert res.exit_code == 1 and isinstance(res.exception, ModuleNotFoundError)
    assert res.exception.name == "elastore_no_such_module"


def test_the_extra_modules_are_pyprojects() -> None:
    """Every distribution an extra installs maps to its top-level module with exactly the
    extras that list it; the other entries are requirements of an extra's distributions."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]

    def norm(dist: str) -> str:  # PEP 503
        return re.sub(r"[-_.]+", "-", dist).lower()

    def name(req: str) -> str:
        m = re.match(r"[A-Za-z0-9._-]+", req)
        assert m is not None, req
        return norm(m.group(0))

    module_of = {norm(d): m for m, dists in metadata.packages_distributions().items()
                 for d in dists}

    want: dict[str, set[str]] = {}
    for extra, reqs in extras.items():
        if extra == "dev":
            continue
        for req in reqs:
            dist = name(req)
            want.setdefault(module_of.get(dist, dist.replace("-", "_")), set()).add(extra)
    got = {m: set(e) for m, e in EXTRA_MODULES.items()}
    assert {m: got.get(m) for m in want} == want
    for module in set(got) - set(want):  # requests, urllib3: kubernetes' requirements
        for extra in got[module]:
            needed = {name(r) for d in extras[extra] for r in metadata.requires(name(d)) or []
                      if "extra ==" not in r}
            assert module in needed, (module, extra)


# ------------------------------------------------------------------------------------------
def test_what_needs_no_extra_runs_without_any(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's help, the CRDs and a model's summary, with every extra's module
    missing."""
    block(monkeypatch, *EXTRA_MODULES)

    def paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        out = [prefix]
        for n, cmd in group.commands.items():
            out += paths(cmd, (*prefix, n)) if isinstance(cmd, click.Group) \
                else [(*prefix, n)]
        return out

    for path in paths(cli):
        res = CliRunner().invoke(cli, [*path, "--help"])
        assert res.exit_code == 0 and "Usage:" in res.output, (path, res.output)
    res = CliRunner().invoke(cli, ["operator", "crd"])
    assert res.exit_code == 0, res.output
    assert "kind: CustomResourceDefinition" in res.output
    res = CliRunner().invoke(cli, ["models", "show", str(builtin_model("lab"))])
    assert res.exit_code == 0 and "capacity" in res.output, res.output


def test_operator_crd_prints_every_crd_the_chart_installs() -> None:
    """The chart's crds/ by name (tests/test_crd.py keeps the package's files the chart's),
    the package's files' objects, the ElasticPolicy's first; --policy-only: its file."""
    res = CliRunner().invoke(cli, ["operator", "crd"])
    assert res.exit_code == 0, res.output
    printed = [d for d in yaml.safe_load_all(res.output) if d]
    names = [d["metadata"]["name"] for d in printed]
    assert names[0] == "elasticpolicies.elastore.io"
    assert sorted(names) == sorted(
        d["metadata"]["name"] for f in (CHART / "crds").glob("*.yaml")
        for d in yaml.safe_load_all(f.read_text()) if d) == [
        "clusterkopfpeerings.kopf.dev", "elasticpolicies.elastore.io", "kopfpeerings.kopf.dev"]
    assert printed == [d for f in crd_paths() for d in yaml.safe_load_all(f.read_text()) if d]
    assert all(d["kind"] == "CustomResourceDefinition" for d in printed)
    res = CliRunner().invoke(cli, ["operator", "crd", "--policy-only"])
    assert res.exit_code == 0
    assert res.output == crd_path().read_text()


def test_the_package_carries_every_crd_file_of_the_chart() -> None:
    """The files the command prints are the chart's crds/ (the ElasticPolicy's is written to
    both by python -m elastore.operator.crd and checked in tests/test_crd.py; kopf's peering
    CRDs are copied as they are)."""
    assert sorted(p.name for p in crd_paths()) == sorted(
        p.name for p in (CHART / "crds").glob("*.yaml"))
    for p in crd_paths()[1:]:
        assert p.read_text() == (CHART / "crds" / p.name).read_text(), p.name


# ------------------------------------------------------------------------------------------
def test_every_agent_log_level_the_chart_documents_is_the_clis() -> None:
    """values.yaml's agent.logLevel lists what the DaemonSet may pass: the CLI takes each,
    and the elastore logger is set to it (an unknown level would crash-loop the pods)."""
    values = (CHART / "values.yaml").read_text()
    m = re.search(r"^agent:\n(?:  .*\n|\n)*?  logLevel: (\w+) +# (.+)$", values, re.M)
    assert m is not None
    documented = re.split(r",\s*|\s+or\s+", m.group(2).strip())
    assert documented == list(LOG_LEVELS) and m.group(1) in documented
    logger = logging.getLogger("elastore")
    before = logger.level
    try:
        for level in documented:
            res = CliRunner().invoke(cli, ["agent", "run", "--node", " ", "--log-level", level])
            # past the option, the level set, the empty node refused
            assert one_line(res).endswith("--node is empty (the chart sets NODE_NAME from "
                                          "spec.nodeName)"), (level, res.output)
            assert logger.level == getattr(logging, level.upper())
    finally:
        logger.setLevel(before)
    res = CliRunner().invoke(cli, ["agent", "run", "--node", "n1", "--log-level", "verbose"])
    assert res.exit_code == 2 and "'verbose' is not one of" in res.output
