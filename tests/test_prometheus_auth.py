"""Prometheus behind TLS and credentials (issue 18): a real Prometheus (Debian's) serving
HTTPS with basic auth (``--web.config.file``), and, for the bearer token, the same behind a
loopback proxy that checks ``Authorization: Bearer`` (Prometheus itself does not take
tokens: a kube-rbac-proxy or an OAuth proxy does, in front of it). The operator's metrics
source with each of the spec's options: a CA bundle, basic auth, a bearer token,
insecureSkipVerify; and each failure said as what it is (wrong password, unknown CA)."""

from __future__ import annotations

import ctypes
import http.server
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_support import CassandraMetrics, Prometheus, wait_until
from testbed.k8s import free_port, make_pki

from elastore.errors import ElastoreError, MetricsError
from elastore.operator.metrics import Credentials, PrometheusSource, resolve_credentials
from elastore.operator.spec import SpecError, parse

# real Prometheus behind TLS and auth: nothing here is timed (make test's parallel phase)
pytestmark = [pytest.mark.lab, pytest.mark.concurrent]

NS, STS = "shop", "db"
RPS = 600.0
TOKEN = "s3cret-token"
USER, PASSWORD = "elastore", "correct horse"


def bcrypt(password: str) -> str:
    """A bcrypt hash for Prometheus's basic_auth_users, by the system's libcrypt."""
    lib = ctypes.CDLL("libcrypt.so.1")
    lib.crypt.restype = ctypes.c_char_p
    out = lib.crypt(password.encode(), b"$2b$05$abcdefghijklmnopqrstuv")
    if not out or not out.startswith(b"$2b$"):
        pytest.fail("libcrypt cannot make a bcrypt hash for Prometheus's basic auth")
    return str(out.decode())


class BearerProxy:
    """HTTPS on 127.0.0.1 that forwards to ``upstream`` only requests with the token."""

    def __init__(self, upstream: str, pki: Path) -> None:
        token = TOKEN

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {token}":
                    self.send_response(401)
                    self.end_headers()
                    return
                with urllib.request.urlopen(upstream + self.path, timeout=5) as r:
                    body = r.read()
                    self.send_response(r.status)
                    self.send_header("Content-Type", r.headers["Content-Type"])
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki / "kwok.crt", pki / "kwok.key")
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("promauth")
    pki = root / "pki"
    make_pki(pki)  # a CA and a serving certificate for 127.0.0.1
    exporter = CassandraMetrics(rps=RPS, clusters={(NS, STS): (3, 3)})
    exporter.SPARE = 0
    web = (f"tls_server_config:\n  cert_file: {pki / 'kwok.crt'}\n"
           f"  key_file: {pki / 'kwok.key'}\n"
           f"basic_auth_users:\n  {USER}: '{bcrypt(PASSWORD)}'\n")
    secured = Prometheus(root / "tls", [exporter.target], web_config=web,
                         ca=pki / "ca.crt", auth=(USER, PASSWORD))
    plain = Prometheus(root / "plain", [exporter.target])
    proxy = BearerProxy(plain.url, pki)
    bed = {"pki": pki, "secured": secured, "plain": plain, "proxy": proxy,
           "ca": (pki / "ca.crt").read_text()}
    def loaded() -> bool:  # once the rate window is full
        try:
            return abs(load(source(plain.url)) / RPS - 1) < 0.1
        except MetricsError:
            return False

    # stopped however the set-up ends: a wait that fails (stop 40's fresh clone, on a
    # starved machine) left both Prometheus processes running
    try:
        wait_until("the load in Prometheus", loaded, 60)
        yield bed
    finally:
        proxy.close()
        for p in (secured, plain):
            p.close()
        exporter.close()


#: the load over 5 s instead of the preset's 1 min: the test need not wait a minute for a
#: full rate window (these tests are about reaching Prometheus, not about the rates)
FAST = {k: ('sum(rate(org_apache_cassandra_metrics_clientrequest_count{name="Latency",'
            f'scope="{s}",namespace="{NS}"}}[5s]))')
        for k, s in (("readRps", "Read"), ("writeRps", "Write"))}


def source(url: str, cred: Credentials | None = None, **prom: Any) -> PrometheusSource:
    spec = parse({"target": {"name": STS, "replicationFactor": 3},
                  "replicas": {"min": 3, "max": 8}, "slo": {"latencyMs": 30},
                  "metrics": {"prometheus": {"url": url, "warmup": "6s", "queries": FAST,
                                             **prom}}})
    assert spec.prometheus is not None
    return PrometheusSource(spec.prometheus, NS, STS, credentials=cred)


def load(src: PrometheusSource) -> float:
    return src.snapshot(time.time(), 2, 10.0).load_rps


def test_basic_auth_and_a_ca_bundle(bed: dict[str, Any]) -> None:
    url = bed["secured"].url
    assert url.startswith("https://")
    got = load(source(url, Credentials(basic=(USER, PASSWORD), ca_pem=bed["ca"])))
    assert got == pytest.approx(RPS, rel=0.15)


