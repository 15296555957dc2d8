"""Swift's side of the skew view (issue 38). Pure.

Each pod has one device (``spec.target.swift.device``), so the preset's per-pod rates
(the object server's requests/s, ``swift-statsd``) are per-device rates. Swift places an
object by its ring's partitions, not by tokens: there are no hot token ranges, and no
sampler of hot objects the operator could run in the pods. Which replica serves a GET is
the proxy's choice (``sorting_method``), the user's to set.
"""

from __future__ import annotations

from elastore.operator.skew import Advice, SkewFacts
from elastore.operator.spec import PolicySpec


def note(spec: PolicySpec) -> str:
    sw = spec.target.swift
    return (f"per-device rates: each pod has one device ({sw.devices_dir}/{sw.device}), so "
            "its object-server requests/s are the device's; Swift places objects by ring "
            "partitions, not tokens: no hot ranges, and no hot-object sampler")


def advice(f: SkewFacts) -> Advice:
    """The proxy's replica choice for GETs, where it can help (reads matter, more than one
    replica); what the operator cannot read."""
    r = f.replicas_per_key
    if r < 2:
        return Advice((), ("read spreading: the rings have one replica, so no option "
                           "spreads GETs",))
    cannot = ["the proxy's sorting_method and read_affinity (proxy-server.conf is not "
              "readable by the operator): GETs are taken to spread as spec.skew.readSpread "
              "says"]
    if f.read_ratio < 0.5 or f.read_spread != "primary":
        return Advice((), tuple(cannot))
    return Advice((f"GETs concentrate on one replica (spec.skew.readSpread: primary): "
                   "sorting_method = shuffle in the proxy's [app:proxy-server] (Swift's "
                   f"default) spreads them over the {r} replicas; timing, or affinity with "
                   "a read_affinity, sends them to the fastest or nearest device",),
                  tuple(cannot))
