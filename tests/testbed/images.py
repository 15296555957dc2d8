"""The container images of the real node (issue 36), built here without a registry.

No container registry is reachable from these machines, so every image starts from a Debian
root file system made by ``debootstrap --variant=minbase bookworm`` from Debian's mirror
(:func:`ensure_base`), tarred into the cache (``$ELASTORE_CACHE/images``, default
``~/.cache/elastore``: it survives where podman's storage may not) and imported into podman.
Every ``RUN`` of a build is offline (``--network none``): what an image needs is fetched on
the host first (the operator's wheels with the checkout's pip, Cassandra's jars with Maven).

- :func:`ensure_elastore_image`: the top-level Dockerfile on the local python base, its
  dependencies from a wheel directory (``--build-arg WHEELS``);
- :func:`ensure_cassandra_image`: Cassandra 5.0 from the lab's Maven jars on the java base,
  with nodetool, the JMX exporter on :data:`EXPORTER_PORT` and an entrypoint for a
  StatefulSet pod (:func:`cassandra_statefulset`);
- :func:`ensure_sandbox_image`: the kubelet's CRI sandbox (``sleep infinity``);
- :func:`load_into_containerd`: one of them into a containerd (``ctr images import``).

Each returns its image reference, tagged with a hash of what went into it, so that a changed
source builds a new image and an unchanged one costs a ``podman image exists``. Run as
``python -m testbed.images elastore|cassandra|sandbox|all`` (``PYTHONPATH=tests``).

Podman here: Debian's 4.3.1 with runc (crun refuses cgroup v1) and the sandbox's rlimits
(:data:`PODMAN_RUN`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from elastore.errors import ElastoreError

log = logging.getLogger("elastore.images")

REPO = Path(__file__).resolve().parents[2]
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
RUNC = "/usr/sbin/runc"
#: what every ``podman run``/``build`` here needs: runc, and rlimits the sandbox allows
PODMAN_RUN = ("--runtime", RUNC, "--ulimit", "nofile=20000:20000",
              "--ulimit", "nproc=1024:1024")
#: the Debian packages of each base (debootstrap ``--include``; it adds their dependencies)
BASES: dict[str, tuple[str, ...]] = {
    # the operator's image: a venv of Debian's Python, and Swift's swift-ring-builder.
    # debootstrap resolves no virtual packages: python3-pycparser's (a dependency of swift's)
    # python3-ply-lex-3.10 is python3-ply's
    "python": ("python3", "python3-venv", "swift", "python3-ply", "ca-certificates"),
    # Cassandra: Java 17, and Python for the pod's entrypoint
    "java": ("openjdk-17-jre-headless", "python3", "procps"),
}
CASSANDRA_UID = 999
EXPORTER_PORT = 9500
JMX_PORT = 7199
ELASTORE_UID = 65532

Progress = Callable[[str], None]


def cache_root() -> Path:
    return Path(os.environ.get("ELASTORE_CACHE") or Path.home() / ".cache" / "elastore")


def images_dir() -> Path:
    """The bases' tars, the wheels, and scratch space (build contexts, saved images)."""
    d = cache_root() / "images"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _say(progress: Progress | None) -> Progress:
    return progress or (lambda m: log.info("%s", m))


def _run(argv: Sequence[str], what: str, timeout_s: float = 3600,
         cwd: Path | None = None) -> str:
    """Run ``argv``; an ElastoreError with the tail of its stderr if it fails."""
    try:
        res = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    except FileNotFoundError as e:
        raise ElastoreError(f"{what}: {argv[0]} is not installed (make image installs it)"
                            ) from e
    except subprocess.TimeoutExpired as e:
        raise ElastoreError(f"{what}: timed out after {timeout_s:.0f} s "
                            f"({' '.join(argv[:4])} ...)") from e
    if res.returncode != 0:
        raise ElastoreError(f"{what} failed ({' '.join(argv[:4])} ..., exit "
                            f"{res.returncode}): {(res.stderr or res.stdout).strip()[-1500:]}")
    return res.stdout


