"""Real Cassandra 5.0 nodes from Maven Central jars, on 127.0.0.x inside a lab namespace.

Recipe (../shared/LAB-NOTES.md): Java 17, the jars of ``cassandra-all`` copied by Maven
(cached by version), ``CassandraDaemon`` with Java 17's module flags, one JMX port per
node, the Prometheus JMX exporter as a java agent, and short ring delays for speed.
nodetool is ``org.apache.cassandra.tools.NodeTool`` on the same class path, run inside the
namespace (JMX listens on the namespace's 127.0.0.1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from elastore.errors import ElastoreError
from elastore.lab import netns
from elastore.lab.bindsrc import ensure_bindsrc
from elastore.lab.cgroups import Group
from elastore.lab.host import cache_dir

CASSANDRA_VERSION = "5.0.4"
JMX_EXPORTER_VERSION = "1.0.1"
JMX_BASE_PORT = 7200  # node N listens for JMX on 7200 + N (namespace localhost)
EXPORTER_PORT = 9500  # node N's metrics on 127.0.0.N:9500

# Java 17 module access Cassandra 5.0 needs (its jvm17-server/-clients options)
_EXPORTS = ["java.base/jdk.internal.misc", "java.base/jdk.internal.ref", "java.base/sun.nio.ch",
            "java.management.rmi/com.sun.jmx.remote.internal.rmi", "java.rmi/sun.rmi.registry",
            "java.rmi/sun.rmi.server", "java.sql/java.sql", "java.base/java.lang.ref",
            "jdk.unsupported/sun.misc", "jdk.compiler/com.sun.tools.javac.file",
            "jdk.attach/sun.tools.attach"]
_OPENS = ["java.base/java.lang.module", "java.base/jdk.internal.loader",
          "java.base/jdk.internal.ref", "java.base/jdk.internal.reflect",
          "java.base/jdk.internal.math", "java.base/jdk.internal.module",
          "java.base/jdk.internal.util.jar", "jdk.management/com.sun.management.internal",
          "java.base/sun.nio.ch", "java.base/java.io", "java.base/java.lang.reflect",
          "jdk.compiler/com.sun.tools.javac", "java.base/java.lang", "java.base/java.util",
          "java.base/java.util.concurrent", "java.base/java.util.concurrent.atomic",
          "java.base/java.math", "java.base/java.net"]
JAVA_MODULE_FLAGS = ([f"--add-exports={m}=ALL-UNNAMED" for m in _EXPORTS]
                     + [f"--add-opens={m}=ALL-UNNAMED" for m in _OPENS]
                     + ["-Djdk.attach.allowAttachSelf=true",
                        "-Dio.netty.tryReflectionSetAccessible=true"])

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.elastore</groupId><artifactId>lab-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.cassandra</groupId><artifactId>cassandra-all</artifactId>
      <version>{cassandra}</version></dependency>
    <dependency><groupId>io.prometheus.jmx</groupId><artifactId>jmx_prometheus_javaagent</artifactId>
      <version>{exporter}</version></dependency>
  </dependencies>
</project>
"""

# only what the lab, BwMan and the profiler read: a full dump is ~57,000 series per node.
# The keyspaces' ReadLatency/WriteLatency counts are each node's *local* reads and writes
# (as a replica, not as a coordinator): the per-node work the skew lab measures
EXPORTER_CONFIG = """lowercaseOutputName: true
includeObjectNames:
  - "org.apache.cassandra.metrics:type=Streaming,*"
  - "org.apache.cassandra.metrics:type=ClientRequest,*"
  - "org.apache.cassandra.metrics:type=Storage,*"
  - "org.apache.cassandra.metrics:type=Compaction,*"
  - "org.apache.cassandra.metrics:type=ThreadPools,path=request,*"
  - "org.apache.cassandra.metrics:type=Keyspace,name=ReadLatency,*"
  - "org.apache.cassandra.metrics:type=Keyspace,name=WriteLatency,*"
rules:
  - pattern: ".*"
"""


