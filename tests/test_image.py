"""The images of the real node (issue 36), built here offline (tests/testbed/images.py) and
run with podman: the operator's image (the top-level Dockerfile on a local Debian base)
and the Cassandra image of the StatefulSet pods.

Each image is built once per module; a build that fails is this suite's failure, never a
skip. Every container runs without a network (``--network none``) and is removed at the end.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from testbed import images

from elastore.errors import ElastoreError
from elastore.operator.presets import OPTIONAL
from elastore.operator.spec import DEFAULT_QUERIES

# real podman and real images, nothing timed: the parallel phase of make test
pytestmark = [pytest.mark.lab, pytest.mark.concurrent]

NO_LAB = "the storage lab is not part of this installation"


def _build(what: str, ensure: Callable[[images.Progress | None], str]) -> str:
    try:
        return ensure(print)
    except ElastoreError as e:
        pytest.fail(f"building the {what} image failed (make image; tests/testbed/images.py)"
                    f": {e}", pytrace=False)


@pytest.fixture(scope="module")
def elastore_image() -> str:
    return _build("operator's", images.ensure_elastore_image)


@pytest.fixture(scope="module")
def cassandra_image() -> str:
    return _build("Cassandra", images.ensure_cassandra_image)


def run(image: str, *args: str, read_only: bool = True, entrypoint: str | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = ["podman", "run", "--rm", *images.PODMAN_RUN, "--network", "none"]
    if read_only:
        argv.append("--read-only")
    if entrypoint is not None:
        argv += ["--entrypoint", entrypoint]
    return subprocess.run([*argv, image, *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, (res.args, res.stdout[-2000:], res.stderr[-2000:])
    return res.stdout


# --------------------------------------------------------------------------------------------
# the operator's image
# --------------------------------------------------------------------------------------------
def test_the_operator_image_is_tagged_by_version_and_content(elastore_image: str) -> None:
    ref, tag = elastore_image.rsplit(":", 1)
    assert ref == "localhost/elastore" and tag.startswith(images.version() + "-"), \
        elastore_image
    assert images.image_exists(f"localhost/elastore:{images.version()}")
    label = ok(subprocess.run(["podman", "image", "inspect", "--format",
                               '{{index .Labels "io.elastore.content"}}', elastore_image],
                              capture_output=True, text=True, check=False)).strip()
    assert label.startswith(tag.rsplit("-", 1)[1]), label
    # a second call rebuilds nothing
    t0 = time.monotonic()
    assert images.ensure_elastore_image() == elastore_image
    assert time.monotonic() - t0 < 30


def test_the_entry_points_run_on_a_read_only_root(elastore_image: str) -> None:
    out = ok(run(elastore_image, "operator", "run", "--help"))
    assert "Usage:" in out
    assert "Usage:" in ok(run(elastore_image, "agent", "--help"))
    crds = list(yaml.safe_load_all(ok(run(elastore_image, "operator", "crd"))))
    assert [c["kind"] for c in crds] == ["CustomResourceDefinition"] * 3, crds
    assert [c["metadata"]["name"] for c in crds] == [
        "elasticpolicies.elastore.io", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"]
    # and it wrote nothing but under /tmp (podman mounts it, and /run, as tmpfs)
    probe = ("import elastore.operator.handlers, elastore.agent, matplotlib, os; "
             "print(os.getuid(), os.getgid(), os.environ['HOME'])")
    res = run(elastore_image, "-c", probe, entrypoint="python3")
    uid, _gid, home = ok(res).split()
    assert uid == str(images.ELASTORE_UID) and home == "/tmp", res.stdout
    assert "Read-only" not in res.stderr and "not writable" not in res.stderr, res.stderr


def test_it_runs_as_non_root(elastore_image: str) -> None:
    conf = json.loads(ok(subprocess.run(["podman", "image", "inspect", elastore_image],
                                        capture_output=True, text=True, check=False)))
    cfg = conf[0]["Config"]
    assert cfg["User"] == str(images.ELASTORE_UID), cfg
    assert cfg["Entrypoint"] == ["elastore"], cfg
    assert ok(run(elastore_image, "-u", entrypoint="id")).strip() == str(images.ELASTORE_UID)


def test_swift_ring_builder_is_there_and_builds_a_ring(elastore_image: str) -> None:
    script = ("cd /tmp && swift-ring-builder object.builder create 4 1 1 && "
              "swift-ring-builder object.builder add r1z1-127.0.0.1:6200/d1 100 && "
              "swift-ring-builder object.builder rebalance; swift-ring-builder object.builder")
    out = ok(run(elastore_image, "-c", script, entrypoint="sh"))
    assert "1 devices" in out and "127.0.0.1:6200" in out, out


def test_no_test_bed_and_no_lab_inside(elastore_image: str) -> None:
    probe = ("import importlib.util as u, elastore, pathlib; "
             "print(u.find_spec('elastore.lab'), u.find_spec('testbed')); "
             "print(pathlib.Path(elastore.__file__).parent)")
    out = ok(run(elastore_image, "-c", probe, entrypoint="python3")).split("\n")
    assert out[0] == "None None", out
    assert out[1].startswith("/opt/elastore/lib/python3"), out
    found = ok(run(elastore_image, "-c",
                   "find / -xdev \\( -name testbed -o -name tests -o -path '*/elastore/lab' "
                   "-o -name k8s_support.py \\) -print 2>/dev/null | grep -v -e dist-packages"
                   " -e site-packages/[^e] || true", entrypoint="sh"))
    assert found.strip() == "", found
    res = run(elastore_image, "lab", "--help")
    assert res.returncode != 0 and NO_LAB in res.stderr, (res.stdout, res.stderr)


# --------------------------------------------------------------------------------------------
# the Cassandra image
# --------------------------------------------------------------------------------------------
def test_the_cassandra_image_has_java_and_nodetool_and_runs_as_non_root(
        cassandra_image: str) -> None:
    out = ok(run(cassandra_image, "-c", "id -u; command -v nodetool; java -version 2>&1",
                 entrypoint="sh"))
    uid, nodetool, *java = out.splitlines()
    assert uid == str(images.CASSANDRA_UID), out
    assert nodetool == "/opt/cassandra/bin/nodetool", out
    assert "openjdk version \"17" in "\n".join(java), out


def _metric_names() -> set[str]:
    """The Cassandra series the operator's default queries read (name and ``name=``
    selector), from the queries themselves, less the optional ones: a node that has not
    streamed yet has no streaming series (Cassandra registers them at its first stream)."""
    import re

    found = set()
    for q, text in DEFAULT_QUERIES.items():
        if q in OPTIONAL:
            continue
        for m in re.finditer(r"(org_apache_cassandra_metrics_[a-z_{}]+?)\{\{name=\"(\w+)\"",
                             text):
            for pct in ("95", "99"):
                found.add((m.group(1).replace("{pct}", pct), m.group(2)))
    assert len(found) >= 3, DEFAULT_QUERIES  # client requests, their latency, the load
    return {f'{n}{{name="{sel}"' for n, sel in found}


@pytest.fixture(scope="module")
def cassandra_node(cassandra_image: str) -> Iterator[str]:
    name = f"elastore-test-cass-{uuid.uuid4().hex[:8]}"
    res = subprocess.run(["podman", "run", "-d", "--name", name, *images.PODMAN_RUN,
                          "--network", "none", "--read-only",
                          "--tmpfs", "/var/lib/cassandra:rw,U,mode=0750",
                          "-e", "POD_IP=127.0.0.1", "-e", "POD_NAME=cass-0",
                          "-e", "CLUSTER_NAME=image-test", cassandra_image],
                         capture_output=True, text=True, check=False)
    try:
        assert res.returncode == 0, res.stderr
        yield name
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "5", name], capture_output=True,
                       check=False)


def _exec(name: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", name, *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_one_cassandra_node_comes_up_and_exports_what_the_operator_reads(
        cassandra_node: str) -> None:
    deadline = time.monotonic() + 120
    status = ""
    while time.monotonic() < deadline:
        alive = subprocess.run(["podman", "inspect", "--format", "{{.State.Running}}",
                                cassandra_node], capture_output=True, text=True, check=False)
        if alive.stdout.strip() != "true":
            logs = subprocess.run(["podman", "logs", "--tail", "40", cassandra_node],
                                  capture_output=True, text=True, check=False)
            pytest.fail(f"the Cassandra container exited: {logs.stdout}{logs.stderr}")
        res = _exec(cassandra_node, "nodetool", "status")
        status = res.stdout
        if res.returncode == 0 and any(ln.startswith("UN  127.0.0.1")
                                       for ln in status.splitlines()):
            break
        time.sleep(3)
    else:
        logs = subprocess.run(["podman", "logs", "--tail", "40", cassandra_node],
                              capture_output=True, text=True, check=False)
        pytest.fail(f"no UN node in 120 s: {status}\n{logs.stdout[-3000:]}")
    assert "Datacenter: datacenter1" in status, status
    # the JMX exporter on 9500 (curl-equivalent: the image's python3)
    fetch = ("import urllib.request; print(urllib.request.urlopen("
             f"'http://127.0.0.1:{images.EXPORTER_PORT}/metrics', timeout=10).read().decode())")
    metrics = ok(_exec(cassandra_node, "python3", "-c", fetch))
    missing = sorted(m for m in _metric_names() if m not in metrics)
    assert not missing, (missing, [ln for ln in metrics.splitlines()
                                   if "clientrequest" in ln][:10])
    for scope in ("Read", "Write"):  # what readRps and writeRps select
        assert f'org_apache_cassandra_metrics_clientrequest_count{{name="Latency",' \
               f'scope="{scope}"}}' in metrics, scope
    # it wrote only its data directory and /tmp (the root is read-only)
    conf = ok(_exec(cassandra_node, "cat", "/var/lib/cassandra/conf/cassandra.yaml"))
    assert 'cluster_name: "image-test"' in conf and "seeds: \"127.0.0.1\"" in conf, conf


def test_the_statefulset_manifest() -> None:
    cassandra_image = "localhost/elastore-cassandra:5.0.4-0123456789ab"
    doc = yaml.safe_load(images.cassandra_statefulset(
        "cass", "ns1", 3, "elastore-test", "1Gi", cassandra_image))
    assert doc["kind"] == "List"  # what kubectl apply -f - reads as one JSON document
    docs = doc["items"]
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Service", "ServiceAccount", "Role", "RoleBinding", "StatefulSet"], kinds
    sts = docs[-1]
    assert sts["metadata"]["labels"]["elastore.io/managed"] == "true"
    spec = sts["spec"]
    assert spec["podManagementPolicy"] == "OrderedReady" and spec["replicas"] == 3
    pod = spec["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(images.EXPORTER_PORT)
    (c,) = pod["spec"]["containers"]
    assert c["image"] == cassandra_image and c["imagePullPolicy"] == "Never"
    assert {e["name"] for e in c["env"]} >= {"POD_IP", "POD_NAME", "POD_NAMESPACE"}
    assert set(c["readinessProbe"]) >= {"exec"} and "9042" in c["readinessProbe"]["exec"][
        "command"][-1]
    vct = spec["volumeClaimTemplates"][0]["spec"]
    assert vct["storageClassName"] == "elastore-test"
    assert vct["resources"]["requests"]["storage"] == "1Gi"
    assert "JVM_EXTRA_OPTS" not in {e["name"] for e in c["env"]}  # the image's default JIT
    quick = yaml.safe_load(images.cassandra_statefulset(
        "cass", "ns1", 3, "elastore-test", "1Gi", cassandra_image,
        jvm_opts="-XX:TieredStopAtLevel=1"))["items"][-1]
    (c,) = quick["spec"]["template"]["spec"]["containers"]
    assert {"name": "JVM_EXTRA_OPTS", "value": "-XX:TieredStopAtLevel=1"} in c["env"]


def test_the_entrypoint_finds_its_seed_through_the_api(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod of ordinal > 0 reads ``<statefulset>-0``'s IP from the API server (HTTPS, the
    service account's token and CA), retrying while that pod has none; ordinal 0 seeds
    itself. Against a stand-in API server on 127.0.0.1 (the entrypoint is standard-library
    Python, run here as the image runs it)."""
    import http.server
    import importlib.util
    import ssl
    import threading

    sa = tmp_path / "sa"
    sa.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(sa / "ca.crt")],
                   check=True, capture_output=True)
    (sa / "token").write_text("tok-123\n")
    (sa / "namespace").write_text("ns-from-sa\n")
    seen: list[tuple[str, str]] = []

    class API(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization", "")))
            ip = "10.1.2.3" if len(seen) >= 3 else None  # no IP for its first two reads
            body = json.dumps({"status": {"podIP": ip} if ip else {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), API)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sa / "ca.crt", tmp_path / "key.pem")
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        script = tmp_path / "entrypoint.py"
        script.write_text(images.entrypoint_script())
        monkeypatch.setenv("SERVICE_ACCOUNT_DIR", str(sa))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(srv.server_address[1]))
        monkeypatch.delenv("CASSANDRA_SEEDS", raising=False)
        monkeypatch.delenv("POD_NAMESPACE", raising=False)
        spec = importlib.util.spec_from_file_location("cass_entrypoint", script)
        assert spec is not None and spec.loader is not None
        ep = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ep)
        monkeypatch.setattr(ep.time, "sleep", lambda s: None)
        monkeypatch.setenv("POD_NAME", "my-cass-0")
        assert ep.seeds("10.9.9.9") == "10.9.9.9" and not seen  # ordinal 0: itself
        monkeypatch.setenv("POD_NAME", "my-cass-2")
        assert ep.seeds("10.9.9.9") == "10.1.2.3"
        assert seen == [("/api/v1/namespaces/ns-from-sa/pods/my-cass-0",
                         "Bearer tok-123")] * 3, seen
        monkeypatch.setenv("CASSANDRA_SEEDS", "1.1.1.1")
        assert ep.seeds("10.9.9.9") == "1.1.1.1"
        # JVM_EXTRA_OPTS may choose the collector (make test's quick nodes: the serial one)
        assert ep.collector([]) == ep.collector(["-XX:TieredStopAtLevel=1"]) == [
            "-XX:+UseG1GC"]
        assert ep.collector(["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]) == []
    finally:
        srv.shutdown()
