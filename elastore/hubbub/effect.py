"""The interference effect (Hubbub-scale, reference text 5.4): how much capacity a server
loses to contention it does not cause, as a function of a measured interference index.

**What the index means.** The node agent's probe exports ``elastore_interference_index`` in
[0, 1], "the expected slowdown of the store at the same load: the fraction of its wall time
lost to contention; latency at equal load behaves like load / (1 - index)". So a server at
load ``L`` and index ``i`` behaves like an interference-free server at an *effective* load
``L * g(i)``, and by the definition ``g(i) = 1 / (1 - i)``. This module learns the real
``g`` of a store from its own measurements, starting from a prior (the definition, or a
model's own offline-learned effect), and the capacity model uses it for its whole
interference axis (:meth:`elastore.models.capacity.CapacityModel.with_interference_effect`):

    latency(L, r, m, i) = latency0(L * g(i), r, m)      capacity(r, m, i) = capacity0(r, m) / g(i)

where ``latency0``/``capacity0`` are the model's interference-free slice (index 0).

**Why it is learned online.** The reference text: the interference part of Hubbub-scale's
model "can never be fully trained offline, because inter-VM interferences are hard to
artificially produce"; it is trained online. Every control period in which the index and
the store's latency percentile are both measured gives one observation.

**Method** (:class:`InterferenceLearner`; the issue suggested per-bin means of
``ln(L_eff / L)``, a pseudo-count prior and a cumulative max, and this keeps that frame
with five changes, each measured in ``benchmarks/interference_learner.py``):

1. *Invert the interference-free curve.* For an observation (per-server load ``L``
   requests/s, read ratio ``r``, migration ``m`` MiB/s per server, index ``i``, measured
   latency ``p`` ms at the model's percentile) find the load ``L_eff`` at which the index-0
   slice predicts ``p``: ``latency0(L_eff, r, m) = p``. Only where the curve is invertible:
   ``p`` above the model's latency at no load and below both its latency at the largest
   profiled load and ``CLIP_X_SLO`` x the SLO (the model does not resolve latencies past
   that); otherwise the observation is skipped and counted (``range``). Missing, NaN,
   negative or out-of-range inputs are skipped and counted (``missing``), never read as 0.
2. *The residual.* The observed factor ``ln(L_eff / L)`` is kept as its residual against
   the definition, ``z = ln(L_eff / L) - ln g_def(i)``: the index is *defined* to make
   ``g`` its definition, so ``z`` is small where the probe is right, and the knots need not
   resolve the definition's steep rise near 1.
3. *Weights that do not follow the noise.* Inverting a flat curve amplifies noise: a
   relative error ``e`` of the latency becomes ``e / eps`` of ``L_eff``,
   ``eps = d ln latency0 / d ln L``. Each observation weighs ``min(1, eps^2)`` (inverse
   variance) times a border weight (up to 1 within ~x1.6 of the SLO, 1/5 far from it, as
   the capacity fit weighs its samples: capacity is where latency crosses the SLO), both
   judged where the observation is *expected* to land (``L * g(i)`` by the effect learned
   so far, ``eps`` over loads x0.8..x1.25 there), never where its noisy latency put it
   (that biased ``g`` by +3..9 %). Below ``MIN_ELASTICITY`` it is skipped (``flat``).
4. *Soft knots.* Knots at 0, 0.1, ..., 1 (``bins`` = 10 intervals) each keep an
   exponentially weighted mean of ``z`` and of where it was measured (``ln g_def`` of the
   indexes): an observation is shared linearly by the two knots around its index (an index
   on a knot teaches that knot alone; a hard bin would let an index at 0.5 count for its
   bin's centre, 0.55, and half-prior at 0.5), and an observation of weight ``w`` decays a
   knot's past by ``(1 - 1 / memory) ** w`` (``memory``: full-weight observations a knot
   remembers; None: no forgetting, for offline fits).
5. *The shape, then the knots.* A probe that misreads the slowdown misreads it
   everywhere: one slope ``beta`` of the knots' residuals (less the prior's) on ``ln g_def``
   (``g = g_def^(1 + beta)``), with ``prior_count`` pseudo-observations of ``beta = 0``,
   moves (a) each knot's mean from where its observations were to the knot (the bias of a
   knot whose data lie to one side, at the data's edge or across a curved stretch), and
   (b) each knot's prior, up to the highest index observed and by what it moved there
   beyond (not extrapolated in proportion). Each knot's posterior is its mean with
   ``prior_count`` pseudo-observations at that prior, so a knot without data follows the
   data's shape and one with few is pulled towards it. Without (b), a steady index (the
   common case: a neighbour that stays) learned at one knot is pooled by the isotonic step
   with its unlearned neighbours: 18-21 % off after 40 periods where g is far from the
   definition, against 0.3 %.
6. *The effect.* ``ln g(u) = ln g_def(u) + z(u)``, ``z`` linear between the knots, on a
   grid of 101 points; made monotone non-decreasing by weighted isotonic regression
   (pool-adjacent-violators, weights the knots' evidence: a cumulative max would keep the
   noisiest high value), clipped at ``g >= 1`` and pinned at ``g(0) = 1``.

Measured (benchmark, mean |error| of g): 150 noisy observations clustered at three indexes,
1.7-4.4 % against the suggested method's 3.9-9.2 %; a steady index over 40 periods, 0.3-0.4
% against 4.4-21 %; 3000 observations over [0, 0.9], at most 1.1-3.8 % on [0, 0.8] against
2.5-2.8 % (on average 0.7-1.2 % against 1.3-1.5 %).

**g(0) is fixed at 1**, not learned: index 0 is "no contention", which is what the
interference-free slice was profiled as. A store that is slower than its model even without
contention (other hardware, a latency query that measures something else) is a
miscalibrated capacity model, not interference; the learner does not hide it in ``g(0)``.
At the indexes it observes, though, ``g`` absorbs such a miscalibration (it is fitted to the
store's own latencies): an optimistic model makes ``g`` larger there (conservative); a
pessimistic one is floored at ``g = 1`` (never more capacity than the interference-free
model). ``base_ratio`` reports the mismatch the knot at index 0 sees.

**Past 0.95** the factor is held at its value there (``G_MAX`` = 20 by the definition: a
server keeping 5 % of its time). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from elastore.errors import ElastoreError

if TYPE_CHECKING:
    from elastore.models.capacity import CapacityModel

FloatArray = npt.NDArray[np.float64]

FORMAT = "elastore.interference-effect"
LEARNER_VERSION = 1
INDEX_CAP = 0.95  # the factor is held constant past this index
G_MAX = 1.0 / (1.0 - INDEX_CAP)  # 20: the definition's factor at INDEX_CAP
LOG_FACTOR_MAX = math.log(100.0)  # what the learned factor may reach at most
KNOTS = np.linspace(0.0, 1.0, 101)  # where an effect is tabulated
MIN_ELASTICITY = 0.05  # flatter than this the inversion is noise (skipped as "flat")
BORDER_WIDTH = 0.5  # ln(latency / SLO): observations within ~x1.6 of the SLO ...
BORDER_WEIGHT = 4.0  # ... weigh up to 5 x those far from it
LOAD_POINTS = 241  # the interference-free curve is inverted on this many loads
SKIP_REASONS = ("missing", "range", "flat")
STATE_DIGITS = 7  # significant digits of the learner's state
BLOCK = 32  # observations judged by one effect (a batch fit updates it between blocks)


class InterferenceError(ElastoreError):
    """An interference effect or learner state that cannot be used."""


def _short(x: float) -> float:
    return float(f"{x:.{STATE_DIGITS}g}")


def log_definition(index: Any) -> FloatArray:
    """``ln g_def(i) = -ln(1 - i)``, the index's own meaning, held constant past
    :data:`INDEX_CAP`."""
    i = np.clip(np.asarray(index, dtype=float), 0.0, INDEX_CAP)
    return np.asarray(-np.log1p(-i))


def isotonic(y: FloatArray, w: FloatArray) -> FloatArray:
    """Weighted least-squares non-decreasing fit of ``y`` (pool adjacent violators)."""
    vals: list[float] = []
    weights: list[float] = []
    counts: list[int] = []
    for yi, wi in zip(y.tolist(), w.tolist(), strict=True):
        vals.append(yi)
        weights.append(wi)
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            wsum = weights[-2] + weights[-1]
            v = (vals[-2] * weights[-2] + vals[-1] * weights[-1]) / wsum
            c = counts[-2] + counts[-1]
            del vals[-1], weights[-1], counts[-1]
            vals[-1], weights[-1], counts[-1] = v, wsum, c
    return np.repeat(np.asarray(vals, dtype=float), counts)


@dataclass(frozen=True)
class InterferenceEffect:
    """``g(i)``: a server at index ``i`` serves a load ``L`` as an interference-free one
    serves ``L * g(i)``. Tabulated as ``ln g`` at increasing indexes from 0 to 1 (linear in
    between), non-decreasing, ``g(0) = 1``."""

    index: tuple[float, ...]
    log_factor: tuple[float, ...]
    #: how it was made: ``definition``, ``profiled`` (a model's profiled axis), ``learned``
    source: str = "definition"
    #: what it was learned from (observations, skipped, ...), for readers
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        x = np.asarray(self.index, dtype=float)
        y = np.asarray(self.log_factor, dtype=float)
        if x.ndim != 1 or len(x) < 2 or x.shape != y.shape:
            raise InterferenceError("an interference effect needs >= 2 (index, ln factor) "
                                    "pairs of equal length")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise InterferenceError("an interference effect must be finite numbers")
        if x[0] != 0.0 or x[-1] != 1.0 or np.any(np.diff(x) <= 0):
            raise InterferenceError("an interference effect's indexes must rise from 0 to 1")
        if y[0] != 0.0 or np.any(np.diff(y) < 0) or y[-1] > LOG_FACTOR_MAX + 1e-9:
            raise InterferenceError("an interference effect must start at g(0) = 1 and never "
                                    f"fall (ln g non-decreasing, at most {LOG_FACTOR_MAX:.2f})")

    def factor(self, index: Any) -> FloatArray:
        """``g(i)``; vectorised. Indexes outside [0, 1] are clipped (the planner's
        observations are validated to lie inside)."""
        i = np.clip(np.asarray(index, dtype=float), 0.0, 1.0)
        return np.asarray(np.exp(np.interp(i, self.index, self.log_factor)))

    __call__ = factor

    def describe(self) -> str:
        at = (0.25, 0.5, 0.75, 0.9)
        gs = ", ".join(f"g({i:g}) = {float(self.factor(i)):.2f}" for i in at)
        return f"{self.source} interference effect: {gs}"

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def definition(cls) -> InterferenceEffect:
        """The index's own meaning, ``g(i) = 1 / (1 - i)`` (held past 0.95)."""
        return cls(tuple(KNOTS.tolist()), tuple(log_definition(KNOTS).tolist()), "definition")

    @classmethod
    def from_profile(cls, model: CapacityModel) -> InterferenceEffect:
        """The effect a model's *profiled* interference axis shows (the paper's offline
        Hubbub-scale model): at each profiled index, the geometric mean over the profiled
        read ratios of capacity0 / capacity(i) without migration; linear in ``ln g`` between
        them, monotone, and past the profile's top continued with the definition's shape
        (``g(i) = g(top) * g_def(i) / g_def(top)``), not clamped."""
        axis = np.asarray(model.interference_axis, dtype=float)
        if model.interference_effect is not None:
            return model.interference_effect
        if len(axis) < 2 or axis[0] > 0:
            return cls.definition()
        r = np.asarray(model.read_axis, dtype=float)
        cap0 = np.maximum(np.asarray(model.capacity(r, 0.0, 0.0)), 1e-9)
        logs = [float(np.mean(np.log(cap0 / np.maximum(
            np.asarray(model.capacity(r, 0.0, float(i))), 1e-9)))) for i in axis]
        y = np.maximum.accumulate(np.maximum(np.asarray(logs), 0.0))
        y[0] = 0.0
        top = float(axis[-1])
        inside = np.interp(KNOTS, axis, y)
        beyond = y[-1] + log_definition(KNOTS) - float(log_definition(top))
        out = np.minimum(np.where(top >= KNOTS, inside, beyond), LOG_FACTOR_MAX)
        return cls(tuple(KNOTS.tolist()), tuple(np.maximum.accumulate(out).tolist()),
                   "profiled", {"profiled_indexes": [float(a) for a in axis]})

    # -- JSON -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, "source": self.source,
                "units": {"index": "0..1", "log_factor": "ln g, g = effective load / load"},
                "index": [round(float(x), 6) for x in self.index],
                "log_factor": [round(float(y), 6) for y in self.log_factor],
                "details": self.details}

    @classmethod
    def from_json(cls, doc: Any, where: str = "<model>") -> InterferenceEffect:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise InterferenceError(f"not an {FORMAT} document", where)
        if doc.get("version") != 1:
            raise InterferenceError(f"interference effect version {doc.get('version')!r} is "
                                    "not supported (this elastore reads 1)", where)
        try:
            x = tuple(float(v) for v in doc["index"])
            y = tuple(float(v) for v in doc["log_factor"])
            return cls(x, y, str(doc.get("source", "learned")), dict(doc.get("details") or {}))
        except InterferenceError as exc:
            raise InterferenceError(exc.message, where) from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise InterferenceError(f"malformed interference effect: {exc!r}", where) from exc