#: a second JMX exporter on each node (``lab up --example-exporter``, port
#: EXAMPLE_EXPORTER_PORT) with the naming of the JMX exporter's own example configuration
#: for Cassandra (prometheus/jmx_exporter@4b843c693 examples/cassandra.yml, lines 1-2, 64-94):
#: what the ``jmx-exporter-example`` preset reads, restated for the MBeans it reads (the
#: example's whitelist has more), so that the preset is tested against the real exporter
_BEAN = r"org.apache.cassandra.metrics<type=(\S*)(?:, ((?!scope)\S*)=(\S*))?(?:, scope=(\S*))?"
_LABELS = '  labels:\n    "$1": "$4"\n    "$2": "$3"\n'
EXAMPLE_EXPORTER_CONFIG = (
    "lowercaseOutputLabelNames: true\nlowercaseOutputName: true\nincludeObjectNames:\n"
    '  - "org.apache.cassandra.metrics:type=Keyspace,name=ReadLatency,*"\n'
    '  - "org.apache.cassandra.metrics:type=Keyspace,name=WriteLatency,*"\n'
    '  - "org.apache.cassandra.metrics:type=Storage,name=Load,*"\n'
    "rules:\n"
    f"- pattern: {_BEAN}, name=((?:.+)?(?:Latency))><>Count\n"
    f"  name: cassandra_$1_$5_seconds_count\n  type: UNTYPED\n{_LABELS}"
    f"- pattern: {_BEAN}, name=(.+)><>Count\n"
    f"  name: cassandra_$1_$5_count\n  type: UNTYPED\n{_LABELS}"
    f"- pattern: {_BEAN}, name=((?:.+)?(?:Latency))><>(\\d+)thPercentile\n"
    f"  name: cassandra_$1_$5_seconds\n  type: GAUGE\n{_LABELS}"
    '    quantile: "0.$6"\n  valueFactor: 0.000001\n')
EXAMPLE_EXPORTER_PORT = 9501


def streaming_outgoing_bytes(ns: str, node: NodeSpec) -> float | None:
    """Total bytes this node has streamed out (its exporter), or None if unreachable."""
    res = subprocess.run(netns.command(ns, ["curl", "-s", "--max-time", "2",
                                            f"http://{node.metrics}/metrics"]),
                         capture_output=True, text=True, check=False)
    for line in res.stdout.splitlines():
        if line.startswith("org_apache_cassandra_metrics_streaming_count") and \
                'name="TotalOutgoingBytes"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def ensure_jars(version: str = CASSANDRA_VERSION) -> Path:
    """The directory of Cassandra's jars (and the JMX exporter), fetched once by Maven."""
    lib = cache_dir() / f"cassandra-{version}" / "lib"
    marker = lib / ".complete"
    if marker.exists():
        return lib
    if shutil.which("mvn") is None:
        raise ElastoreError("Maven (mvn) is needed to fetch the Cassandra jars")
    work = lib.parent
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(POM.format(cassandra=version, exporter=JMX_EXPORTER_VERSION))
    tmp = work / "lib.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    res = subprocess.run(["mvn", "-q", "-B", "-f", str(work / "pom.xml"),
                          "dependency:copy-dependencies", f"-DoutputDirectory={tmp}"],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise ElastoreError("fetching the Cassandra jars with Maven failed: "
                            + (res.stdout + res.stderr).strip()[-800:])
    shutil.rmtree(lib, ignore_errors=True)
    tmp.rename(lib)
    marker.touch()
    return lib

#: a client JVM (nodetool, the example exporter) lives for seconds: C1 alone and the serial
#: collector cost nodetool about 40 % less CPU than the server compiler and G1 (measured:
#: docs/testing.md). The JVM's own warnings go to stderr, never into output we parse.
CLIENT_JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xlog:disable",
                    "-Xlog:all=warning:stderr"]
#: set to 1, the lab's Cassandra nodes compile with C1 alone and collect with the serial
#: collector: a lab that lives for minutes boots with about 30 % less CPU and serves a load
#: with about 30 % less (C1; the serial collector about 8 % more on a 256-MiB heap;
#: measured: docs/testing.md), at a peak throughput that is not production's. ``make
#: test`` sets it for its mechanisms; the measurements (``make lab-check``) run Cassandra's
#: G1 and the server compiler.
QUICK_JIT_ENV = "ELASTORE_LAB_QUICK_JIT"
#: the quick nodes' JVM flags (with QUICK_JIT_ENV=1)
QUICK_NODE_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def node_jit_flags() -> list[str]:
    """The lab nodes' JVM flags beyond Cassandra's defaults: :data:`QUICK_NODE_FLAGS` when
    :data:`QUICK_JIT_ENV` is 1, else none (G1, and Java's tiered JIT up to the server
    compiler)."""
    return list(QUICK_NODE_FLAGS) if os.environ.get(QUICK_JIT_ENV) == "1" else []


