"""The CLI contract: help with examples on every command, one-line errors, exit codes."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from elastore.cli import cli, register

register()


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += all_commands(cmd, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


@pytest.mark.parametrize("path", all_commands(cli), ids=lambda p: " ".join(p) or "elastore")
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(cli, [*path, "--help"])
    assert res.exit_code == 0
    assert "Example" in res.output, f"'elastore {' '.join(path)} --help' has no example"


def test_bad_input_is_one_line_and_exit_1(tmp_path: Path) -> None:
    p = tmp_path / "h.csv"
    p.write_text("hour_utc,requests\n2009-01-01 00:00:00,1\n2009-01-01 0x:00:00,2\n")
    res = CliRunner().invoke(cli, ["trace", "inspect", str(p)])
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        f"error: {p}:3: unparsable timestamp '2009-01-01 0x:00:00' (expected YYYY-MM-DD HH:MM:SS)"
    ]


def test_unknown_column_and_truncated_gzip_via_cli(tmp_path: Path) -> None:
    p = tmp_path / "h.csv"
    p.write_text("hour_utc,requests\n2009-01-01 00:00:00,1\n")
    res = CliRunner().invoke(cli, ["trace", "inspect", str(p), "--column", "nope"])
    assert res.exit_code == 1 and "unknown column 'nope'" in res.output
    g = tmp_path / "p.csv.gz"
    data = gzip.compress(b"hour_utc,page,requests\n" + b"2016-01-01 00:00:00,A,1\n" * 50000)
    g.write_bytes(data[:-30])
    res = CliRunner().invoke(cli, ["trace", "build", str(g), "-o", str(tmp_path / "w.json")])
    assert res.exit_code == 1 and "truncated or corrupt gzip" in res.output
    assert not (tmp_path / "w.json").exists()  # nothing half-written


def test_bad_date_is_a_usage_error() -> None:
    res = CliRunner().invoke(cli, ["trace", "inspect", "--start", "March"])
    assert res.exit_code == 2 and "is not a date" in res.output


def test_console_script_runs_as_module() -> None:
    res = subprocess.run([sys.executable, "-m", "elastore", "--version"], capture_output=True,
                         text=True, check=True)
    assert "elastore" in res.stdout


def test_operator_run_names_a_missing_kubeconfig_and_crd_prints_the_crd(
        tmp_path: Path) -> None:
    import yaml

    missing = tmp_path / "nope.kubeconfig"
    res = CliRunner().invoke(cli, ["operator", "run", "--kubeconfig", str(missing)])
    assert res.exit_code == 1
    assert f"{missing}: no such kubeconfig" in res.output
    res = CliRunner().invoke(cli, ["operator", "crd"])
    assert res.exit_code == 0
    doc = next(yaml.safe_load_all(res.output))  # the first of the CRDs (test_cli_extras.py)
    assert doc["kind"] == "CustomResourceDefinition"
    assert doc["metadata"]["name"] == "elasticpolicies.elastore.io"


def test_concurrent_ticks_bounds_the_ticks_that_run_and_the_pool_holds_them(
        tmp_path: Path) -> None:
    """``--concurrent-ticks``: out of range is a usage error; the runtime's slots let that
    many ticks in and hold the next; the API client's connection pool holds them all."""
    res = CliRunner().invoke(cli, ["operator", "run", "--concurrent-ticks", "0"])
    assert res.exit_code == 2 and "--concurrent-ticks" in res.output
    from elastore.operator.runtime import OperatorOptions, Runtime

    rt = Runtime(OperatorOptions(concurrent_ticks=3))
    slot = rt.tick_slot()
    assert rt.tick_slot() is slot  # one set of slots for the process
    assert all(slot.acquire(blocking=False) for _ in range(3))
    assert not slot.acquire(blocking=False)  # a fourth tick waits
    slot.release()
    assert slot.acquire(blocking=False)
    kc = tmp_path / "kc"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
                  "    server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n"
                  "    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n"
                  "  user:\n    token: t\n")
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, {"KUBECONFIG": str(kc)}):
        rt = Runtime(OperatorOptions(concurrent_ticks=40))
        assert rt.api_client().configuration.connection_pool_maxsize >= 44