def _hash(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def _hash_tree(root: Path, skip: Iterable[str] = ()) -> str:
    """A hash of every file's path, mode and content under ``root`` (less ``skip``, top-level
    names)."""
    h = hashlib.sha256()
    skipped = set(skip)
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = f.relative_to(root)
        if rel.parts[0] in skipped:
            continue
        h.update(f"{rel.as_posix()}\0{f.stat().st_mode & 0o777:o}\0".encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def image_exists(ref: str) -> bool:
    try:
        return subprocess.run(["podman", "image", "exists", ref], capture_output=True,
                              check=False).returncode == 0
    except FileNotFoundError as e:
        raise ElastoreError("podman is not installed (make image installs it)") from e


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _build(ctx: Path, tags: Sequence[str], what: str, progress: Progress,
           build_args: dict[str, str] | None = None, labels: dict[str, str] | None = None,
           containerfile: Path | None = None) -> None:
    argv = ["podman", "build", *PODMAN_RUN, "--network", "none", "--pull=never",
            "--layers=false"]
    for k, v in (build_args or {}).items():
        argv += ["--build-arg", f"{k}={v}"]
    for k, v in (labels or {}).items():
        argv += ["--label", f"{k}={v}"]
    for t in tags:
        argv += ["-t", t]
    if containerfile is not None:
        argv += ["-f", str(containerfile)]
    t0 = time.monotonic()
    progress(f"{what}: podman build -> {tags[0]}")
    _run([*argv, str(ctx)], f"building {what}", timeout_s=1800)
    progress(f"{what}: built {tags[0]} in {time.monotonic() - t0:.0f} s")


#: content-tagged builds kept per image (older sources' builds are untagged, and their layers
#: freed, after a new build: an operator image is ~1 GB)
KEEP_BUILDS = 3


def _prune(repo: str, ver: str) -> None:
    """Remove all but the :data:`KEEP_BUILDS` newest ``<repo>:<ver>-<hash>`` images (one in
    use by a container stays: podman refuses, and that is fine)."""
    try:
        out = _run(["podman", "image", "ls", "--format", "json", repo], "podman image ls")
    except ElastoreError:
        return
    tagged = re.compile(re.escape(f"{repo}:{ver}-") + r"[0-9a-f]{12}$")
    builds: dict[str, int] = {}
    for img in json.loads(out or "[]"):
        for n in img.get("Names") or []:
            if tagged.match(n):
                builds[n] = int(img.get("Created") or 0)
    for n in sorted(builds, key=lambda k: -builds[k])[KEEP_BUILDS:]:
        subprocess.run(["podman", "rmi", n], capture_output=True, check=False)


# --------------------------------------------------------------------------------------------
# bases: debootstrap, tar (cached), podman import
# --------------------------------------------------------------------------------------------
def base_ref(name: str, packages: Sequence[str] | None = None) -> tuple[str, Path]:
    """The base's image reference and its tar in the cache."""
    pkgs = sorted(BASES[name] if packages is None else packages)
    h = _hash(SUITE, MIRROR, "minbase", *pkgs)[:12]
    return f"localhost/elastore-{name}-base:{h}", images_dir() / f"{name}-{h}.tar"


def ensure_base(name: str, packages: Sequence[str] | None = None,
                progress: Progress | None = None) -> str:
    """``localhost/elastore-<name>-base:<hash of the packages>``: Debian bookworm (minbase)
    with ``packages`` (default :data:`BASES` ``[name]``), debootstrapped once into a tar in
    the cache and imported into podman when podman lacks it."""
    say = _say(progress)
    ref, tar = base_ref(name, packages)
    if image_exists(ref):
        return ref
    pkgs = sorted(BASES[name] if packages is None else packages)
    if not tar.is_file():
        if shutil.which("debootstrap") is None and not Path("/usr/sbin/debootstrap").exists():
            raise ElastoreError("debootstrap is not installed (make image installs it)")
        tar.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{name}-base.", dir=tar.parent))
        try:
            t0 = time.monotonic()
            say(f"base {name}: debootstrap --variant=minbase {SUITE} --include="
                f"{','.join(pkgs)} (once per package set; ~1-3 min)")
            rootfs = work / "rootfs"
            try:
                _run(["debootstrap", "--variant=minbase", f"--include={','.join(pkgs)}",
                      SUITE, str(rootfs), MIRROR], f"debootstrap of the {name} base",
                     timeout_s=1800)
            except ElastoreError as e:  # its own log says which package failed, and why
                logf = rootfs / "debootstrap" / "debootstrap.log"
                tail = logf.read_text(errors="replace")[-1500:] if logf.exists() else ""
                raise ElastoreError(f"{e}\ndebootstrap.log:\n{tail}") from None
            # what debootstrap leaves that an image needs not: the .debs and apt's lists
            for d in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for f in (rootfs / d).glob("*"):
                    if f.is_file() and f.name != "lock":
                        f.unlink()
            _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(work / "base.tar"),
                  "."], f"tarring the {name} base")
            (work / "base.tar").rename(tar)  # all or nothing
            say(f"base {name}: {tar} ({tar.stat().st_size / 2**20:.0f} MiB) in "
                f"{time.monotonic() - t0:.0f} s")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    t0 = time.monotonic()
    _run(["podman", "import", "--change",
          "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          "--change", 'CMD ["/bin/bash"]', str(tar), ref], f"podman import of the {name} base")
    say(f"base {name}: imported {ref} in {time.monotonic() - t0:.0f} s")
    return ref


# --------------------------------------------------------------------------------------------
# the operator's image: the top-level Dockerfile, offline
# --------------------------------------------------------------------------------------------
def version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def _dockerignore() -> list[str]:
    """.dockerignore's patterns (plain paths and ``**/`` globs; tests/test_packaging.py
    reads it the same way)."""
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()]
    return [ln.rstrip("/") for ln in lines if ln and not ln.startswith("#")]


def _ignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    for k in range(1, len(parts) + 1):
        head = "/".join(parts[:k])
        for pat in patterns:
            if fnmatch.fnmatchcase(head, pat) or (
                    pat.startswith("**/") and fnmatch.fnmatchcase(head, pat[3:])):
                return True
    return False


def _context_files() -> list[str]:
    """The files of the operator's build context the Dockerfile reads ('/'-separated)."""
    patterns = _dockerignore()
    out = ["Dockerfile", ".dockerignore", "pyproject.toml", "README.md"]
    for f in sorted((REPO / "elastore").rglob("*")):
        rel = f.relative_to(REPO).as_posix()
        if f.is_file() and not _ignored(rel, patterns):
            out.append(rel)
    return out


def ensure_wheels(progress: Progress | None = None) -> Path:
    """A directory of wheels for every dependency of ``elastore[operator,agent]`` and of its
    build (setuptools, wheel), made once per pyproject.toml with the checkout's pip (its
    ``.venv``: Python 3.11 on the same Debian as the image's base). All or nothing."""
    say = _say(progress)
    pyproject = (REPO / "pyproject.toml").read_text()
    h = _hash(pyproject, f"{sys.version_info[0]}.{sys.version_info[1]}")[:12]
    out = images_dir() / f"wheels-{h}"
    if (out / ".complete").exists():
        return out
    py = REPO / ".venv" / "bin" / "python"
    if not py.exists():
        py = Path(sys.executable)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="wheels.", dir=out.parent))
    try:
        t0 = time.monotonic()
        say(f"wheels: pip wheel elastore[operator,agent] and its build's -> {out}")
        src = work / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(REPO / name, src / name)
        (src / "elastore").mkdir()
        (src / "elastore" / "__init__.py").write_text("")  # only its metadata is wanted
        whl = work / "wheels"
        _run([str(py), "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
              "-w", str(whl), f"{src}[operator,agent]", "setuptools>=77", "wheel"],
             "pip wheel of the operator's dependencies", timeout_s=1800)
        for f in whl.glob("elastore-*.whl"):
            f.unlink()  # the image builds the package from its own context
        (whl / ".complete").touch()
        if out.exists():
            shutil.rmtree(out)
        whl.rename(out)
        n = len(list(out.glob("*.whl")))
        say(f"wheels: {n} wheels in {time.monotonic() - t0:.0f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def ensure_elastore_image(progress: Progress | None = None) -> str:
    """``localhost/elastore:<version>-<content hash>`` (also tagged
    ``localhost/elastore:<version>``): the top-level Dockerfile built offline on the python
    base, from the build context .dockerignore leaves (no lab, no tests) and the wheels of
    :func:`ensure_wheels`. The hash covers the context, the wheels' names and the base."""
    say = _say(progress)
    base = ensure_base("python", progress=say)
    wheels = ensure_wheels(say)
    files = _context_files()
    names = sorted(f.name for f in wheels.glob("*.whl"))
    h = hashlib.sha256()
    for rel in files:
        h.update(f"{rel}\0".encode())
        h.update((REPO / rel).read_bytes())
    content = _hash(h.hexdigest(), base, *names)
    ver = version()
    ref = f"localhost/elastore:{ver}-{content[:12]}"
    if image_exists(ref):
        _run(["podman", "tag", ref, f"localhost/elastore:{ver}"], "podman tag")
        return ref
    ctx = Path(tempfile.mkdtemp(prefix="elastore-ctx.", dir=images_dir()))
    try:
        for rel in files:
            (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, ctx / rel)
        (ctx / "wheels").mkdir()
        for n in names:
            _link_or_copy(wheels / n, ctx / "wheels" / n)
        _build(ctx, [ref, f"localhost/elastore:{ver}"], "the operator's image", say,
               build_args={"BASE": base, "WHEELS": "wheels"},
               labels={"io.elastore.content": content})
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    _prune("localhost/elastore", ver)
    return ref


# --------------------------------------------------------------------------------------------
# the kubelet's sandbox image
# --------------------------------------------------------------------------------------------
def ensure_sandbox_image(progress: Progress | None = None) -> str:
    """``localhost/elastore-sandbox:<base hash>``: the CRI sandbox ("pause") image for the
    kubelet's containerd (``sandbox_image``), the python base sleeping forever."""
    say = _say(progress)
    base = ensure_base("python", progress=say)
    ref = f"localhost/elastore-sandbox:{base.rsplit(':', 1)[1]}"
    if image_exists(ref):
        return ref
    ctx = Path(tempfile.mkdtemp(prefix="sandbox-ctx.", dir=images_dir()))
    try:
        (ctx / "Containerfile").write_text(f'FROM {base}\nCMD ["sleep", "infinity"]\n')
        _build(ctx, [ref], "the sandbox image", say)
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return ref


# --------------------------------------------------------------------------------------------
# Cassandra: the lab's jars, nodetool, the JMX exporter, an entrypoint for a StatefulSet pod
# --------------------------------------------------------------------------------------------
CASSANDRA_CONTAINERFILE = f"""FROM {{base}}
RUN groupadd --system --gid {CASSANDRA_UID} cassandra \\
    && useradd --system --uid {CASSANDRA_UID} --gid {CASSANDRA_UID} \\
       --home-dir /var/lib/cassandra --no-create-home --shell /bin/bash cassandra \\
    && mkdir -p /var/lib/cassandra && chown {CASSANDRA_UID}:{CASSANDRA_UID} /var/lib/cassandra \\
    && chmod 0750 /var/lib/cassandra
COPY cassandra /opt/cassandra
ENV PATH=/opt/cassandra/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    CASSANDRA_HOME=/opt/cassandra HOME=/var/lib/cassandra
USER {CASSANDRA_UID}
WORKDIR /var/lib/cassandra
VOLUME /var/lib/cassandra
EXPOSE 7000 9042 {EXPORTER_PORT}
ENTRYPOINT ["python3", "/opt/cassandra/bin/entrypoint.py"]
"""

LOGBACK = """<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %-5level [%thread] %logger{1} %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
"""

NODETOOL = """#!/bin/sh
# nodetool against this node's JMX (Cassandra binds it to 127.0.0.1:{jmx})
exec java -Xmx128m {client} {flags} -Dlogback.configurationFile=/dev/null \\
  -cp "$(cat /opt/cassandra/classpath)" org.apache.cassandra.tools.NodeTool \\
  -h 127.0.0.1 -p {jmx} "$@"
"""

#: the pod's entrypoint (python3 in the image). ``@FLAGS@`` etc. are filled in at build.
ENTRYPOINT = r'''#!/usr/bin/env python3
"""Cassandra in a StatefulSet pod: cassandra.yaml from the pod's environment, then exec java.

POD_IP (downward API): listen and rpc address. POD_NAME: ``<statefulset>-<ordinal>``;
ordinal 0 seeds itself, the others seed ``<statefulset>-0``, whose IP they read from the
Kubernetes API with the pod's service-account token (the test cluster has no DNS), retrying
until it has one. CASSANDRA_SEEDS overrides the seeds. CLUSTER_NAME (default elastore),
HEAP_SIZE (default 256M), NUM_TOKENS (16), RING_DELAY_MS (3000), JVM_EXTRA_OPTS (JVM flags,
space-separated: a short test run's C1 alone and serial collector, say; a collector named
there replaces G1). Data, commit log and the
written config live under /var/lib/cassandra (the PVC). SERVICE_ACCOUNT_DIR: where the
token, ca.crt and namespace are (the usual mount when unset).
"""
import json
import os
import ssl
import sys
import time
import urllib.request

HOME = "/opt/cassandra"
DATA = os.environ.get("CASSANDRA_DATA", "/var/lib/cassandra")
SA = os.environ.get("SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
FLAGS = json.loads(@FLAGS@)
EXPORTER_PORT = @EXPORTER_PORT@
JMX_PORT = @JMX_PORT@


def say(msg):
    print(f"entrypoint: {msg}", file=sys.stderr, flush=True)


def pod_ip_of(name, namespace):
    """``name``'s pod IP from the API server, retried until it has one."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    if ":" in host:
        host = f"[{host}]"
    url = (f"https://{host}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
           f"/api/v1/namespaces/{namespace}/pods/{name}")
    ctx = ssl.create_default_context(cafile=f"{SA}/ca.crt")
    while True:
        try:
            with open(f"{SA}/token") as f:  # re-read: projected tokens rotate
                token = f.read().strip()
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                ip = json.load(r).get("status", {}).get("podIP")
            if ip:
                return ip
            say(f"seed {name} has no IP yet")
        except Exception as e:  # not there yet, API unreachable: retry
            say(f"looking up the seed {name}: {e}")
        time.sleep(2)


def collector(extra):
    """Cassandra's G1, unless the extra JVM flags name a collector (two stop the JVM)."""
    named = [f for f in extra if f.startswith("-XX:+Use") and f.endswith("GC")]
    return [] if named else ["-XX:+UseG1GC"]


def seeds(ip):
    if os.environ.get("CASSANDRA_SEEDS"):
        return os.environ["CASSANDRA_SEEDS"]
    pod = os.environ.get("POD_NAME", "")
    sts, _, ordinal = pod.rpartition("-")
    if not sts or not ordinal.isdigit() or int(ordinal) == 0:
        return ip
    ns = os.environ.get("POD_NAMESPACE")
    if not ns:
        with open(f"{SA}/namespace") as f:
            ns = f.read().strip()
    return pod_ip_of(f"{sts}-0", ns)


def main():
    ip = os.environ.get("POD_IP")
    if not ip:
        sys.exit("entrypoint: POD_IP is not set (the downward API's status.podIP)")
    seed = seeds(ip)
    for d in ("data", "commitlog", "saved_caches", "hints", "cdc_raw", "logs", "conf"):
        os.makedirs(f"{DATA}/{d}", exist_ok=True)
    conf = f"{DATA}/conf/cassandra.yaml"
    with open(conf, "w") as f:
        f.write(f"""cluster_name: {json.dumps(os.environ.get("CLUSTER_NAME", "elastore"))}
num_tokens: {int(os.environ.get("NUM_TOKENS", "16"))}
allocate_tokens_for_local_replication_factor: 2
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seed}"
listen_address: {ip}
rpc_address: {ip}
native_transport_port: 9042
storage_port: 7000
start_native_transport: true
data_file_directories: [{DATA}/data]
commitlog_directory: {DATA}/commitlog
saved_caches_directory: {DATA}/saved_caches
hints_directory: {DATA}/hints
cdc_raw_directory: {DATA}/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
concurrent_reads: 8
concurrent_writes: 8
concurrent_compactors: 1
auto_snapshot: false
stream_entire_sstables: false
read_request_timeout: 5000ms
write_request_timeout: 5000ms
""")
    heap = os.environ.get("HEAP_SIZE", "256M")
    with open(f"{HOME}/classpath") as f:
        cp = f.read().strip()
    extra = os.environ.get("JVM_EXTRA_OPTS", "").split()
    argv = [
        "java", f"-Xms{heap}", f"-Xmx{heap}", *collector(extra),
        "-Xss512k", "-XX:+ExitOnOutOfMemoryError", *extra,
        *FLAGS,
        f"-javaagent:{HOME}/agent/jmx_prometheus_javaagent.jar="
        f"{EXPORTER_PORT}:{HOME}/conf/exporter.yaml",
        f"-Dcassandra.config=file://{conf}",
        f"-Dcassandra.storagedir={DATA}", f"-Dcassandra.logdir={DATA}/logs",
        f"-Dlogback.configurationFile={HOME}/conf/logback.xml",
        f"-Dcassandra.jmx.local.port={JMX_PORT}",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        f"-Dcassandra.ring_delay_ms={int(os.environ.get('RING_DELAY_MS', '3000'))}",
        "-Dcassandra.superuser_setup_delay_ms=0", "-Dchronicle.analytics.disable=true",
        "-Dcassandra.reset_bootstrap_progress=true",
        "-Dcassandra-foreground=yes",
        "-cp", cp, "org.apache.cassandra.service.CassandraDaemon",
    ]
    say(f"{os.environ.get('POD_NAME', 'cassandra')} on {ip}, seeds {seed}, heap {heap}")
    os.execvp("java", argv)


if __name__ == "__main__":
    main()
'''


def entrypoint_script() -> str:
    """/opt/cassandra/bin/entrypoint.py of the Cassandra image (standard library only)."""
    from elastore.lab.cassandra import nodes

    return (ENTRYPOINT.replace("@FLAGS@", repr(json.dumps(nodes.JAVA_MODULE_FLAGS)))
            .replace("@EXPORTER_PORT@", str(EXPORTER_PORT))
            .replace("@JMX_PORT@", str(JMX_PORT)))


def _cassandra_tree(dst: Path) -> None:
    """/opt/cassandra of the image, from the lab's jars: lib/, agent/, conf/, bin/."""
    from elastore.lab.cassandra import nodes

    lib = nodes.ensure_jars()
    (dst / "lib").mkdir(parents=True)
    (dst / "agent").mkdir()
    (dst / "conf").mkdir()
    (dst / "bin").mkdir()
    jars = sorted(p for p in lib.glob("*.jar") if "jmx_prometheus" not in p.name)
    for j in jars:
        _link_or_copy(j, dst / "lib" / j.name)
    _link_or_copy(nodes.exporter_jar(lib), dst / "agent" / "jmx_prometheus_javaagent.jar")
    (dst / "classpath").write_text(":".join(f"/opt/cassandra/lib/{j.name}" for j in jars)
                                   + "\n")
    (dst / "conf" / "exporter.yaml").write_text(nodes.EXPORTER_CONFIG)
    (dst / "conf" / "logback.xml").write_text(LOGBACK)
    flags = " ".join(nodes.JAVA_MODULE_FLAGS)
    (dst / "bin" / "nodetool").write_text(NODETOOL.format(
        client=" ".join(nodes.CLIENT_JVM_FLAGS), flags=flags, jmx=JMX_PORT))
    (dst / "bin" / "entrypoint.py").write_text(entrypoint_script())
    for f in (dst / "bin").iterdir():
        f.chmod(0o755)
    for f in [*(dst / "conf").iterdir(), dst / "classpath"]:
        f.chmod(0o644)


def ensure_cassandra_image(progress: Progress | None = None) -> str:
    """``localhost/elastore-cassandra:<version>-<content hash>`` (also tagged
    ``localhost/elastore-cassandra:<version>``): Cassandra from the lab's Maven jars under
    /opt/cassandra on the java base, ``nodetool`` on PATH, the JMX exporter on
    :data:`EXPORTER_PORT` with the lab's configuration (what the operator's default queries
    read), and /opt/cassandra/bin/entrypoint.py for a StatefulSet pod. Runs as uid 999;
    writes only /var/lib/cassandra and /tmp."""
    from elastore.lab.cassandra.nodes import CASSANDRA_VERSION

    say = _say(progress)
    base = ensure_base("java", progress=say)
    ctx = Path(tempfile.mkdtemp(prefix="cassandra-ctx.", dir=images_dir()))
    try:
        _cassandra_tree(ctx / "cassandra")
        (ctx / "Containerfile").write_text(CASSANDRA_CONTAINERFILE.format(base=base))
        content = _hash(_hash_tree(ctx), base)
        ref = f"localhost/elastore-cassandra:{CASSANDRA_VERSION}-{content[:12]}"
        plain = f"localhost/elastore-cassandra:{CASSANDRA_VERSION}"
        if image_exists(ref):
            _run(["podman", "tag", ref, plain], "podman tag")
            return ref
        _build(ctx, [ref, plain], "the Cassandra image", say,
               labels={"io.elastore.content": content})
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    _prune("localhost/elastore-cassandra", CASSANDRA_VERSION)
    return ref


def cassandra_statefulset(name: str, ns: str, replicas: int, storage_class: str, size: str,
                          image: str, *, heap: str = "256M", cluster: str | None = None,
                          jvm_opts: str = "") -> str:
    """The YAML of a Cassandra cluster of :func:`ensure_cassandra_image` pods: a headless
    Service, a ServiceAccount allowed to read pods (the entrypoint reads ``<name>-0``'s IP:
    no DNS in the test cluster), and a StatefulSet the operator may manage (the
    ``elastore.io/managed`` label), scraped on :data:`EXPORTER_PORT`. The readiness probe
    is an exec probe (the kubelet runs outside the pod network): the CQL port is open.
    ``jvm_opts``: extra JVM flags of the nodes (``JVM_EXTRA_OPTS``)."""
    app = {"app": name}
    probe = "exec 3<>/dev/tcp/$POD_IP/9042"
    docs = [{
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "labels": app},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": app,
                 "ports": [{"name": "cql", "port": 9042}, {"name": "storage", "port": 7000},
                           {"name": "metrics", "port": EXPORTER_PORT}]},
    }, {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": ns},
    }, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": f"{name}-seeds", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"{name}-seeds", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": f"{name}-seeds"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    }, {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"elastore.io/managed": "true", **app}},
        "spec": {
            "replicas": replicas, "serviceName": name,
            "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": app},
            "template": {
                "metadata": {"labels": app, "annotations": {
                    "prometheus.io/scrape": "true",
                    "prometheus.io/port": str(EXPORTER_PORT),
                    "prometheus.io/path": "/metrics"}},
                "spec": {
                    "serviceAccountName": name,
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {"runAsUser": CASSANDRA_UID,
                                        "runAsGroup": CASSANDRA_UID,
                                        "fsGroup": CASSANDRA_UID},
                    "containers": [{
                        "name": "cassandra", "image": image, "imagePullPolicy": "Never",
                        "env": [
                            {"name": "POD_IP", "valueFrom": {
                                "fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAME", "valueFrom": {
                                "fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {
                                "fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "CLUSTER_NAME", "value": cluster or name},
                            {"name": "HEAP_SIZE", "value": heap},
                            *([{"name": "JVM_EXTRA_OPTS", "value": jvm_opts}] if jvm_opts
                              else []),
                        ],
                        "ports": [{"name": "cql", "containerPort": 9042},
                                  {"name": "storage", "containerPort": 7000},
                                  {"name": "metrics", "containerPort": EXPORTER_PORT}],
                        "readinessProbe": {
                            "exec": {"command": ["bash", "-c", probe]},
                            "initialDelaySeconds": 10, "periodSeconds": 5,
                            "timeoutSeconds": 3, "failureThreshold": 3},
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/cassandra"}],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                         "resources": {"requests": {"storage": size}}},
            }],
        },
    }]
    # one List: kubectl reads a JSON stream as one document ("---" between JSON objects
    # is a parse error)
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=1) + "\n"


# --------------------------------------------------------------------------------------------
# into the kubelet's containerd
# --------------------------------------------------------------------------------------------
def load_into_containerd(image: str, address: str, namespace: str = "k8s.io",
                         progress: Progress | None = None) -> None:
    """Copy ``image`` from podman into the containerd at ``address`` (its socket), in
    ``namespace`` (the CRI's is k8s.io), unpacked, under the same name."""
    say = _say(progress)
    t0 = time.monotonic()
    fd, tmp = tempfile.mkstemp(prefix="image.", suffix=".tar", dir=images_dir())
    os.close(fd)
    os.unlink(tmp)  # podman save refuses to overwrite
    try:
        _run(["podman", "save", "--format", "docker-archive", "-o", tmp, image],
             f"podman save {image}", timeout_s=900)
        _run(["ctr", "--address", address, "-n", namespace, "images", "import", tmp],
             f"ctr images import {image}", timeout_s=900)
    finally:
        Path(tmp).unlink(missing_ok=True)
    say(f"loaded {image} into containerd {address} ({namespace}) in "
        f"{time.monotonic() - t0:.0f} s")


def image_size_mb(ref: str) -> float:
    out = _run(["podman", "image", "inspect", "--format", "{{.Size}}", ref], "podman inspect")
    return int(out.strip()) / 1e6


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "elastore"
    todo = {"elastore": [ensure_elastore_image], "cassandra": [ensure_cassandra_image],
            "sandbox": [ensure_sandbox_image],
            "all": [ensure_elastore_image, ensure_cassandra_image, ensure_sandbox_image]}
    if what not in todo or len(argv) > 1:
        print("usage: python -m testbed.images [elastore|cassandra|sandbox|all]",
              file=sys.stderr)
        return 2

    def say(m: str) -> None:
        print(m, flush=True)

    try:
        for f in todo[what]:
            t0 = time.monotonic()
            ref = f(say)
            print(f"{ref} ({image_size_mb(ref):.0f} MB) ready in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    except ElastoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
