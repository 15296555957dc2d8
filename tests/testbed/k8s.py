"""A real Kubernetes control plane on 127.0.0.1, built from the Go module proxy.

Nothing in PyPI, npm or Debian ships a usable kube-apiserver, so :func:`ensure_binaries`
builds kube-apiserver, kube-controller-manager and kube-scheduler (k8s.io/kubernetes),
etcd and kwok with the machine's Go, once, into a cache directory keyed by their versions
(``$ELASTORE_CACHE/k8s/<versions>/bin``, default ``~/.cache/elastore``). A second call costs
nothing. Building from empty caches takes 10-20 min on 2 cores and ~2 GB of RAM at the
apiserver's link; the Go build and module caches then hold ~5 GB.

k8s.io/kubernetes cannot be ``go install``-ed: its go.mod replaces every ``k8s.io/<x>`` with
``./staging/src/k8s.io/<x>``. A scratch module requires it and replaces each of those with
the published ``k8s.io/<x> v0.<minor>.<patch>`` instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastore.errors import ElastoreError

log = logging.getLogger("elastore.k8s")

K8S_VERSION = "1.36.3"
ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"
# the kubelet runs the real node (testbed/node.py): v1.36.3 like the control plane, whose kubelet
# still runs on cgroup v1 when told `failCgroupV1: false` (these machines mount cgroup v1)
KUBE_CMDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")
BINARIES = (*KUBE_CMDS, "etcd", "kwok")


def cache_root() -> Path:
    return Path(os.environ.get("ELASTORE_CACHE") or Path.home() / ".cache" / "elastore")


def bin_dir() -> Path:
    return cache_root() / "k8s" / f"k8s-{K8S_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}" \
        / "bin"


def _go_env() -> dict[str, str]:
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=mod")
    return env


def _go() -> str:
    for cand in (shutil.which("go"), "/usr/local/go/bin/go"):
        if cand and Path(cand).exists():
            return cand
    raise ElastoreError("no Go toolchain found (need go >= 1.24 on PATH or in /usr/local/go): "
                        "the Kubernetes test binaries are built from the Go module proxy")


def _run(argv: list[str], cwd: Path, what: str, timeout_s: float = 3600) -> str:
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=cwd, env=_go_env(), capture_output=True, text=True,
                         timeout=timeout_s)
    if res.returncode != 0:
        raise ElastoreError(f"{what} failed ({' '.join(argv[:3])} ...): "
                            f"{(res.stderr or res.stdout).strip()[-1500:]}")
    log.info("%s: %.0f s", what, time.monotonic() - t0)
    return res.stdout


def staging_replaces(gomod: str, version: str) -> list[str]:
    """``replace`` lines mapping every staging module of k8s.io/kubernetes's go.mod to its
    published v0.x release. Pure."""
    minor_patch = version.split(".", 1)[1]
    mods = re.findall(r"^\s*(?:replace\s+)?(k8s\.io/[\w.-]+)\s+=>\s+\./staging/src/\S+",
                      gomod, flags=re.MULTILINE)
    if not mods:
        raise ElastoreError("k8s.io/kubernetes's go.mod has no staging replaces: "
                            "unexpected layout")
    return [f"replace {m} => {m} v0.{minor_patch}" for m in sorted(set(mods))]


def _go_directives(gomod: str) -> list[str]:
    return [ln.strip() for ln in gomod.splitlines()
            if re.match(r"^\s*(go|godebug)\s", ln) and "=>" not in ln]


def _build_kubernetes(go: str, work: Path, out: Path, cmds: tuple[str, ...]) -> None:
    mod = work / "k8s"
    mod.mkdir()
    info = json.loads(_run([go, "mod", "download", "-json",
                            f"k8s.io/kubernetes@v{K8S_VERSION}"], work,
                           "downloading k8s.io/kubernetes"))
    upstream = Path(info["GoMod"]).read_text()
    lines = ["module elastore.local/k8sbuild", "", *_go_directives(upstream), "",
             f"require k8s.io/kubernetes v{K8S_VERSION}", "",
             *staging_replaces(upstream, K8S_VERSION), ""]
    (mod / "go.mod").write_text("\n".join(lines))
    (mod / "tools.go").write_text(
        "//go:build tools\n\npackage tools\n\nimport (\n"
        + "".join(f'\t_ "k8s.io/kubernetes/cmd/{c}"\n' for c in cmds) + ")\n")
    _run([go, "mod", "tidy"], mod, "resolving the Kubernetes modules")
    minor = K8S_VERSION.split(".")[1]
    ldflags = (f"-s -w -X k8s.io/component-base/version.gitVersion=v{K8S_VERSION} "
               f"-X k8s.io/component-base/version.gitMajor=1 "
               f"-X k8s.io/component-base/version.gitMinor={minor}")
    for c in cmds:
        log.info("building %s v%s (several minutes) ...", c, K8S_VERSION)
        _run([go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out / c),
              f"k8s.io/kubernetes/cmd/{c}"], mod, f"building {c}")


def _build_etcd(go: str, work: Path, out: Path) -> None:
    mod = work / "etcd"
    mod.mkdir()
    (mod / "go.mod").write_text("module elastore.local/etcdbuild\n\ngo 1.24\n\n"
                                f"require go.etcd.io/etcd/server/v3 v{ETCD_VERSION}\n")
    (mod / "tools.go").write_text('//go:build tools\n\npackage tools\n\n'
                                  'import _ "go.etcd.io/etcd/server/v3"\n')
    _run([go, "mod", "tidy"], mod, "resolving etcd")
    log.info("building etcd v%s ...", ETCD_VERSION)
    _run([go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "etcd"),
          "go.etcd.io/etcd/server/v3"], mod, "building etcd")


def _build_kwok(go: str, work: Path, out: Path) -> None:
    log.info("building kwok v%s ...", KWOK_VERSION)
    env_bin = work / "kwok-bin"
    env_bin.mkdir()
    argv = [go, "install", "-trimpath", "-ldflags", "-s -w",
            f"sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}"]
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=work, env=dict(_go_env(), GOBIN=str(env_bin),
                                                  GOFLAGS=""),
                         capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        raise ElastoreError(f"building kwok failed: {res.stderr.strip()[-1500:]}")
    shutil.move(str(env_bin / "kwok"), out / "kwok")
    log.info("building kwok: %.0f s", time.monotonic() - t0)


HELM_VERSION = "3.19.0"


def ensure_helm(progress: Callable[[str], None] | None = None) -> Path:
    """helm, built once from the Go module proxy into the cache (``go install``, ~2.5 min)."""
    out = cache_root() / "k8s" / f"helm-{HELM_VERSION}" / "helm"
    if out.is_file():
        return out
    say = progress or (lambda m: log.info("%s", m))
    go = _go()
    say(f"building helm v{HELM_VERSION} into {out.parent} (once; ~3 min on 2 cores)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="helm.", dir=out.parent))
    try:
        res = subprocess.run([go, "install", "-trimpath", "-ldflags", "-s -w",
                              f"helm.sh/helm/v3/cmd/helm@v{HELM_VERSION}"], cwd=tmp,
                             env=dict(_go_env(), GOBIN=str(tmp), GOFLAGS=""),
                             capture_output=True, text=True, timeout=3600)
        if res.returncode != 0:
            raise ElastoreError(f"building helm failed: {res.stderr.strip()[-1500:]}")
        (tmp / "helm").rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def kwok_stages_dir() -> Path:
    """kwok's shipped Stage manifests (in its module source, downloaded by the build)."""
    go = _go()
    res = subprocess.run([go, "mod", "download", "-json",
                          f"sigs.k8s.io/kwok@v{KWOK_VERSION}"], env=_go_env(),
                         capture_output=True, text=True, cwd=tempfile.gettempdir())
    if res.returncode != 0:
        raise ElastoreError(f"cannot locate kwok's module source: {res.stderr.strip()}")
    d = Path(json.loads(res.stdout)["Dir"]) / "kustomize" / "stage"
    if not d.is_dir():
        raise ElastoreError(f"kwok's stage manifests are missing from {d}")
    return d


