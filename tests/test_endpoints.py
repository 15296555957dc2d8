"""Where the operator's Prometheus requests may go (issue 35, finding 6): the installer's
endpoint patterns, a Secret's binding, and what a refused request says. The patterns are
pure; the requests go to HTTP servers on loopback that this test starts."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from elastore.errors import MetricsError
from elastore.operator.endpoints import allowed, bound_patterns, valid_pattern
from elastore.operator.metrics import PrometheusSource, prometheus_source
from elastore.operator.spec import parse

IN_CLUSTER = ("http://*.svc:*", "https://*.svc.cluster.local:*",
              "https://thanos.example.com/prometheus")


@pytest.mark.parametrize(("url", "ok"), [
    ("http://prometheus.monitoring.svc:9090", True),
    ("http://prometheus.monitoring.svc", True),  # port 80: '*' takes it
    ("https://prometheus.monitoring.svc:9090", False),  # the scheme is part of it
    ("https://p.monitoring.svc.cluster.local:443/api", True),
    ("https://thanos.example.com/prometheus", True),
    ("https://thanos.example.com/prometheus/api/v1", True),
    ("https://thanos.example.com/prometheus-evil", False),  # a prefix at a '/' only
    ("https://thanos.example.com/", False),
    ("http://evil.example.com/x.svc:9090", False),  # the host is the host
    ("http://evil.example.com:9090/.svc", False),
    ("http://169.254.169.254/latest/meta-data", False),
    ("http://user:pw@prometheus.monitoring.svc:9090", False),  # no userinfo
    ("http://PROMETHEUS.Monitoring.SVC:9090", True),  # hosts are case-insensitive
    ("ftp://prometheus.monitoring.svc:9090", False),
    ("not a url", False),
])
def test_tenant_the_installers_endpoints_bound_what_a_policy_may_query(url: str,
                                                                       ok: bool) -> None:
    assert allowed(url, IN_CLUSTER) is ok


def test_tenant_patterns_and_a_secrets_binding_are_read_strictly() -> None:
    assert valid_pattern("http://*.svc:9090") and not valid_pattern("*.svc")
    assert not valid_pattern("http://p:port") and not valid_pattern("gopher://p")
    assert bound_patterns({"elastore.io/prometheus-urls": "https://a:1, https://b:2  c"}) == (
        "https://a:1", "https://b:2", "c")
    assert bound_patterns(None) == () and bound_patterns({"x": "https://a"}) == ()
    assert not allowed("https://a:1", ())  # bound to nothing: sent nowhere
    assert not allowed("https://*.svc:1", ("https://*.svc:*",))  # a pattern is not a URL


def _spec(url: str) -> Any:
    return parse({"target": {"name": "db", "replicationFactor": 3},
                  "replicas": {"min": 3, "max": 8}, "slo": {"latencyMs": 30},
                  "metrics": {"prometheus": {"url": url}}})


def test_tenant_a_url_outside_the_installers_list_is_never_fetched() -> None:
    with pytest.raises(MetricsError) as err:
        prometheus_source(_spec("http://169.254.169.254:80"), "shop", None, IN_CLUSTER)
    assert err.value.reason == "PrometheusNotAllowed"
    # inside the list, or no list (the CLI without --prometheus-url): a source
    assert isinstance(prometheus_source(_spec("http://p.monitoring.svc:9090"), "shop", None,
                                        IN_CLUSTER), PrometheusSource)
    assert isinstance(prometheus_source(_spec("http://10.0.0.1:9090"), "shop"),
                      PrometheusSource)


class _Server:
    """HTTP on 127.0.0.1: every GET answers ``status`` with ``body`` (and ``location``)."""

    def __init__(self, status: int, body: bytes, location: str | None = None) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    made: list[_Server] = []
    yield made
    for s in made:
        s.close()


def test_tenant_a_refused_query_echoes_no_response_body(servers: list[_Server]) -> None:
    """A non-200 answer's body (whatever the URL said) went into the status and Events:
    the operator fetched any URL for a policy's author and showed them the answer."""
    srv = _Server(500, b"INTERNAL-SECRET-PAGE: db password is hunter2")
    servers.append(srv)
    spec = _spec(srv.url)
    src = PrometheusSource(spec.prometheus, "shop", "db", timeout_s=5)
    with pytest.raises(MetricsError) as err:
        src.scalar("readRps", 0.0)
    assert err.value.reason == "PrometheusError" and "HTTP 500" in str(err.value)
    assert "hunter2" not in str(err.value) and "SECRET" not in str(err.value)


def test_tenant_a_redirect_is_not_followed(servers: list[_Server]) -> None:
    """A redirect would take the request, and its Authorization, to another host."""
    target = _Server(200, b'{"status":"success","data":{"resultType":"vector","result":'
                          b'[{"metric":{},"value":[0,"5"]}]}}')
    hop = _Server(302, b"", location=target.url + "/api/v1/query")
    servers.extend([target, hop])
    src = PrometheusSource(_spec(hop.url).prometheus, "shop", "db", timeout_s=5)
    with pytest.raises(MetricsError) as err:
        src.scalar("readRps", 0.0)
    assert err.value.reason == "PrometheusUnreachable", err.value  # before: 5.0, from there