def names_a_collector(flags: list[str]) -> bool:
    """Whether ``flags`` choose the JVM's collector (``-XX:+Use...GC``): a node then runs
    that one instead of Cassandra's G1 (two would stop the JVM at its start)."""
    return any(f.startswith("-XX:+Use") and f.endswith("GC") for f in flags)


def classpath(lib: Path) -> str:
    return ":".join(str(p) for p in sorted(lib.glob("*.jar")) if "jmx_prometheus" not in p.name)


def exporter_jar(lib: Path) -> Path:
    found = sorted(lib.glob("jmx_prometheus_javaagent-*.jar"))
    if not found:
        raise ElastoreError(f"no JMX exporter jar in {lib}")
    return found[0]


@dataclass
class NodeSpec:
    n: int  # 1-based; the node listens on 127.0.0.n (or ``addr``)
    root: Path  # its directory: data, logs, config
    addr: str | None = None  # a namespace of its own behind a veth: its pod IP

    @property
    def ip(self) -> str:
        return self.addr or f"127.0.0.{self.n}"

    @property
    def jmx_port(self) -> int:
        return JMX_BASE_PORT + self.n

    @property
    def metrics(self) -> str:
        return f"{self.ip}:{EXPORTER_PORT}"

    @property
    def example_metrics(self) -> str:
        """The second exporter's address (``lab up --example-exporter``)."""
        return f"{self.ip}:{EXAMPLE_EXPORTER_PORT}"


#: Murmur3Partitioner's tokens: signed 64-bit
MIN_TOKEN, MAX_TOKEN = -(2**63), 2**63 - 1


def token_config(initial_token: int | None) -> str:
    """The token lines of cassandra.yaml: vnodes (16 per node, allocated for RF 2) unless
    ``initial_token`` is given, then one token per node at exactly that value."""
    if initial_token is None:
        return "num_tokens: 16\nallocate_tokens_for_local_replication_factor: 2\n"
    if not MIN_TOKEN <= initial_token <= MAX_TOKEN:
        raise ElastoreError(f"initial_token {initial_token} is outside Murmur3's "
                            f"[{MIN_TOKEN}, {MAX_TOKEN}]")
    return f"num_tokens: 1\ninitial_token: {initial_token}\n"


