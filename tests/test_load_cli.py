"""`elastore load run` against a user's own cluster (issue 41, item 6): what it refuses
before it connects anywhere, and the Swift storage URL it takes. The replays themselves run
on the real lab stores (tests/test_cassandra_lab.py, tests/test_swift_lab.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from elastore.cli import cli, register
from elastore.errors import ElastoreError
from elastore.lab.swift.load import SwiftEndpoint, parse_storage_url

register()


@pytest.mark.parametrize(("url", "want"), [
    ("http://10.0.0.5:8080/v1/AUTH_load", SwiftEndpoint("10.0.0.5:8080", "AUTH_load")),
    ("https://swift.example/v1/AUTH_x/", SwiftEndpoint("swift.example:443", "AUTH_x", True)),
    ("http://127.0.0.1/v1/acct", SwiftEndpoint("127.0.0.1:80", "acct")),
])
def test_a_storage_url_gives_proxy_account_and_tls(url: str, want: SwiftEndpoint) -> None:
    assert parse_storage_url(url) == want


@pytest.mark.parametrize("url", [
    "10.0.0.5:8080/v1/AUTH_load",  # no scheme
    "ftp://h/v1/AUTH_x",
    "http://h/v2/AUTH_x",
    "http://h/v1/AUTH_x/container",  # a container is --keyspace's
    "http://h/v1",
    "http://h/v1/AUTH_x?x=1",
])
def test_a_bad_storage_url_is_refused_with_the_form_it_wants(url: str) -> None:
    with pytest.raises(ElastoreError, match=r"want a storage URL http\[s\]://HOST"):
        parse_storage_url(url)
    with pytest.raises(ElastoreError, match="the port is not a number"):
        parse_storage_url("http://h:port/v1/AUTH_x")


def _wl(tmp_path: Path) -> Path:
    from elastore.traces import read_pages_csv
    from elastore.traces.workload import BuildParams, build_workload

    (tmp_path / "p.csv").write_text("hour_utc,page,requests\n2016-01-01 00:00:00,A,500\n"
                                    "2016-01-01 00:00:00,B,300\n")
    build_workload(read_pages_csv(tmp_path / "p.csv"),
                   BuildParams(hour_seconds=10.0, windows_per_hour=2, peak_rps=10.0)
                   ).save(tmp_path / "wl.json")
    return tmp_path / "wl.json"


@pytest.mark.parametrize(("args", "env", "message"), [
    # the lab's keyspace by default: a user's cluster must name one the replay may write
    (["--contact-points", "127.0.0.1"], {}, "name the keyspace"),
    (["--swift-url", "http://127.0.0.1:8080/v1/AUTH_x"], {}, "name the keyspace"),
    (["--contact-points", "127.0.0.1", "--swift-url", "http://127.0.0.1/v1/A",
      "--keyspace", "k"], {}, "not both"),
    (["--contact-points", "127.0.0.1", "--keyspace", "k", "--username", "u"], {},
     "ELASTORE_CQL_PASSWORD"),
    (["--contact-points", " , ", "--keyspace", "k"], {}, "want HOST"),
    (["--contact-points", "127.0.0.1", "--keyspace", "k", "--store", "swift"], {},
     "--store swift contradicts --contact-points"),
    # the lab's own settings are fixed: a user-cluster option alone is an error, not ignored
    (["--username", "u"], {}, "--username: only with --contact-points or --swift-url"),
    (["--port", "9043"], {}, "--port: only with --contact-points"),
])
def test_load_run_refuses_before_it_connects(tmp_path: Path, args: list[str],
                                             env: dict[str, str], message: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ELASTORE_CQL_PASSWORD", raising=False)
    monkeypatch.setenv("ELASTORE_LAB_DIR", str(tmp_path / "no-lab"))
    out = tmp_path / "out.csv"
    res = CliRunner().invoke(cli, ["load", "run", str(_wl(tmp_path)), "--out", str(out),
                                   *args], env=env)
    assert res.exit_code != 0
    assert message in res.output, res.output
    assert "Traceback" not in res.output and not out.exists()