#: cass-operator, whose CassandraDatacenter CRD the datacenter suite installs. The newest
#: release the module proxy and the checksum database both serve here: v1.23.0 to v1.26.0
#: are served but absent from sum.golang.org, v1.27.0 is refused (2026-11).
CASS_OPERATOR_VERSION = "1.22.4"
CASSDC_CRD = "config/crd/bases/cassandra.datastax.com_cassandradatacenters.yaml"


def cass_operator_crd() -> Path:
    """cass-operator's own CassandraDatacenter CRD, from its module source (the Go module
    proxy, verified against the checksum database; cached by Go's module cache)."""
    go = _go()
    res = subprocess.run([go, "mod", "download", "-json",
                          f"github.com/k8ssandra/cass-operator@v{CASS_OPERATOR_VERSION}"],
                         env=dict(_go_env(), GOFLAGS=""), capture_output=True, text=True,
                         cwd=tempfile.gettempdir(), timeout=900)
    if res.returncode != 0:
        raise ElastoreError(f"cannot download cass-operator v{CASS_OPERATOR_VERSION}: "
                            f"{(res.stdout + res.stderr).strip()[-800:]}")
    crd = Path(json.loads(res.stdout)["Dir"]) / CASSDC_CRD
    if not crd.is_file():
        raise ElastoreError(f"cass-operator's CassandraDatacenter CRD is missing from {crd}")
    return crd


