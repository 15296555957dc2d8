"""A capacity model that calibrates itself on the store it runs on. Pure: no I/O, no clock.

The reference text's models are trained offline, on a profile of the target hardware, and
it names that as their main limitation. Here the operator starts from a **prior** (a
shipped profile, scaled down: a conservative guess for unknown hardware) and learns the
store's own SLO border from what it measures every period: per node, the load
(requests/s), read ratio, migration (MiB/s) and interference index, against the latency at
the SLO's percentile.

**The family.** The store is taken to behave as the prior does with its load axis
stretched and its latencies shifted: ``latency(L, r, m, i) = e^a * prior(L * e^u, r, m,
i)``. ``u`` moves the capacity (``capacity = capacity_prior(SLO e^-a) * e^-u``: other
hardware serves the same work faster or slower), ``a`` the base latency (a faster disk, a
latency read server-side rather than by the client). The prior's shape (how latency grows
with load, read ratio, migration, interference) is kept: two numbers are what a few days
of a store's own measurements can pin down, and they are enough to move a profile of one
machine onto another of the same kind. A shape that is wrong shows as the fit error
(``fit_error_pct``), which the status reports.

**Estimation.** A grid posterior over ``(u, a)``: a wide prior (``u`` normal with sd
``ln 3``, ``a`` with sd 0.25) times a Gaussian likelihood of each evidence bin's mean log
latency (sd ``sigma``; latencies past ``CLIP_X_SLO`` x the SLO are clipped on both sides:
the model does not resolve them, only that they are violations). Observations are pooled
into bins of 5 % load, 0.05 read ratio, migration and interference, each an exponentially
weighted mean (``memory``) that counts at most ``bin_cap`` times: a store that sits at one
load all night must not outvote the evening peak, and correlated errors of one operating
point must not make the posterior overconfident. Only loads, migration rates and indexes
that were **observed** are evidence; the rest of the surface is the prior's shape.

**The local fit.** The planner needs the border, and a store's curve is often not the
prior's shape (flat, then a knee): fitted to every bin alike, the many low-load bins set
``a`` and the border is missed. So the posterior is fitted again with each bin weighted by
a kernel of how near the border its load is (``exp(-(ln(load / border) / h)^2 / 2)``, ``h =
local_bandwidth``), re-centred on the new border until it stays within 1 %: local
likelihood, with weights on the inputs (never on the measured latency), so a correct shape
stays unbiased. ``local_bandwidth = 0`` is the global fit.

**Confidence** is the posterior mass within ±10 % of the median capacity (at the evidence's
read ratio, no migration, no interference). **Planning** uses the median, except that
until the border is known (observed: a latency within ``border_fraction`` of the SLO or
past it; or located: confidence at the threshold) the capacity is capped so that the load
per node the planner plans (it keeps ``headroom`` free) stays within the highest per-node
load seen within the SLO times ``1 + exploration_step``: the planner never sends a node
further into the unknown than one step past what it has seen served well. Below
``confidence_threshold`` the operator only scales out
(:attr:`Calibration.scale_in_allowed`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from elastore.models.capacity import CLIP_X_SLO, CapacityModel, ModelError

FloatArray = npt.NDArray[np.float64]

LEARNER_VERSION = 2  # 2: bins keep the mean square of ln latency (the scatter); 1 is read
U_GRID = np.linspace(math.log(1 / 16), math.log(16), 193)  # ln load scale, 2.9 % apart
A_GRID = np.linspace(-1.0, 1.0, 41)  # ln latency shift, 5 % apart
SKIP_REASONS = ("missing", "invalid")
MAX_BINS = 400
LOCAL_ROUNDS = 8  # the local fit's re-centrings at most
DIGITS = 7


def _short(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


@dataclass(frozen=True)
class Calibration:
    """What the learner makes of its evidence, for the planner and the status."""

    planning: CapacityModel  # the model the planner reads (median, exploration-capped)
    learned: CapacityModel  # the posterior median's model (what `models show` reads)
    capacity_rps: float  # median capacity per node at the reference conditions
    planning_capacity_rps: float
    prior_capacity_rps: float
    capacity_interval_rps: tuple[float, float]  # 10 % .. 90 % posterior quantiles
    confidence: float
    observed_fraction: float  # highest load seen within the SLO / the median capacity
    border_observed: bool
    exploration_cap_rps: float | None  # None: not capped (border observed, or no evidence)
    fit_error_pct: float | None  # the bins' RMS latency error at the median, in %
    samples: int
    bins: int
    read_ratio: float  # the reference conditions' read ratio
    scale_in_allowed: bool
    load_scale: float  # e^-u: capacity relative to the prior
    latency_scale: float  # e^a

    def summary(self) -> dict[str, Any]:
        """The ``status.model`` numbers (rounded)."""
        return {
            "samples": self.samples, "bins": self.bins,
            "capacityRps": round(self.capacity_rps, 3),
            "planningCapacityRps": round(self.planning_capacity_rps, 3),
            "priorCapacityRps": round(self.prior_capacity_rps, 3),
            "capacityIntervalRps": [round(x, 3) for x in self.capacity_interval_rps],
            "confidence": round(self.confidence, 4),
            "observedFraction": round(self.observed_fraction, 4),
            "borderObserved": self.border_observed,
            "explorationCapRps": None if self.exploration_cap_rps is None else
            round(self.exploration_cap_rps, 3),
            "fitErrorPct": None if self.fit_error_pct is None else round(self.fit_error_pct, 2),
            "readRatio": round(self.read_ratio, 4),
            "scaleInAllowed": self.scale_in_allowed,
            "loadScale": round(self.load_scale, 5),
            "latencyScale": round(self.latency_scale, 5),
        }


def scaled(model: CapacityModel, load_scale: float, latency_scale: float = 1.0,
           note: str = "") -> CapacityModel:
    """``model`` with its capacity times ``load_scale`` (the load axis stretched) and its
    latencies times ``latency_scale``: ``latency'(L) = latency_scale * latency(L /
    load_scale)``. The prior of an unknown machine is a profile scaled down; the simulator's
    ``--prior-scale`` is a model wrong by a known factor."""
    if not (math.isfinite(load_scale) and load_scale > 0 and math.isfinite(latency_scale)
            and latency_scale > 0):
        raise ModelError(f"scales must be finite and > 0, got load x{load_scale}, latency "
                         f"x{latency_scale}")
    method = model.method + (f"; {note}" if note else "")
    return CapacityModel(
        slo_ms=model.slo_ms, percentile=model.percentile,
        load_axis=np.asarray(model.load_axis * load_scale, dtype=float),
        read_axis=model.read_axis, migration_axis=model.migration_axis,
        interference_axis=model.interference_axis,
        log_latency=np.asarray(model.log_latency + math.log(latency_scale), dtype=float),
        training=dict(model.training), fit_error=dict(model.fit_error), method=method,
        interference_effect=model.interference_effect)


@dataclass
class CapacityLearner:
    """Learns the SLO border from a store's own measurements (see the module's docstring).
    The scikit-learn way: :meth:`fit` / :meth:`partial_fit` on ``X`` (rows of per-node load
    requests/s, read ratio, migration MiB/s per node, interference index) and ``y`` (the
    measured latency at the prior's percentile, ms), given the prior; :meth:`calibrate` is
    the prediction. Its whole state is :meth:`to_dict` (JSON): :meth:`from_dict` continues
    where it stopped."""

    sigma: float = 0.15  # sd of a bin's mean ln latency around the model
    prior_sd_load: float = math.log(3.0)
    prior_sd_latency: float = 0.25
    bin_cap: float = 4.0  # a bin counts at most this many observations
    memory: float = 20.0  # observations a bin's mean remembers
    confidence_threshold: float = 0.8
    exploration_step: float = 0.15
    border_fraction: float = 0.7
    #: the local fit's bandwidth (ln load / capacity): 0 fits every bin alike
    local_bandwidth: float = math.log(1.5)
    #: bins: (load, read ratio, migration, index, mean ln latency, weight, last seen,
    #: mean square ln latency)
    bins: dict[tuple[int, int, int, int], list[float]] = field(default_factory=dict)
    max_ok_load: float = 0.0  # the highest per-node load seen within the SLO
    border_seen: bool = False
    observations: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("sigma", "prior_sd_load", "prior_sd_latency", "bin_cap", "memory"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ModelError(f"{name} must be a number > 0, got {v!r}")
        if not 0 < self.confidence_threshold <= 1:
            raise ModelError(f"confidence_threshold must be in (0, 1], got "
                             f"{self.confidence_threshold}")
        if not 0 < self.exploration_step <= 2:
            raise ModelError(f"exploration_step must be in (0, 2], got {self.exploration_step}")
        if not (math.isfinite(self.local_bandwidth) and self.local_bandwidth >= 0):
            raise ModelError(f"local_bandwidth must be a number >= 0, got "
                             f"{self.local_bandwidth!r}")
        if not 0 < self.border_fraction <= 1:
            raise ModelError(f"border_fraction must be in (0, 1], got {self.border_fraction}")
        self.skipped = {k: int(self.skipped.get(k, 0)) for k in SKIP_REASONS}

    # -- learning ---------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, *, prior: CapacityModel) -> CapacityLearner:
        """Forget everything, then learn from ``X``, ``y``."""
        self.bins, self.max_ok_load, self.border_seen = {}, 0.0, False
        self.observations, self.skipped = 0, dict.fromkeys(SKIP_REASONS, 0)
        return self.partial_fit(X, y, prior=prior)

    def partial_fit(self, X: Any, y: Any, *, prior: CapacityModel) -> CapacityLearner:
        self.observe(X, y, prior=prior)
        return self

    def observe(self, X: Any, y: Any, *, prior: CapacityModel) -> list[str]:
        """As :meth:`partial_fit`; per row ``"used"`` or why not (``missing``: a NaN or an
        absent input, never read as 0; ``invalid``: out of range)."""
        x = np.asarray(X, dtype=float)
        if x.ndim == 1:
            x = x[None, :]
        lat = np.atleast_1d(np.asarray(y, dtype=float))
        if x.ndim != 2 or x.shape[1] != 4 or lat.shape != (x.shape[0],):
            raise ModelError("X must be rows of (load_rps, read_ratio, migration_mibps, "
                             f"interference) and y one latency (ms) per row; got {x.shape} "
                             f"and {lat.shape}")
        out = []
        for row, p in zip(x, lat, strict=True):
            load, r, m, i = (float(v) for v in row)
            if not (np.all(np.isfinite(row)) and math.isfinite(p)):
                why = "missing"
            elif load <= 0 or p <= 0 or not 0 <= r <= 1 or m < 0 or not 0 <= i <= 1:
                why = "invalid"
            else:
                why = "used"
            out.append(why)
            if why != "used":
                self.skipped[why] += 1
                continue
            self.observations += 1
            near = p >= self.border_fraction * prior.slo_ms
            # near the SLO at the highest load yet: the border (at a load already served
            # well, one window's jump is a GC pause until its operating point agrees)
            if near and load >= self.max_ok_load:
                self.border_seen = True
            if p <= prior.slo_ms:
                self.max_ok_load = max(self.max_ok_load, load)
            key = (round(math.log(load) / math.log(1.05)), round(r * 20),
                   0 if m < 0.25 else 1 + round(math.log(m / 0.25) / math.log(1.25)),
                   round(i * 20))
            y_log = math.log(min(p, CLIP_X_SLO * prior.slo_ms))
            b = self.bins.get(key)
            if b is None:
                b = [load, r, m, i, y_log, 0.0, 0.0, y_log * y_log]
                self.bins[key] = b
            w = b[5] = min(b[5] + 1.0, self.memory)
            for k, v in enumerate((load, r, m, i, y_log)):
                b[k] = _short(b[k] + (v - b[k]) / w)
            b[7] = _short(b[7] + (y_log * y_log - b[7]) / w)
            b[6] = float(self.observations)
            if w >= 2 and math.exp(b[4]) >= self.border_fraction * prior.slo_ms:
                self.border_seen = True  # an operating point whose latency is near it
            if len(self.bins) > MAX_BINS:  # the least recently seen bin goes
                del self.bins[min(self.bins, key=lambda q: self.bins[q][6])]
        return out

    # -- the posterior ------------------------------------------------------------------------
    def _reference_ratio(self) -> float:
        if not self.bins:
            return 0.95
        arr = np.array(list(self.bins.values()))
        return float(np.average(arr[:, 1], weights=np.minimum(arr[:, 5], self.bin_cap)))

    def scatter(self) -> float:
        """The store's own scatter of ln latency at one operating point (sd), pooled over
        the bins seen more than once: how far one period's percentile strays from the
        point's typical one. 0 before any bin has two observations."""
        num = den = 0.0
        for b in self.bins.values():
            w = b[5]
            if w >= 2:
                var = max(b[7] - b[4] * b[4], 0.0) * w / (w - 1)
                num += (w - 1) * var
                den += w - 1
        return math.sqrt(num / den) if den > 0 else 0.0

    def posterior(self, prior: CapacityModel, local: FloatArray | None = None
                  ) -> tuple[FloatArray, FloatArray]:
        """The normalised posterior weights on (U_GRID, A_GRID), and each bin's predicted
        ln latency per u (the prior's, before the shift ``a``), shape (bins, u). ``local``:
        a weight per bin (in the bins' order), the local fit's kernel."""
        logp = (-0.5 * (U_GRID[:, None] / self.prior_sd_load) ** 2
                - 0.5 * (A_GRID[None, :] / self.prior_sd_latency) ** 2)
        pred = np.zeros((0, len(U_GRID)))
        if self.bins:
            arr = np.array(list(self.bins.values()))
            load, r, m, i, y, w = (arr[:, k] for k in range(6))
            pred = np.log(np.asarray(prior.latency_ms(
                load[:, None] * np.exp(U_GRID)[None, :], r[:, None], m[:, None],
                i[:, None]), dtype=float))
            clip = math.log(CLIP_X_SLO * prior.slo_ms)
            # (bins, u, a): the shifted prediction, clipped as the observations are
            full = np.minimum(pred[:, :, None] + A_GRID[None, None, :], clip)
            wt = np.minimum(w, self.bin_cap)[:, None, None]
            if local is not None:
                wt = wt * local[:, None, None]
            # each observation strays from the model by the model's own error (sigma) and
            # by the store's scatter: a noisy store's evidence counts for less, so the
            # posterior does not claim a precision its measurements lack
            sd = math.hypot(self.sigma, self.scatter())
            logp = logp - 0.5 * np.sum(wt * ((y[:, None, None] - full) / sd) ** 2, axis=0)
        post = np.exp(logp - logp.max())
        return post / post.sum(), pred

    def _prior_capacity(self, prior: CapacityModel, r: float) -> FloatArray:
        """The prior's capacity per node at read ratio ``r`` (no migration, no
        interference) for an SLO of ``SLO * e^-a``, for every a of A_GRID."""
        top = float(prior.load_axis[-1])
        grid = np.linspace(0.0, 3.0 * top, 1201)
        curve = np.maximum.accumulate(np.asarray(prior.latency_ms(grid, r, 0.0, 0.0),
                                                 dtype=float))
        levels = prior.slo_ms * np.exp(-A_GRID)
        # the first load whose latency reaches the level (the curve is non-decreasing)
        out = np.empty(len(levels))
        for k, lv in enumerate(levels):
            j = int(np.searchsorted(curve, lv, side="left"))
            if j == 0:
                out[k] = 0.0
            elif j >= len(grid):
                out[k] = float(grid[-1])
            else:
                a0, a1 = float(curve[j - 1]), float(curve[j])
                t = (lv - a0) / (a1 - a0) if a1 > a0 else 1.0
                out[k] = float(grid[j - 1] + t * (grid[j] - grid[j - 1]))
        return out

    @staticmethod
    def _summary(post: FloatArray, c0: FloatArray
                 ) -> tuple[float, Callable[[float], float], float, int]:
        """The posterior's median capacity, its quantile function, the confidence (mass
        within 10 % of the median) and the index of the most probable ``a``."""
        cap = c0[None, :] * np.exp(-U_GRID)[:, None]  # (u, a)
        flat_c, flat_w = cap.ravel(), post.ravel()
        order = np.argsort(flat_c)
        sorted_c = flat_c[order]
        # each grid point's mass centred on it: quantiles interpolate between grid points
        # (in log capacity) instead of snapping to the grid's 2.9 % steps
        mid = np.cumsum(flat_w[order]) - 0.5 * flat_w[order]
        log_c = np.log(np.maximum(sorted_c, 1e-300))

        def quantile(q: float) -> float:
            return float(np.exp(np.interp(q, mid, log_c)))

        median = quantile(0.5)
        if not median > 0:
            raise ModelError("the calibrated capacity is 0: no load fits under the SLO by "
                             "the prior's shape and the evidence")
        with np.errstate(divide="ignore"):
            near = np.abs(np.log(np.maximum(flat_c, 1e-300) / median)) <= math.log(1.1)
        return median, quantile, float(flat_w[near].sum()), int(np.argmax(post.sum(axis=0)))

    def _local_weights(self, prior: CapacityModel, c0: FloatArray, median: float, ia: int
                       ) -> FloatArray | None:
        """The local fit's kernel per bin: ``exp(-(ln(load / capacity) / h)^2 / 2)``, the
        capacity at the bin's own read ratio, migration and interference by the global
        fit. None when off, with no bins, or when no bin lies near the border (then the
        global fit is all the evidence says)."""
        if self.local_bandwidth <= 0 or not self.bins or not c0[ia] > 0:
            return None
        arr = np.array(list(self.bins.values()))
        glob = scaled(prior, median / c0[ia], math.exp(float(A_GRID[ia])))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an index past the profiled axis: clamped
            caps = np.asarray(glob.capacity(arr[:, 1], arr[:, 2], arr[:, 3]), dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.log(arr[:, 0] / np.maximum(caps, 1e-300)) / self.local_bandwidth
        k = np.exp(-0.5 * np.nan_to_num(z, nan=np.inf) ** 2)
        # fewer than one bin's worth of evidence near the border: nothing to localise on
        if float(np.sum(k * np.minimum(arr[:, 5], self.bin_cap))) < self.bin_cap:
            return None
        return np.asarray(k, dtype=float)

    def calibrate(self, prior: CapacityModel, headroom: float = 0.0) -> Calibration:
        """The learned model, the one to plan with, and what the status shows. ``headroom``:
        the fraction of capacity the planner keeps free (the exploration cap allows for
        it)."""
        if not 0 <= headroom < 1:
            raise ModelError(f"headroom must be in [0, 1), got {headroom}")
        r = self._reference_ratio()
        c0 = self._prior_capacity(prior, r)  # per a
        post, pred = self.posterior(prior)
        median, quantile, confidence, ia = self._summary(post, c0)
        # the local fit: the bins near the border found so far, until the border stays put
        # (a global fit that a wrong shape put far off moves it a step at a time)
        local = None
        for _ in range(LOCAL_ROUNDS):
            k = self._local_weights(prior, c0, median, ia)
            if k is None:
                break
            local, before = k, median
            post, pred = self.posterior(prior, local)
            median, quantile, confidence, ia = self._summary(post, c0)
            if abs(math.log(median / before)) < 0.01:
                break
        # the (u, a) of the median: the most probable a, and the u giving the median there
        u_med = math.log(c0[ia] / median) if c0[ia] > 0 else 0.0
        a_med = float(A_GRID[ia])
        note = f"calibrated online: capacity x{math.exp(-u_med):.4g}, latency " \
               f"x{math.exp(a_med):.4g} ({self.observations} observations)"
        learned = scaled(prior, math.exp(-u_med), math.exp(a_med), note)
        cap_prior = float(c0[int(np.argmin(np.abs(A_GRID)))])
        # the border counts as known once seen (a latency within border_fraction of the
        # SLO, or past it) or located within 10 % by the evidence (confident)
        known = self.border_seen or confidence >= self.confidence_threshold
        capped = not known and self.max_ok_load > 0
        # the planner keeps ``headroom`` of the capacity free: the cap is set so that the
        # load per node it plans stays within (1 + step) x the highest seen within the SLO
        explore = self.max_ok_load * (1 + self.exploration_step) / (1 - headroom) \
            if capped else None
        plan_c = median if explore is None else min(median, explore)
        planning = learned if plan_c >= median else scaled(
            prior, plan_c / c0[ia], math.exp(a_med),
            note + f"; capped at {plan_c:.4g} req/s per node until the border is observed")
        fit_err = None
        if self.bins:
            arr = np.array(list(self.bins.values()))
            clip = math.log(CLIP_X_SLO * prior.slo_ms)
            at = np.minimum(np.array([np.interp(u_med, U_GRID, row) for row in pred]) + a_med,
                            clip)
            wt = np.minimum(arr[:, 5], self.bin_cap)
            if local is not None:
                wt = wt * local
            rms = math.sqrt(float(np.average((arr[:, 4] - at) ** 2, weights=wt)))
            fit_err = 100.0 * (math.exp(rms) - 1.0)
        return Calibration(
            planning=planning, learned=learned, capacity_rps=median,
            planning_capacity_rps=plan_c, prior_capacity_rps=cap_prior,
            capacity_interval_rps=(quantile(0.1), quantile(0.9)), confidence=confidence,
            observed_fraction=min(1.0, self.max_ok_load / median),
            border_observed=self.border_seen, exploration_cap_rps=explore,
            fit_error_pct=fit_err, samples=self.observations, bins=len(self.bins),
            read_ratio=r, scale_in_allowed=confidence >= self.confidence_threshold,
            load_scale=math.exp(-u_med), latency_scale=math.exp(a_med))

    # -- state ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"version": LEARNER_VERSION,
                "params": {"sigma": self.sigma, "priorSdLoad": self.prior_sd_load,
                           "priorSdLatency": self.prior_sd_latency, "binCap": self.bin_cap,
                           "memory": self.memory,
                           "confidenceThreshold": self.confidence_threshold,
                           "explorationStep": self.exploration_step,
                           "borderFraction": self.border_fraction,
                           "localBandwidth": self.local_bandwidth},
                "bins": [[*k, *v] for k, v in self.bins.items()],
                "maxOkLoadRps": self.max_ok_load, "borderSeen": self.border_seen,
                "observations": self.observations, "skipped": dict(self.skipped)}

    @classmethod
    def from_dict(cls, doc: Any) -> CapacityLearner:
        if not isinstance(doc, dict) or doc.get("version") not in (1, LEARNER_VERSION):
            raise ModelError(f"not a capacity learner state of version 1..{LEARNER_VERSION}")
        try:
            p = doc.get("params") or {}
            bins: dict[tuple[int, int, int, int], list[float]] = {}
            fields = 12 if doc.get("version") == 2 else 11
            for row in doc.get("bins") or []:
                if len(row) != fields:
                    raise ValueError(f"a bin has {len(row)} fields, not {fields}")
                key = (int(row[0]), int(row[1]), int(row[2]), int(row[3]))
                vals = [float(v) for v in row[4:]]
                if fields == 11:  # version 1: no scatter kept; the mean's square
                    vals.append(vals[4] * vals[4])
                if not all(math.isfinite(v) for v in vals) or vals[0] <= 0 or vals[5] <= 0:
                    raise ValueError(f"bad bin {row!r}")
                bins[key] = vals
            skipped = doc.get("skipped") or {}
            if not isinstance(skipped, dict):
                raise TypeError("skipped must be an object")
            max_ok = float(doc.get("maxOkLoadRps", 0.0))
            obs = int(doc.get("observations", 0))
            if not (math.isfinite(max_ok) and max_ok >= 0 and obs >= 0):
                raise ValueError("counts must be finite and >= 0")
            return cls(sigma=float(p.get("sigma", 0.15)),
                       prior_sd_load=float(p.get("priorSdLoad", math.log(3.0))),
                       prior_sd_latency=float(p.get("priorSdLatency", 0.25)),
                       bin_cap=float(p.get("binCap", 4.0)), memory=float(p.get("memory", 20.0)),
                       confidence_threshold=float(p.get("confidenceThreshold", 0.8)),
                       exploration_step=float(p.get("explorationStep", 0.15)),
                       border_fraction=float(p.get("borderFraction", 0.7)),
                       local_bandwidth=float(p.get("localBandwidth", cls.local_bandwidth)),
                       bins=bins, max_ok_load=max_ok, border_seen=bool(doc.get("borderSeen")),
                       observations=obs, skipped={str(k): int(v) for k, v in skipped.items()})
        except ModelError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"malformed capacity learner state: {exc!r}") from exc
