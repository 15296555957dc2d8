"""Which Prometheus URLs the operator may query, and which a credentials Secret may be sent
to. Pure.

A policy's author chooses ``spec.metrics.prometheus.url``; without bounds the operator
fetches any URL they name (from inside the cluster), and sends the credentials the policy
names along (issue 35). Two owners bound that:

* **the installer** lists the endpoints the operator may query (``elastore operator run
  --prometheus-url``, the chart's ``prometheus.allowedUrls``); a policy naming another is
  ``PrometheusNotAllowed`` and nothing is fetched;
* **a Secret's owner** binds it to endpoints with the annotation
  :data:`BOUND_ANNOTATION` (patterns, comma- or space-separated); the operator sends the
  Secret only to a URL that matches one.

A pattern is a URL whose host may hold ``*`` (one or more labels, never a ``/``), whose port
may be ``*`` (any, or none), and whose path is a prefix::

    http://prometheus.monitoring.svc:9090
    https://*.svc.cluster.local:*
    https://thanos.example.com/prometheus

The scheme must be the same, the host match (case-insensitive), the port match (the URL's
default port when it names none) and the URL's path start with the pattern's at a ``/``.
"""

from __future__ import annotations

import fnmatch
from urllib.parse import urlsplit

#: the annotation that binds a credentials Secret to the Prometheus URLs it may be sent to
BOUND_ANNOTATION = "elastore.io/prometheus-urls"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _parts(url: str) -> tuple[str, str, str, str] | None:
    """(scheme, host, port, path) of a URL; None when it is not an http(s) URL with a host.
    The port is the scheme's default when none is given; ``*`` stays ``*``."""
    try:
        u = urlsplit(url.strip())
    except ValueError:
        return None
    if u.scheme not in _DEFAULT_PORTS or not u.hostname or u.username or u.password:
        return None
    netloc = u.netloc.rsplit("@", 1)[-1]
    host_port = netloc.rsplit("]", 1)[-1] if netloc.startswith("[") else netloc
    port = host_port.rsplit(":", 1)[1] if ":" in host_port else str(_DEFAULT_PORTS[u.scheme])
    if port != "*" and not port.isdigit():
        return None
    return u.scheme, u.hostname.lower(), port, u.path.rstrip("/")


def valid_pattern(pattern: str) -> bool:
    return _parts(pattern) is not None


def allowed(url: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether ``url`` matches one of ``patterns`` (see the module)."""
    got = _parts(url)
    if got is None:
        return False
    scheme, host, port, path = got
    if "*" in host or port == "*":  # a URL, not a pattern
        return False
    for pattern in patterns:
        want = _parts(pattern)
        if want is None:
            continue
        p_scheme, p_host, p_port, p_path = want
        if p_scheme != scheme or p_port not in ("*", port):
            continue
        if "/" in p_host or not fnmatch.fnmatchcase(host, p_host):
            continue
        if p_path and not (path == p_path or path.startswith(p_path + "/")):
            continue
        return True
    return False


def bound_patterns(annotations: dict[str, str] | None) -> tuple[str, ...]:
    """The URL patterns a Secret's :data:`BOUND_ANNOTATION` lists (empty: bound to none)."""
    raw = (annotations or {}).get(BOUND_ANNOTATION, "")
    return tuple(p for p in raw.replace(",", " ").split() if p)
