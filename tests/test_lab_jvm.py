"""The lab's JVMs: nodetool and the example exporter run as client JVMs (C1 alone, the
serial collector), nodetool maps a class-data-sharing archive written by its first normal
run, and the nodes compile with C1 alone and collect with the serial collector only when
``ELASTORE_LAB_QUICK_JIT`` is 1 (what ``make test`` sets; the measurements keep G1 and
Java's default JIT)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from elastore.lab.cassandra import nodes


def _spec(tmp_path: Path) -> nodes.NodeSpec:
    return nodes.NodeSpec(1, tmp_path / "n1")


def _said(res: subprocess.CompletedProcess[str]) -> list[str]:
    """The commands ``nodetool help`` lists (its usage line's option order varies from run
    to run, and the netty DEBUG lines its logging prints are time-stamped)."""
    return [ln for ln in res.stdout.splitlines()
            if ln.startswith("    ") and not ln.startswith("     ")]


def test_the_nodes_compile_with_c1_alone_only_when_asked(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "jmx_prometheus_javaagent-1.0.1.jar").touch()
    monkeypatch.delenv(nodes.QUICK_JIT_ENV, raising=False)
    assert "-XX:TieredStopAtLevel=1" not in nodes.node_command(_spec(tmp_path), lib, "256M")
    monkeypatch.setenv(nodes.QUICK_JIT_ENV, "0")
    assert "-XX:TieredStopAtLevel=1" not in nodes.node_command(_spec(tmp_path), lib, "256M")
    assert cmd_gc(nodes.node_command(_spec(tmp_path), lib, "256M")) == ["-XX:+UseG1GC"]
    monkeypatch.setenv(nodes.QUICK_JIT_ENV, "1")
    cmd = nodes.node_command(_spec(tmp_path), lib, "256M")
    # JVM flags, before the main class and its arguments; one collector, the serial one
    main = cmd.index("org.apache.cassandra.service.CassandraDaemon")
    assert cmd.index("-XX:TieredStopAtLevel=1") < main
    assert cmd_gc(cmd) == ["-XX:+UseSerialGC"] and cmd.index("-XX:+UseSerialGC") < main


def cmd_gc(cmd: list[str]) -> list[str]:
    """The collectors a command line chooses."""
    return [f for f in cmd if nodes.names_a_collector([f])]


def test_nodetool_is_a_client_jvm_whatever_the_nodes_jit(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.delenv(nodes.QUICK_JIT_ENV, raising=False)
    argv = nodes.nodetool_argv(tmp_path, 7201, "status", archive=["-XX:SharedArchiveFile=x"])
    main = argv.index("org.apache.cassandra.tools.NodeTool")
    for flag in [*nodes.CLIENT_JVM_FLAGS, "-XX:SharedArchiveFile=x"]:
        assert argv.index(flag) < main, flag
    assert argv[main + 1:] == ["-h", "127.0.0.1", "-p", "7201", "status"]
    assert nodes.nodetool_command("ns1", tmp_path, 7201, "status")[:4] == [
        "ip", "netns", "exec", "ns1"]


@pytest.mark.lab
@pytest.mark.concurrent
def test_nodetool_writes_its_archive_once_and_a_bad_one_changes_nothing(tmp_path: Path
                                                                        ) -> None:
    """Real java and Cassandra's jars (no node: ``nodetool help`` needs none)."""
    real = nodes.ensure_jars()
    lib = tmp_path / "cassandra" / "lib"
    lib.mkdir(parents=True)
    for jar in real.glob("*.jar"):
        (lib / jar.name).symlink_to(jar)
    jsa = nodes.nodetool_archive(lib)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return nodes.run_archived(lib, lambda flags: nodes.nodetool_argv(
            lib, 1, *args, archive=flags), 120)

    # a run that fails (no JMX on port 1) leaves no archive, whole or half
    failed = run("status")
    assert failed.returncode != 0 and not jsa.exists()
    assert list(lib.parent.iterdir()) == [lib]
    first = run("help")
    assert first.returncode == 0, first.stderr[-500:]
    assert any(ln.split()[0] == "decommission" for ln in _said(first)), first.stdout[-500:]
    assert jsa.stat().st_size > 0
    assert list(lib.parent.glob("*.partial")) == []
    mapped = run("help")
    assert (mapped.returncode, _said(mapped)) == (0, _said(first))
    # an archive that is not one: the JVM runs without it, its words on stderr only
    jsa.write_bytes(b"not an archive" * 100)
    bad = run("help")
    assert (bad.returncode, _said(bad)) == (0, _said(first)), bad.stderr[-500:]
