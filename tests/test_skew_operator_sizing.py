"""Issue 38, what the operator hands the planner (``operator.skew.load_skew``): the mean
node below the imbalance threshold or on a partial reading, the observed imbalance at
every size without a ring sample, and the skew model's factors with one, scaled to what is
observed. And through the policy loop: the plan buys more for a hot pod."""

from __future__ import annotations

import numpy as np
import pytest

from elastore.models import ModelSet
from elastore.models.skew import Keys, Ring, node_shares
from elastore.operator.skew import HotSample, PodLoad, SkewSettings, build, load_skew
from elastore.planner import Observation, PlannerConfig, plan
from elastore.resources import builtin_model

PODS = tuple(f"cass-{i}" for i in range(6))


def loads(values: list[float | None]) -> list[PodLoad]:
    return [PodLoad(n, None if v is None else v * 0.9, None if v is None else v * 0.1, 5.0)
            for n, v in zip(PODS, values, strict=True)]


def test_skew_below_the_threshold_or_partial_the_planner_sizes_for_the_mean() -> None:
    s = SkewSettings()
    assert load_skew(None, s, 20) == (None, "")
    calm = build(s, loads([100, 110, 95, 105, 100, 120]), 3, 0.9, 630.0, None)
    sized, why = load_skew(calm, s, 20)
    assert sized is None and "below the threshold 1.25" in why
    part = build(s, loads([100, 300, None, 105, 100, 120]), 3, 0.9, 725.0, None)
    sized, why = load_skew(part, s, 20)
    assert sized is None and "unread" in why


def test_skew_without_a_sample_the_observed_imbalance_holds_at_every_size() -> None:
    s = SkewSettings()
    view = build(s, loads([100, 200, 100, 100, 100, 100]), 3, 0.9, 700.0, None)
    sized, why = load_skew(view, s, 20)
    assert sized is not None and "observed imbalance at every size" in why
    assert view.imbalance is not None
    assert sized.factor(3) == sized.factor(6) == sized.factor(20) == pytest.approx(
        200 / (700 / 6))


def test_skew_with_a_ring_sample_the_model_gives_each_size_its_factor() -> None:
    """One hot key on an even 6-node single-token ring: the model knows the imbalance
    at every size (new nodes bisect the largest range: they dilute the hot key only as
    the ring grows); observed hotter than the model explains, it is scaled up."""
    s = SkewSettings()
    ring = Ring.evenly(PODS)
    rng = np.random.default_rng(5)
    tokens = rng.integers(-(2**63), 2**63 - 1, size=200, dtype=np.int64)
    rates = np.full(200, 1.0)
    rates[0] = 120.0  # one hot key
    keys = Keys(tokens, rates, tuple(f"ks.t:k{i}" for i in range(200)))
    model_now = float(node_shares(ring, keys, 3, 0.9, "replicas", 0.2).max()) * 6
    per_pod = node_shares(ring, keys, 3, 0.9, "replicas", 0.2) * 400.0
    sample = HotSample(at_s=0.0, duration_s=3.0, ring=ring, keys=keys)
    total = float(keys.total_rps) / 0.8
    view = build(s, loads([float(v) for v in per_pod]), 3, 0.9, total, sample)
    assert view.ring is ring and view.background == pytest.approx(0.2)
    sized, why = load_skew(view, s, 12)
    assert sized is not None and "balanced tokens, no move" in why
    assert sized.factor(6) == pytest.approx(model_now, rel=1e-6)
    assert {n for n, _ in sized.busiest} >= set(range(1, 13)) - {0}
    # the same ring, but the pods read hotter than the sample explains: scaled up
    hotter = build(s, loads([float(v) for v in per_pod * np.array([1, 1, 1, 1, 1, 1.6])]),
                   3, 0.9, total, sample)
    up, why_up = load_skew(hotter, s, 12)
    assert up is not None and "scaled by" in why_up
    assert hotter.imbalance is not None
    assert up.factor(6) == pytest.approx(hotter.imbalance, rel=1e-6)
    assert all(up.factor(n) >= sized.factor(n) for n in range(3, 13))


def test_skew_the_hot_pod_buys_nodes_through_the_planner() -> None:
    ms = ModelSet.load(builtin_model("placeholder"))
    cap = ms.capacity
    per_node = float(cap.capacity(0.9, 0.0, 0.0))
    total = 5.0 * per_node
    s = SkewSettings()
    even = build(s, loads([total / 6] * 6), 3, 0.9, total, None)
    hot = build(s, loads([total / 9] * 5 + [total * 4 / 9]), 3, 0.9, total, None)
    cfg = PlannerConfig(min_replicas=3, max_replicas=30, window_s=600.0, reactive=False,
                        scale_down_stabilization_s=0.0)

    def desired(view: object) -> int:
        sized, _ = load_skew(view, s, cfg.max_replicas)  # type: ignore[arg-type]
        return plan(Observation(now_s=0.0, replicas=6, load_rps=total, forecast_rps=total,
                                read_ratio=0.9, data_bytes=2**34, load_skew=sized),
                    cfg, ms).desired_replicas

    assert desired(even) == desired(None)
    assert desired(hot) > desired(even)