@dataclass
class InterferenceLearner:
    """Learns ``g`` from a store's own measurements (see the module's docstring). The
    scikit-learn way: :meth:`fit` / :meth:`partial_fit` on ``X`` (rows of per-server load
    requests/s, read ratio, migration MiB/s per server, index) and ``y`` (the measured
    latency at the model's percentile, ms), given the capacity model whose interference-free
    slice is inverted; :meth:`predict` gives ``g``. Its whole state is :meth:`to_dict`
    (a few hundred bytes of JSON): :meth:`from_dict` continues exactly where it stopped."""

    bins: int = 10
    #: full-weight observations a bin remembers (None: never forgets, for offline fits)
    memory: float | None = 200.0
    #: pseudo-observations at the prior, per bin
    prior_count: float = 3.0
    weight: FloatArray = field(default_factory=lambda: np.zeros(0))
    mean: FloatArray = field(default_factory=lambda: np.zeros(0))
    #: per knot, the weighted mean ln g_def of its observations' indexes (where its mean
    #: residual was measured: near, not at, the knot)
    where: FloatArray = field(default_factory=lambda: np.zeros(0))
    observations: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.bins <= 100:
            raise InterferenceError(f"bins must be 1..100, got {self.bins}")
        n = self.bins + 1  # knots, 0 to 1
        if self.memory is not None and not (math.isfinite(self.memory) and self.memory > 1):
            raise InterferenceError(f"memory must be > 1 observation or None, got "
                                    f"{self.memory}")
        if not (math.isfinite(self.prior_count) and self.prior_count > 0):
            raise InterferenceError(f"prior_count must be > 0, got {self.prior_count}")
        if len(self.weight) == 0:
            self.weight = np.zeros(n)
            self.mean = np.zeros(n)
            self.where = np.zeros(n)
        self.weight = np.asarray(self.weight, dtype=float)
        self.mean = np.asarray(self.mean, dtype=float)
        self.where = np.asarray(self.where if len(self.where) else np.zeros(n), dtype=float)
        if self.weight.shape != (n,) or self.mean.shape != (n,) or \
                self.where.shape != (n,) or not (
                np.all(np.isfinite(self.weight)) and np.all(np.isfinite(self.mean))
                and np.all(np.isfinite(self.where))
                and np.all(self.weight >= 0)):
            raise InterferenceError(f"learner state must be {n} finite knots with "
                                    "weights >= 0")
        self.skipped = {k: int(self.skipped.get(k, 0)) for k in SKIP_REASONS}

    @property
    def knots(self) -> FloatArray:
        """The indexes the learner keeps a mean at: 0, 1/bins, ..., 1."""
        return np.asarray(np.linspace(0.0, 1.0, self.bins + 1))

    # -- learning ---------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, *, base: CapacityModel,
            prior: InterferenceEffect | None = None) -> InterferenceLearner:
        """Forget everything, then learn from ``X``, ``y``."""
        self.weight = np.zeros(self.bins + 1)
        self.mean = np.zeros(self.bins + 1)
        self.where = np.zeros(self.bins + 1)
        self.observations = 0
        self.skipped = dict.fromkeys(SKIP_REASONS, 0)
        return self.partial_fit(X, y, base=base, prior=prior)

    def partial_fit(self, X: Any, y: Any, *, base: CapacityModel,
                    prior: InterferenceEffect | None = None) -> InterferenceLearner:
        """Learn from more observations, in order. Each skipped one is counted by reason
        (:attr:`skipped`); :meth:`observe` says which. ``prior``: as for :meth:`effect`."""
        self.observe(X, y, base=base, prior=prior)
        return self

    def observe(self, X: Any, y: Any, *, base: CapacityModel,
                prior: InterferenceEffect | None = None) -> list[str]:
        """As :meth:`partial_fit`; returns, per row, ``"used"`` or why it was skipped."""
        x = np.asarray(X, dtype=float)
        if x.ndim == 1:
            x = x[None, :]
        lat = np.atleast_1d(np.asarray(y, dtype=float))
        if x.ndim != 2 or x.shape[1] != 4 or lat.shape != (x.shape[0],):
            raise InterferenceError("X must be rows of (load_rps, read_ratio, "
                                    "migration_mibps, interference) and y one latency (ms) "
                                    f"per row; got {x.shape} and {lat.shape}")
        out: list[str] = []
        # in blocks, each judged by the effect learned before it (see _residuals)
        for at in range(0, len(lat), BLOCK):
            xs, ys = x[at:at + BLOCK], lat[at:at + BLOCK]
            z, w, why = self._residuals(xs, ys, base, self.effect(prior))
            for k in range(len(why)):
                if why[k] != "used":
                    self.skipped[why[k]] += 1
                    continue
                # shared by the two knots around the index, linearly (a soft bin): an index
                # on a knot teaches that knot alone, one between two teaches both
                ell_i = float(log_definition(xs[k, 3]))
                pos = float(xs[k, 3]) * self.bins
                b = min(int(pos), self.bins - 1)
                t = pos - b
                for knot, share in ((b, 1.0 - t), (b + 1, t)):
                    wk = w[k] * share
                    if wk <= 0:
                        continue
                    decay = 1.0 if self.memory is None else (1.0 - 1.0 / self.memory) ** wk
                    self.weight[knot] = decay * self.weight[knot] + wk
                    share_w = wk / self.weight[knot]
                    self.mean[knot] += share_w * (z[k] - self.mean[knot])
                    self.where[knot] += share_w * (ell_i - self.where[knot])
                    # the state is kept at STATE_DIGITS significant digits, so that its
                    # JSON (the CR status) is short and reads back exactly
                    for arr in (self.weight, self.mean, self.where):
                        arr[knot] = _short(float(arr[knot]))
                self.observations += 1
            out += why
        return out

    def _residuals(self, x: FloatArray, lat: FloatArray, base: CapacityModel,
                   now: InterferenceEffect) -> tuple[FloatArray, FloatArray, list[str]]:
        """Per row: the residual ``z``, its weight, and ``"used"`` or why it is skipped.

        The weight and the ``flat`` test are judged where the observation is *expected* to
        land (``L * g(i)`` by the effect learned so far, ``now``), never where its noisy
        latency puts it: a weight that grew with the noise (a latency read high lands on a
        steeper part of the curve) would bias the mean upwards (measured: +3 to +9 % of
        ``g`` at 150 observations with 20 % noise)."""
        from elastore.models.capacity import CLIP_X_SLO

        n = len(lat)
        why = ["used"] * n
        z = np.zeros(n)
        w = np.zeros(n)
        load, r, m, i = x.T
        ok = np.isfinite(x).all(axis=1) & np.isfinite(lat) & (lat > 0) & (load > 0) & (
            r >= 0) & (r <= 1) & (m >= 0) & (i >= 0) & (i <= 1)
        for k in np.flatnonzero(~ok):
            why[k] = "missing"
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            return z, w, why
        top = float(base.load_axis[-1])
        grid = np.linspace(0.0, top, LOAD_POINTS)
        curves = np.asarray(base.latency_ms(grid[:, None], r[idx][None, :], m[idx][None, :],
                                            0.0))  # (G, n): the interference-free slice
        expected = load[idx] * now.factor(i[idx])
        ceiling = CLIP_X_SLO * base.slo_ms
        for col, k in enumerate(idx):
            curve = np.maximum.accumulate(curves[:, col])
            # where it should land: the curve's elasticity d ln latency / d ln load there,
            # over loads x0.8 .. x1.25 of it (a boosted model's curve has small steps); on
            # the curve's final plateau (saturated, past what the model resolves) steep
            e = float(expected[col])
            lo = float(np.interp(0.8 * e, grid, curve))
            hi = float(np.interp(1.25 * e, grid, curve))
            if lo >= float(curve[-1]) * (1 - 1e-9) or lo >= ceiling * (1 - 1e-3):
                eps = 1.0
            elif 0.8 * e <= grid[1] or lo <= 0:
                eps = 0.0  # a load indistinguishable from none
            else:
                eps = math.log(hi / lo) / math.log(1.25 / 0.8)
            if not eps >= MIN_ELASTICITY:
                why[k] = "flat"
                continue
            p = float(lat[k])
            if not float(curve[0]) < p < min(float(curve[-1]), ceiling):
                why[k] = "range"
                continue
            # the first grid load whose latency reaches p, and linear interpolation before it
            j = min(max(int(np.searchsorted(curve, p, side="left")), 1), len(grid) - 1)
            a0, a1 = float(curve[j - 1]), float(curve[j])
            frac = (p - a0) / (a1 - a0) if a1 > a0 else 1.0
            l_eff = float(grid[j - 1] + frac * (grid[j] - grid[j - 1]))
            if l_eff <= 0:
                why[k] = "range"
                continue
            lat_e = float(np.interp(e, grid, curve))
            near = math.exp(-0.5 * (math.log(lat_e / base.slo_ms) / BORDER_WIDTH) ** 2)
            w[k] = min(1.0, eps * eps) * (1.0 + BORDER_WEIGHT * near) / (1.0 + BORDER_WEIGHT)
            z[k] = math.log(l_eff / float(load[k])) - float(log_definition(i[k]))
        return z, w, why

    # -- the effect -------------------------------------------------------------------------
    def effect(self, prior: InterferenceEffect | None = None) -> InterferenceEffect:
        """The learned ``g``: the bins' posterior residuals on the prior (default: the
        definition) over the definition, monotone, ``g(0) = 1``."""
        c = self.knots
        p = np.zeros(len(c)) if prior is None else (
            np.log(prior.factor(c)) - log_definition(c))
        n0 = self.prior_count
        # the shape the data says overall: the residual's regression on ln g_def (a probe
        # that misreads the slowdown as g_def^(1 + beta)), itself with n0 pseudo-observations
        # of beta = 0 at index 0.5; every knot's own prior is the prior moved by it
        ell = log_definition(c)
        w = self.weight
        beta = float(np.sum(w * self.where * (self.mean - p))
                     / (np.sum(w * self.where ** 2) + n0 * math.log(2.0) ** 2))
        # each knot's data measured its residual at ``where`` (its observations' mean
        # ln g_def), not at the knot: moved to the knot along the residual's slope there
        # (the prior's own plus beta), which removes the bias of a knot whose observations
        # lie to one side (the edge of the data) or spread over a curved stretch
        slope = np.gradient(p, ell) + beta if len(c) > 2 else np.full(len(c), beta)
        at_knot = self.mean + slope * (ell - self.where)
        # a knot's own prior: the prior moved by the fitted shape, up to the highest index
        # observed; past it, by what it moved there (the prior's rise kept: a misreading
        # seen at 0.5 is not extrapolated in proportion to 0.9)
        top = float(np.max(self.where[w > 0])) if np.any(w > 0) else 0.0
        wb = w + n0
        rho = (w * at_knot + n0 * (p + beta * np.minimum(ell, top))) / wb
        v = log_definition(KNOTS) + np.interp(KNOTS, c, rho)
        v = isotonic(v, np.interp(KNOTS, c, wb))
        v = np.minimum(np.maximum(v, 0.0), LOG_FACTOR_MAX)
        v[0] = 0.0
        v = np.maximum.accumulate(v)
        source = "learned" if self.observations else (prior.source if prior else "definition")
        return InterferenceEffect(tuple(KNOTS.tolist()), tuple(v.tolist()), source,
                                  {"observations": self.observations,
                                   "skipped": dict(self.skipped),
                                   "prior": prior.source if prior else "definition"})

    def predict(self, index: Any, prior: InterferenceEffect | None = None) -> FloatArray:
        """``g(index)`` as learned so far; vectorised."""
        return self.effect(prior).factor(index)

    def base_ratio(self) -> float | None:
        """``L_eff / L`` the lowest bin measured (its index ~0), or None without data: how
        far the store's interference-free latency is from its model's (1: as modelled)."""
        if self.weight[0] <= 0:
            return None
        return float(math.exp(self.mean[0]))

    # -- state ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The whole state, exact (floats as JSON numbers round-trip exactly)."""
        return {"version": LEARNER_VERSION, "memory": self.memory,
                "priorCount": self.prior_count,
                "bins": [[float(a), float(b), float(c)] for a, b, c in zip(
                    self.weight, self.mean, self.where, strict=True)],
                "observations": self.observations, "skipped": dict(self.skipped)}

    @classmethod
    def from_dict(cls, doc: Any) -> InterferenceLearner:
        if not isinstance(doc, dict) or doc.get("version") != LEARNER_VERSION:
            raise InterferenceError("not an interference learner state of version "
                                    f"{LEARNER_VERSION}")
        try:
            pairs: Sequence[Sequence[float]] = doc["bins"]
            weight = np.array([float(a) for a, _, _ in pairs])
            mean = np.array([float(b) for _, b, _ in pairs])
            where = np.array([float(c) for _, _, c in pairs])
            memory = doc.get("memory")
            skipped = doc.get("skipped") or {}
            if not isinstance(skipped, dict):
                raise TypeError("skipped must be an object")
            obs = int(doc.get("observations", 0))
            if obs < 0 or any(int(v) < 0 for v in skipped.values()):
                raise ValueError("counts must be >= 0")
            if len(pairs) < 2:
                raise ValueError("at least 2 knots")
            return cls(bins=len(pairs) - 1,
                       memory=None if memory is None else float(memory),
                       prior_count=float(doc.get("priorCount", 3.0)), weight=weight,
                       mean=mean, where=where, observations=obs,
                       skipped={str(k): int(v) for k, v in skipped.items()})
        except InterferenceError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise InterferenceError(f"malformed interference learner state: {exc!r}") from exc