def test_a_wrong_password_is_said_as_such(bed: dict[str, Any]) -> None:
    with pytest.raises(MetricsError) as err:
        load(source(bed["secured"].url, Credentials(basic=(USER, "wrong"), ca_pem=bed["ca"])))
    assert err.value.reason == "PrometheusUnauthorized" and "HTTP 401" in str(err.value)
    with pytest.raises(MetricsError) as err:  # no credentials at all
        load(source(bed["secured"].url, Credentials(ca_pem=bed["ca"])))
    assert err.value.reason == "PrometheusUnauthorized"


def test_an_unknown_ca_fails_verification_unless_told_to_skip_it(bed: dict[str, Any]) -> None:
    url = bed["secured"].url
    with pytest.raises(MetricsError) as err:  # the system's CAs do not know the test CA
        load(source(url, Credentials(basic=(USER, PASSWORD))))
    assert err.value.reason == "PrometheusUnreachable"
    assert "TLS verification failed" in str(err.value)
    got = load(source(url, Credentials(basic=(USER, PASSWORD), insecure_skip_verify=True)))
    assert got == pytest.approx(RPS, rel=0.15)


def test_a_bearer_token(bed: dict[str, Any]) -> None:
    url = bed["proxy"].url
    got = load(source(url, Credentials(bearer_token=TOKEN, ca_pem=bed["ca"])))
    assert got == pytest.approx(RPS, rel=0.15)
    with pytest.raises(MetricsError) as err:
        load(source(url, Credentials(bearer_token="guess", ca_pem=bed["ca"])))
    assert err.value.reason == "PrometheusUnauthorized"


def test_the_spec_resolves_its_credentials_from_the_namespace(bed: dict[str, Any]) -> None:
    """The spec names Secrets and a ConfigMap; resolve_credentials reads exactly those, in
    the policy's namespace, and the source then works."""
    store = {("Secret", NS, "prom", "user"): USER, ("Secret", NS, "prom", "pass"): PASSWORD,
             ("ConfigMap", NS, "prom-ca", "ca.crt"): bed["ca"]}
    asked: list[tuple[str, str, str, str]] = []
    urls: set[str] = set()

    def read(kind: str, ns: str, name: str, key: str, url: str) -> str:
        asked.append((kind, ns, name, key))
        urls.add(url)
        if (kind, ns, name, key) not in store:
            raise ElastoreError(f"{kind} {ns}/{name} has no key {key!r}")
        return store[(kind, ns, name, key)]

    prom = {"basicAuth": {"username": {"name": "prom", "key": "user"},
                          "password": {"name": "prom", "key": "pass"}},
            "tlsConfig": {"ca": {"configMap": {"name": "prom-ca", "key": "ca.crt"}}}}
    spec = parse({"target": {"name": STS, "replicationFactor": 3},
                  "replicas": {"min": 3, "max": 8}, "slo": {"latencyMs": 30},
                  "metrics": {"prometheus": {"url": bed["secured"].url, "warmup": "6s",
                                             "queries": FAST, **prom}}})
    assert spec.prometheus is not None
    cred = resolve_credentials(spec.prometheus, NS, read)
    assert sorted(asked) == sorted(store)
    assert urls == {bed["secured"].url}  # each read says where the value will be sent
    assert "correct horse" not in repr(cred)  # never in a log line
    src = PrometheusSource(spec.prometheus, NS, STS, credentials=cred)
    assert load(src) == pytest.approx(RPS, rel=0.15)
    store[("ConfigMap", NS, "prom-ca", "ca.crt")] = "not a certificate"
    with pytest.raises(ElastoreError, match="not a PEM"):
        resolve_credentials(spec.prometheus, NS, read)


@pytest.mark.parametrize("prom, message", [
    ({"url": "http://p:9090", "bearerTokenSecret": {"name": "t", "key": "k"}}, "https"),
    ({"url": "https://p", "bearerTokenSecret": {"name": "t", "key": "k"},
      "basicAuth": {"username": {"name": "a", "key": "u"}, "password": {"name": "a",
                                                                       "key": "p"}}},
     "exclusive"),
    ({"url": "https://p", "basicAuth": {"username": {"name": "a", "key": "u"}}}, "password"),
    ({"url": "https://p", "tlsConfig": {"ca": {"secret": {"name": "c", "key": "k"}},
                                        "insecureSkipVerify": True}}, "choose one"),
    ({"url": "http://p", "tlsConfig": {"insecureSkipVerify": True}}, "https"),
    ({"url": "https://p", "tlsConfig": {"ca": {"secret": {"name": "c", "key": "k"},
                                               "configMap": {"name": "c", "key": "k"}}}},
     "exactly one"),
    ({"url": "https://p", "bearerTokenSecret": {"name": "Bad_Name", "key": "k"}}, "name"),
    ({"url": "https://p", "preset": "datadog"}, "must be one of"),
])
def test_bad_auth_settings_are_clear_errors(prom: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse({"target": {"name": STS, "replicationFactor": 3},
               "replicas": {"min": 3, "max": 8}, "slo": {"latencyMs": 30},
               "metrics": {"prometheus": prom}})