def even_tokens(n: int) -> list[int]:
    """``n`` single tokens spaced evenly around Murmur3's ring (the classic token
    generator's: node i at -2^63 + i * 2^64 / n), so each node's primary range is 1/n."""
    if n < 1:
        raise ElastoreError(f"even tokens need at least one node, got {n}")
    return [MIN_TOKEN + (i * 2**64) // n for i in range(n)]


def write_config(node: NodeSpec, seeds: str, initial_token: int | None = None,
                 bootstrap: bool = True) -> Path:
    """cassandra.yaml, logback.xml and the exporter config for one node; with
    ``initial_token``, the node has that one token (:func:`token_config`). Without
    ``bootstrap`` the node joins without streaming (``auto_bootstrap: false``): only for a
    cluster that holds no data yet."""
    r = node.root
    for d in ("data", "commitlog", "saved_caches", "hints", "cdc_raw", "logs"):
        (r / d).mkdir(parents=True, exist_ok=True)
    join = "" if bootstrap else "auto_bootstrap: false\n"
    # a single-token lab measures how the ring routes reads: the dynamic snitch would send
    # a replica's reads elsewhere whenever it looks slower, and on a shared 2-core machine
    # that is the other work's noise (a run beside a Swift lab: 243 of node 1's 989 reads
    # served by node 2, none of them sent there by the client)
    snitch = "" if initial_token is None else "dynamic_snitch: false\n"
    yaml = f"""cluster_name: elastore-lab
{token_config(initial_token)}{join}{snitch}partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seeds}"
listen_address: {node.ip}
rpc_address: {node.ip}
native_transport_port: 9042
storage_port: 7000
start_native_transport: true
data_file_directories: [{r / 'data'}]
commitlog_directory: {r / 'commitlog'}
saved_caches_directory: {r / 'saved_caches'}
hints_directory: {r / 'hints'}
cdc_raw_directory: {r / 'cdc_raw'}
commitlog_sync: periodic
commitlog_sync_period: 10000ms
concurrent_reads: 8
concurrent_writes: 8
concurrent_compactors: 1
auto_snapshot: false
# stream whole files through the ordinary, throttled path so setstreamthroughput applies
stream_entire_sstables: false
read_request_timeout: 5000ms
write_request_timeout: 5000ms
"""
    (r / "cassandra.yaml").write_text(yaml)
    (r / "logback.xml").write_text(f"""<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{r / 'logs' / 'system.log'}</file>
    <encoder><pattern>%d %-5level [%thread] %logger{{1}} %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
""")
    (r / "exporter.yaml").write_text(EXPORTER_CONFIG)
    # the standalone exporter reads the node's JMX port (local to the node's namespace)
    (r / "exporter-example.yaml").write_text(f"hostPort: 127.0.0.1:{node.jmx_port}\n"
                                             + EXAMPLE_EXPORTER_CONFIG)
    return r / "cassandra.yaml"


def node_command(node: NodeSpec, lib: Path, heap: str, ring_delay_ms: int = 3000,
                 load_broadcast_ms: int = 0) -> list[str]:
    """``load_broadcast_ms``: how often the node gossips its Load (0: Cassandra's 60 s);
    ``nodetool status`` shows the other nodes' Load as of their last broadcast."""
    r = node.root
    broadcast = [f"-Dcassandra.broadcast_interval_ms={load_broadcast_ms}"] if \
        load_broadcast_ms > 0 else []
    return [
        "java", f"-Xms{heap}", f"-Xmx{heap}",
        *([] if names_a_collector(extra := node_jit_flags()) else ["-XX:+UseG1GC"]),
        "-Xss512k", *extra,
        *JAVA_MODULE_FLAGS,
        f"-javaagent:{exporter_jar(lib)}={node.metrics}:{r / 'exporter.yaml'}",
        f"-Dcassandra.config=file://{r / 'cassandra.yaml'}",
        f"-Dcassandra.storagedir={r}", f"-Dcassandra.logdir={r / 'logs'}",
        f"-Dlogback.configurationFile={r / 'logback.xml'}",
        f"-Dcassandra.jmx.local.port={node.jmx_port}",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        f"-Dcassandra.ring_delay_ms={ring_delay_ms}",
        "-Dcassandra.superuser_setup_delay_ms=0", "-Dchronicle.analytics.disable=true",
        # `lab profile` rebuilds nodes repeatedly to keep data streaming; Cassandra 5
        # refuses a second rebuild of a node unless its earlier progress may be reset
        "-Dcassandra.reset_bootstrap_progress=true",
        "-Dcassandra-foreground=yes", *broadcast,
        "-cp", classpath(lib), "org.apache.cassandra.service.CassandraDaemon",
    ]


def ensure_exporter_server() -> Path:
    """The JMX exporter's standalone HTTP server jar (``jmx_prometheus_httpserver``, the
    same version as the agent), fetched once by Maven. A second exporter for a node runs
    as this process: two javaagents in one JVM share the default registry, and the second
    one's JVM metrics are a duplicate registration on which the agent exits the JVM."""
    d = cache_dir() / f"jmx-httpserver-{JMX_EXPORTER_VERSION}"
    jar = d / f"jmx_prometheus_httpserver-{JMX_EXPORTER_VERSION}.jar"
    if jar.exists():
        return jar
    if shutil.which("mvn") is None:
        raise ElastoreError("Maven (mvn) is needed to fetch the JMX exporter's HTTP server")
    d.mkdir(parents=True, exist_ok=True)
    (d / "pom.xml").write_text(EXPORTER_SERVER_POM.format(exporter=JMX_EXPORTER_VERSION))
    tmp = d / "out.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    res = subprocess.run(["mvn", "-q", "-B", "-f", str(d / "pom.xml"),
                          "dependency:copy-dependencies", f"-DoutputDirectory={tmp}"],
                         capture_output=True, text=True, check=False)
    got = tmp / jar.name
    if res.returncode != 0 or not got.exists():
        raise ElastoreError("fetching the JMX exporter's HTTP server with Maven failed: "
                            + (res.stdout + res.stderr).strip()[-800:])
    got.replace(jar)
    shutil.rmtree(tmp, ignore_errors=True)
    return jar


EXPORTER_SERVER_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.elastore</groupId><artifactId>jmx-httpserver</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>io.prometheus.jmx</groupId>
      <artifactId>jmx_prometheus_httpserver</artifactId><version>{exporter}</version></dependency>
  </dependencies>
