"""The status's conditions (Kubernetes-style: type, status, reason, message, transition
time) and the one way the status writes times. Pure."""

from __future__ import annotations

from typing import Any

#: the calendar's ends, epoch seconds (0001-01-01 and 9999-12-31T23:59:59 UTC): a time
#: outside them (a forged or absurd status) is shown clamped, never a crash
ISO_MIN_S, ISO_MAX_S = -62135596800.0, 253402300799.0


def iso(epoch_s: float) -> str:
    """Epoch seconds as the status shows times (RFC 3339, UTC, whole seconds)."""
    from datetime import UTC, datetime

    t = ISO_MAX_S if epoch_s != epoch_s else min(max(epoch_s, ISO_MIN_S), ISO_MAX_S)
    d = datetime.fromtimestamp(t, UTC)
    return f"{d.year:04d}-{d:%m-%dT%H:%M:%S}Z"


CONDITIONS = ("Ready", "Forecasting", "ScalingUp", "ScalingDown", "Throttling", "Degraded",
              "Conflict", "Paused", "Fallback", "LookaheadShort")


def set_condition(conditions: list[dict[str, Any]], ctype: str, status: bool, reason: str,
                  message: str, now_s: float) -> list[dict[str, Any]]:
    """The conditions with ``ctype`` set; its transition time moves only when its status
    changes (as Kubernetes conditions do)."""
    if ctype not in CONDITIONS:
        raise ValueError(f"unknown condition {ctype}")
    st = "True" if status else "False"
    out = [dict(c) for c in conditions if c.get("type") != ctype]
    prev = next((c for c in conditions if c.get("type") == ctype), None)
    since = prev["lastTransitionTime"] if prev and prev.get("status") == st and \
        prev.get("lastTransitionTime") else iso(now_s)
    out.append({"type": ctype, "status": st, "reason": reason, "message": message[:1000],
                "lastTransitionTime": since})
    order = {t: k for k, t in enumerate(CONDITIONS)}
    return sorted(out, key=lambda c: order.get(c["type"], 99))


def condition(conditions: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == ctype), None)