def ensure_binaries(progress: Callable[[str], None] | None = None) -> Path:
    """The directory holding all of :data:`BINARIES`, building what is missing."""
    out = bin_dir()
    missing = [b for b in BINARIES if not (out / b).is_file()]
    if not missing:
        return out
    say = progress or (lambda m: log.info("%s", m))
    go = _go()
    say(f"building the Kubernetes test binaries into {out} (once per version; 10-20 min "
        f"on 2 cores): {', '.join(missing)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="bin.", dir=out.parent))
    work = Path(tempfile.mkdtemp(prefix="elastore-k8s-build."))
    try:
        if out.is_dir():  # keep what an interrupted build already finished
            for b in BINARIES:
                if (out / b).is_file():
                    shutil.copy2(out / b, staging / b)
        todo = [b for b in BINARIES if not (staging / b).is_file()]
        kube = tuple(c for c in KUBE_CMDS if c in todo)
        if kube:
            _build_kubernetes(go, work, staging, kube)
            say(f"built {', '.join(kube)}")
        if "etcd" in todo:
            _build_etcd(go, work, staging)
            say("built etcd")
        if "kwok" in todo:
            _build_kwok(go, work, staging)
            say("built kwok")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)  # all or nothing: a killed build leaves no half directory
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
    return out


# --------------------------------------------------------------------------------------------
# running them: a control plane on 127.0.0.1 for a test session
# --------------------------------------------------------------------------------------------
FAKE_NODE = "kwok-node-0"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                         check=False)
    if res.returncode != 0:
        raise ElastoreError(f"openssl {args[0]} failed: {res.stderr.strip()[-500:]}")


def make_pki(d: Path) -> None:
    """A CA, the API server's certificate (127.0.0.1, localhost), an admin client certificate
    in ``system:masters``, kwok's serving certificate and the service-account key pair."""
    d.mkdir(parents=True, exist_ok=True)
    if (d / "done").exists():
        return
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "30", "-subj", "/CN=elastore-test-ca", cwd=d)

    def leaf(name: str, subj: str, sans: str | None, usage: str) -> None:
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", subj, cwd=d)
        ext = [f"extendedKeyUsage={usage}", "keyUsage=digitalSignature,keyEncipherment"]
        if sans:
            ext.append(f"subjectAltName={sans}")
        (d / f"{name}.ext").write_text("\n".join(ext) + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "30", "-extfile",
                 f"{name}.ext", cwd=d)

    sans = "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default"
    leaf("apiserver", "/CN=kube-apiserver", sans, "serverAuth")
    leaf("admin", "/O=system:masters/CN=elastore-test-admin", None, "clientAuth")
    leaf("kwok", "/CN=kwok", "IP:127.0.0.1,DNS:localhost", "serverAuth")
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    (d / "done").touch()


def kubeconfig(server: str, pki: Path, path: Path, *, token: str | None = None,
               user: str = "admin") -> Path:
    """A kubeconfig for ``server``: the admin client certificate, or a bearer token."""
    if token is not None:
        auth = f"    token: {token}\n"
    else:
        auth = (f"    client-certificate: {pki / 'admin.crt'}\n"
                f"    client-key: {pki / 'admin.key'}\n")
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority: {pki / 'ca.crt'}
users:
- name: {user}
  user:
{auth}contexts:
- name: test
  context: {{cluster: test, user: {user}}}