</project>
"""


def start_example_exporter(ns: str, node: NodeSpec) -> subprocess.Popen[bytes]:
    """The example-naming exporter of ``node``: the standalone server in the node's
    namespace, serving ``node.example_metrics`` from the node's JMX port."""
    log = (node.root / "logs" / "exporter-example.log").open("ab")
    return subprocess.Popen(netns.command(ns, [
        "java", "-Xmx64m", *CLIENT_JVM_FLAGS, "-jar", str(ensure_exporter_server()),
        node.example_metrics, str(node.root / "exporter-example.yaml")]), stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)


def start_node(ns: str, node: NodeSpec, lib: Path, heap: str, group: Group | None = None,
               cpus: list[int] | None = None, load_broadcast_ms: int = 0
               ) -> subprocess.Popen[bytes]:
    """Start the node inside ``ns``; ``ip netns exec`` execs java, so the PID is java's.
    Its outgoing connections leave from its own address
    (:func:`elastore.lab.bindsrc.ensure_bindsrc`). With ``group``, the process joins that
    cgroup before it execs (so all of it is counted); with ``cpus``, it runs on those CPUs
    only."""
    log = (node.root / "logs" / "stdout.log").open("ab")
    env = dict(os.environ, LD_PRELOAD=str(ensure_bindsrc()), ELASTORE_BIND_IP=node.ip)

    def join() -> None:
        if group is not None:
            group.add(os.getpid())
        if cpus:
            os.sched_setaffinity(0, cpus)

    return subprocess.Popen(netns.command(ns, node_command(
        node, lib, heap, load_broadcast_ms=load_broadcast_ms)), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, env=env,
                            preexec_fn=join)


def nodetool_archive(lib: Path) -> Path:
    """nodetool's class-data-sharing archive (JDK 13+'s dynamic AppCDS) beside the jars: the
    classes one nodetool run loaded, mapped by later runs instead of parsed again (about a
    third less CPU a call, measured beside :data:`CLIENT_JVM_FLAGS`)."""
    return lib.parent / "nodetool.jsa"


def _archive_flags(lib: Path) -> tuple[list[str], Path | None]:
    """Map the archive if there is one; else write one at this run's exit, to a file of its
    own (renamed into place after: concurrent first runs never share a half-written one).
    A stale archive (another JVM, other jars) is refused by the JVM, which then runs without
    it and warns on stderr."""
    jsa = nodetool_archive(lib)
    if jsa.exists():
        return [f"-XX:SharedArchiveFile={jsa}"], None
    tmp = jsa.with_name(f"{jsa.name}.{uuid.uuid4().hex}.partial")
    return [f"-XX:ArchiveClassesAtExit={tmp}"], tmp


def nodetool_argv(lib: Path, jmx_port: int, *args: str, archive: list[str] | None = None
                  ) -> list[str]:
    """The java command of nodetool ``args`` against the JMX port ``jmx_port`` on
    127.0.0.1; ``archive``: class-data-sharing flags (:func:`run_archived`)."""
    return ["java", "-Xmx128m", *CLIENT_JVM_FLAGS, *(archive or []), *JAVA_MODULE_FLAGS,
            "-cp", classpath(lib), "-Dlogback.configurationFile=/dev/null",
            "org.apache.cassandra.tools.NodeTool", "-h", "127.0.0.1", "-p", str(jmx_port),
            *args]


def nodetool_command(ns: str, lib: Path, jmx_port: int, *args: str,
                     archive: list[str] | None = None) -> list[str]:
    """nodetool ``args`` against the node whose JMX answers on ``jmx_port`` in ``ns``."""
    return netns.command(ns, nodetool_argv(lib, jmx_port, *args, archive=archive))


def run_archived(lib: Path, argv_for: Callable[[list[str]], list[str]], timeout: float
                 ) -> subprocess.CompletedProcess[str]:
    """Run the nodetool command ``argv_for(archive flags)`` with nodetool's archive
    (:func:`nodetool_archive`): mapped when there is one, else written by this run and put
    in place only if the JVM ended normally (a killed one may leave half an archive)."""
    flags, written = _archive_flags(lib)
    try:
        res = subprocess.run(argv_for(flags), capture_output=True, text=True, timeout=timeout,
                             check=False)
        if written is not None and res.returncode == 0 and written.exists():
            written.replace(nodetool_archive(lib))
        return res
    finally:
        if written is not None:
            written.unlink(missing_ok=True)


def nodetool(ns: str, lib: Path, jmx_port: int, *args: str, timeout: float = 120
             ) -> subprocess.CompletedProcess[str]:
    return run_archived(lib, lambda flags: nodetool_command(ns, lib, jmx_port, *args,
                                                            archive=flags), timeout)

