"""Growing the target's volumes instead of adding nodes (``spec.storage.expandVolumes``).

The planner (:mod:`elastore.planner.horizon`) decides: where the bytes, not the load, want
more nodes, and a month of grown volumes costs less than a month of those nodes
(``spec.cost``), its decision carries the size every volume grows to now. This module only
applies it, in Enforce, on a target that opted in, with no node step under way:

* a StatefulSet's ``volumeClaimTemplates`` cannot change in place (the API server refuses
  it), so each pod's PVC (``<template>-<statefulset>-<ordinal>``) is patched; the template
  keeps its size, and a pod a later scale-out adds gets the template's (docs/operator.md
  "Scale for the bytes" says what a user does about it);
* every PVC is read first: all must exist and their StorageClass must allow expansion, or
  none is touched and the status says which and why;
* a PVC is never shrunk (the port refuses less than its request), and one already as large
  is left alone;
* after the patch each PVC is read back: the request must be the new size (the resize
  itself is then the storage driver's; ``resizing`` says it is under way).

A cass-operator datacenter's PVCs belong to cass-operator (``spec.storageConfig``): they are
not grown here, and the status says so.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from elastore.actuators.ports import ClusterPort
from elastore.errors import ElastoreError
from elastore.operator.policyapi import PolicyStore
from elastore.operator.tick import Tick
from elastore.units import GIB

log = logging.getLogger(__name__)


class Seams(Protocol):
    namespace: str
    name: str
    kube: ClusterPort
    policies: PolicyStore


def _gib(n: float) -> str:
    return f"{n / GIB:,.0f} GiB"


def grow(s: Seams, t: Tick) -> str | None:
    """Grow every PVC of the target to the size this period's plan asked for; returns what
    was done or why not (None: nothing asked), also in ``status.storage.message``."""
    storage: dict[str, Any] = t.out.get("storage") or {}
    want = storage.get("expandToBytes")
    spec, sts = t.spec, t.sts
    if not want or not t.period or spec is None or sts is None:
        return None
    want = float(want)
    said = _why_not(t)
    if said is None and (spec.target.kind != "StatefulSet" or not sts.pvc_template):
        said = (f"a {spec.target.kind} without a volumeClaimTemplate: its volumes are not "
                "the operator's to grow")
    if said is None:
        said = _grow(s, t, str(sts.pvc_template), sts.name, sts.spec_replicas,
                     want)
    storage["message"] = f"{storage.get('message', '')}; {said}".strip("; ")[:2000]
    t.out["storage"] = storage
    return said


def _why_not(t: Tick) -> str | None:
    spec = t.spec
    assert spec is not None
    if not spec.enforce:
        return "Recommend: the volumes would grow (Enforce grows them)"
    if t.blocked is not None:
        return f"not grown: {t.blocked[1]}"
    if t.pause is not None and t.pause.on:
        return "not grown: the policy is paused"
    if t.operation is not None:
        return "not grown yet: a node step is under way"
    return None


def _grow(s: Seams, t: Tick, tmpl: str, sts: str, replicas: int, want: float) -> str:
    names = [f"{tmpl}-{sts}-{k}" for k in range(replicas)]
    facts = []
    for n in names:
        v = s.kube.volume(s.namespace, n)
        if v is None:
            return f"not grown: PVC {n} does not exist"
        if v.expandable is not True:
            cls = v.storage_class or "(none named)"
            return (f"not grown: PVC {n}'s StorageClass {cls} does not allow expansion "
                    "(allowVolumeExpansion)")
        facts.append(v)
    todo = [v.name for v in facts if (v.requested_bytes or 0.0) < want]
    if not todo:
        return f"every volume already asks for {_gib(want)} or more"
    done = []
    try:
        for n in todo:
            s.kube.expand_volume(s.namespace, n, want)
            back = s.kube.volume(s.namespace, n)
            if back is None or (back.requested_bytes or 0.0) < want:
                raise ElastoreError(f"PVC {n} reads back "
                                    f"{'nothing' if back is None else back.requested_bytes} "
                                    f"bytes after its patch to {want:.0f}")
            done.append(n)
    except ElastoreError as exc:
        msg = (f"grew {len(done)} of {len(todo)} PVC(s) to {_gib(want)}, then: {exc}")
        s.policies.event(t.body, "VolumeGrowthFailed", msg, warning=True)
        return msg
    msg = (f"grew {len(done)} PVC(s) to {_gib(want)} ({', '.join(done)}); the "
           "volumeClaimTemplate keeps its size")
    s.policies.event(t.body, "VolumesGrown", msg)
    return msg