current-context: test
""")
    return path


def kwok_stages() -> str:
    """kwok's shipped Stages for a fast fake node (initialised at once, kept alive by a
    lease) and fast pods (Running and Ready as soon as they are scheduled, gone as soon as
    they are deleted), as one YAML stream."""
    import yaml

    base = kwok_stages_dir()
    docs = []
    for sub in ("node/fast", "node/heartbeat-with-lease", "pod/fast"):
        for f in sorted((base / sub).glob("*.yaml")):
            docs += [d for d in yaml.safe_load_all(f.read_text())
                     if d and d.get("kind") == "Stage"]
    if not docs:
        raise ElastoreError(f"no kwok Stages found under {base}")
    return str(yaml.safe_dump_all(docs))


@dataclass
class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1,
    started for a test session in ``root`` and stopped by PID. ``exec_config`` (kwok Exec /
    ClusterExec YAML) maps ``kubectl exec`` into the fake pods to local commands."""

    root: Path
    exec_config: str = ""
    #: kwok and its fake node; False for a control plane whose only node is a real one
    #: (testbed.node), so that nothing is scheduled onto a node without a kubelet
    fake_node: bool = True
    #: the unix socket of an HTTP CONNECT proxy the API server dials nodes and pods through
    #: (its egress selector's "cluster"): a real node's addresses exist only in its
    #: namespace
    egress_proxy: str = ""
    #: the API server's audit log of ``pods/exec`` (``audit.log``): what ran in which pod,
    #: as the API server saw it, whatever node or runtime serves the pod
    audit_exec: bool = False
    #: the API server's audit log of every request (``audit.log``, Metadata level: who, what,
    #: user agent; no bodies): the operator scale benchmark counts the operator's requests
    audit_requests: bool = False
    #: an audit policy of the test's own (YAML; ``audit.log``), instead of the two above:
    #: e.g. the request bodies of every write to a StatefulSet, so a test can tell what
    #: size each scale asked for
    audit_policy: str = ""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    #: each process's argv as it was started (:meth:`restart` starts it again with it)
    argvs: dict[str, list[str]] = field(default_factory=dict)
    apiserver_port: int = 0
    kwok_port: int = 0

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.root / "audit.log"

    def execs(self) -> list[tuple[str, str, list[str]]]:
        """(namespace, pod, command) of every ``pods/exec`` the audit log holds, in order
        (``audit_exec``)."""
        import urllib.parse

        out, seen = [], set()
        if self.audit_log.exists():
            for line in self.audit_log.read_text().splitlines():
                with contextlib.suppress(ValueError, KeyError):
                    ev = json.loads(line)
                    # an exec is long-running: ResponseStarted, then ResponseComplete
                    if ev["auditID"] in seen:
                        continue
                    seen.add(ev["auditID"])
                    ref = ev["objectRef"]
                    query = urllib.parse.parse_qs(urllib.parse.urlsplit(ev["requestURI"]).query)
                    out.append((ref["namespace"], ref["name"], query.get("command", [])))
        return out

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.argvs[name] = list(argv)
        with (self.root / f"{name}.log").open("ab") as logf:  # the child keeps its own copy
            self.procs[name] = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                                cwd=self.root, start_new_session=True)

    def restart(self, name: str, down_s: float = 0.0, timeout_s: float = 180.0) -> float:
        """A fault: kill the process ``name`` this control plane started (SIGKILL, by its
        PID: no goodbye, as a node that loses power), leave it down ``down_s`` seconds, start
        it again with the same argv (same ports, same etcd data directory, same audit log,
        its log appended to), and wait until the API server answers ready again (its
        ``/readyz`` includes etcd). Returns the epoch (``time.time()``) at which it did: the
        fault's end."""
        p = self.procs.get(name)
        if p is None or name not in self.argvs:
            raise ElastoreError(f"{name} is not a process of this control plane "
                                f"({', '.join(self.procs)})")
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)
        log.info("%s (pid %d) killed; down for %.1f s", name, p.pid, down_s)
        time.sleep(max(0.0, down_s))
        self._spawn(name, self.argvs[name])
        wait_for(f"the API server to be ready again after {name} restarted", self._ready,
                 timeout_s=timeout_s, every_s=0.25)
        return time.time()

    def _check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                tail = (self.root / f"{name}.log").read_text(errors="replace")[-1500:]
                raise ElastoreError(f"{name} exited with {p.returncode}: {tail}")

    def start(self, progress: Callable[[str], None] | None = None) -> ControlPlane:
        say = progress or (lambda m: log.info("%s", m))
        b = ensure_binaries(say)
        self.root.mkdir(parents=True, exist_ok=True)
        pki = self.root / "pki"
        make_pki(pki)
        etcd_port, peer_port = free_port(), free_port()
        self.apiserver_port, self.kwok_port = free_port(), free_port()
        self._spawn("etcd", [
            str(b / "etcd"), "--name", "default", "--data-dir", str(self.root / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn"])
        egress = []
        if self.egress_proxy:
            (self.root / "egress.yaml").write_text(
                "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\n"
                "egressSelections:\n- name: cluster\n  connection:\n"
                "    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n"
                f"        udsName: {self.egress_proxy}\n")
            egress = [f"--egress-selector-config-file={self.root / 'egress.yaml'}"]
        if self.audit_policy:
            (self.root / "audit-policy.yaml").write_text(self.audit_policy)
            egress += [f"--audit-policy-file={self.root / 'audit-policy.yaml'}",
                       f"--audit-log-path={self.audit_log}"]
        elif self.audit_requests:
            (self.root / "audit-policy.yaml").write_text(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\n"
                "omitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n")
            egress += [f"--audit-policy-file={self.root / 'audit-policy.yaml'}",
                       f"--audit-log-path={self.audit_log}"]
        elif self.audit_exec:
            (self.root / "audit-policy.yaml").write_text(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
                "rules:\n- level: Metadata\n  resources: [{group: '', resources: [pods/exec]}]\n"
                "- level: None\n")
            egress += [f"--audit-policy-file={self.root / 'audit-policy.yaml'}",
                       f"--audit-log-path={self.audit_log}"]
        self._spawn("kube-apiserver", [
            str(b / "kube-apiserver"), *egress, f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}", "--authorization-mode=RBAC",
            f"--client-ca-file={pki / 'ca.crt'}", f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none",
            f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
            "--kubelet-preferred-address-types=InternalIP", "--allow-privileged=true"])
        kubeconfig(self.server, pki, self.kubeconfig)
        wait_for("the API server to be ready", self._ready, timeout_s=120, every_s=0.5)
        say(f"kube-apiserver ready on {self.server}")
        self._spawn("kube-controller-manager", [
            str(b / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}", "--use-service-account-credentials=false"])
        self._spawn("kube-scheduler", [
            str(b / "kube-scheduler"), f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}"])
        if not self.fake_node:
            say("control plane up: etcd, kube-apiserver, kube-controller-manager, "
                "kube-scheduler (no kwok: a real node joins)")
            return self
        stages = self.root / "kwok-stages.yaml"
        stages.write_text(kwok_stages())
        argv = [str(b / "kwok"), f"--kubeconfig={self.kubeconfig}", "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--node-ip=127.0.0.1", f"--node-port={self.kwok_port}",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{self.kwok_port}",
                f"--tls-cert-file={pki / 'kwok.crt'}",
                f"--tls-private-key-file={pki / 'kwok.key'}", f"--config={stages}"]
        if self.exec_config:
            ex = self.root / "kwok-exec.yaml"
            ex.write_text(self.exec_config)
            argv.append(f"--config={ex}")
        self._spawn("kwok", argv)
        self._fake_node()
        wait_for(f"node {FAKE_NODE} to be Ready", self._node_ready, timeout_s=120,
                 every_s=0.5)
        say("control plane up: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
            f"kwok (node {FAKE_NODE})")
        return self

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True
                ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
                             input=stdin, capture_output=True, text=True, check=False)
        if check and res.returncode != 0:
            raise ElastoreError(f"kubectl {' '.join(args)}: {res.stderr.strip()[-800:]}")
        return res

    def get_json(self, path: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """GET ``path`` from the API server in this process, as the admin (no kubectl:
        a kubectl run costs ~0.1 s of CPU, and a test polling status every second with
        three of them took a fifth of this 2-core machine from the store it measured)."""
        ctx = self.__dict__.get("_admin_tls")
        if ctx is None:  # made once: the polls call this every second or two
            pki = self.root / "pki"
            ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
            self.__dict__["_admin_tls"] = ctx
        with urllib.request.urlopen(self.server + path, timeout=timeout_s,
                                    context=ctx) as res:
            return dict(json.loads(res.read()))

    def _ready(self) -> bool:
        self._check_alive()
        res = self.kubectl("get", "--raw", "/readyz", check=False)
        return res.returncode == 0 and res.stdout.strip() == "ok"

    def _fake_node(self) -> None:
        self.kubectl("apply", "-f", "-", stdin=f"""apiVersion: v1
kind: Node
metadata:
  name: {FAKE_NODE}
  annotations: {{kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}}
  labels: {{type: kwok, kubernetes.io/hostname: {FAKE_NODE}}}
status:
  allocatable: {{cpu: "64", memory: 256Gi, pods: "110"}}
  capacity: {{cpu: "64", memory: 256Gi, pods: "110"}}
""")

    def _node_ready(self) -> bool:
        self._check_alive()
        res = self.kubectl("get", "node", FAKE_NODE, "-o",
                           "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                           check=False)
        return res.returncode == 0 and res.stdout.strip() == "True"

    def stop(self) -> None:
        """Stop every process this control plane started (by PID), newest first."""
        for name in reversed(list(self.procs)):
            p = self.procs[name]
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, every_s: float = 1.0
             ) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(every_s)
    raise ElastoreError(f"timed out after {timeout_s:.0f} s waiting for {what}")
