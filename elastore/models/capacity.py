"""The SLO border: per-server capacity under a latency SLO, and how migration and
interference shrink it (reference text, Figs 5.13 and 5.24).

**Method.** A gradient-boosted regression of *inverse* latency (SLO / p95, or p99) on
``(load_rps, read_ratio, migration_mibps, interference)``, with monotone constraints:
latency never falls as load, migration or interference rise (scikit-learn
``HistGradientBoostingRegressor(monotonic_cst=...)``). For a queueing server the inverse
latency falls about linearly with load, so trees follow it well, while log latency has a
knee that piecewise-constant trees smear (measured: capacity 20-30 % low). Boosting
assumes no queueing law; the constraints encode physics that noisy data may not show, and
make the capacity monotone by construction. Latencies beyond 4 x the SLO count as
"violated" and are not resolved further: only the border matters.

**What is saved.** The fitted model is tabulated on a grid spanning the profiled region:
log latency at every (load, read ratio, migration, interference) grid point, made exactly
monotone along the constrained axes, plus the derived capacity table. That table *is* the
model at run time: a versioned JSON document of numbers (no pickle, nothing executable),
evaluated by multilinear interpolation. Queries outside the profiled read ratio and
interference are clamped to its edge (``in_profile`` says so, and an interference above the
profiled axis raises :class:`InterferenceClampWarning` once per model).

**Interference, two ways.** The *profiled* axis above is the paper's offline Hubbub-scale
model: the boosted fit along the interference the profile recorded, clamped past its top.
:meth:`CapacityModel.with_interference_effect` replaces it with an *effect* ``g(i)``
(:mod:`elastore.hubbub.effect`, learned from measurements, defined on all of [0, 1]):
the interference-free slice serves ``L`` at index ``i`` as it serves ``L * g(i)`` at index 0,
exactly (``latency(L, r, m, i) = latency0(L g(i), r, m)``,
``capacity(r, m, i) = capacity0(r, m) / g(i)``), so the planner and the simulator query it
unchanged. Such a model is written as version 2 of the document (version 1 readers refuse
it rather than misread it).

**Beyond the profiled migration rate** a migration takes capacity as the profile's trend
says (the steepest of the last segment's, the mean, and a slope that saturates the server
at twice the largest profiled rate): the server serves its load as if it were larger by
the capacity lost, at the largest profiled rate. BwMan's f() itself never exceeds the
profiled rates.

**Beyond the profiled load** latency is extrapolated upward, never clamped: a server
loaded past anything measured is a queue that grows. The inverse latency (SLO / latency)
of a queueing server falls about linearly with load (M/M/1: it reaches 0 at saturation),
so it is continued as a line from the edge, with the steepest of three slopes: the last
measured segment's, the mean over the profiled range, and one that saturates the server
at twice the largest profiled load (for a profile whose latency barely moved). Latency is
capped at ``SATURATED_X_SLO`` x the SLO, a violation by any reading. Capacity follows
exactly: where the whole profiled range is within the SLO, it is the extrapolated
crossing, not the edge.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from elastore.errors import ElastoreError

if TYPE_CHECKING:
    from elastore.hubbub.effect import InterferenceEffect

FloatArray = npt.NDArray[np.float64]

FORMAT = "elastore.capacity-model"
VERSION = 1
VERSION_EFFECT = 2  # a model whose interference axis is an effect g(i)
SAMPLE_COLUMNS = ("read_rps", "write_rps", "migration_mibps", "interference", "p95_ms", "p99_ms")
#: the latency percentiles a model can be fitted for (the samples' ``p95_ms``, ``p99_ms``)
PERCENTILES: tuple[int, ...] = (95, 99)
CLIP_X_SLO = 4.0
SATURATED_X_SLO = 100.0  # latency of a saturated server, in SLOs (extrapolation's ceiling)
BORDER_WIDTH = 0.5  # in ln(latency / SLO): samples within ~x1.6 of the SLO ...
BORDER_WEIGHT = 4.0  # ... count up to 5 times
#: decimals of the axes in a model file
AXIS_DECIMALS = 5
GRID = {"load": 48, "read_ratio": 8, "migration": 13, "interference": 8}


class ModelError(ElastoreError):
    """A model file or a fit that cannot be used."""


class InterferenceClampWarning(UserWarning):
    """A capacity model was asked about an interference index above its profiled axis: the
    answer is the axis's top (clamped). A model with an interference effect has none."""


def _interp_axis(axis: FloatArray, x: FloatArray) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Index of the left grid point and the fraction towards the right one (clamped)."""
    x = np.clip(x, axis[0], axis[-1])
    if len(axis) == 1:
        return np.zeros(x.shape, dtype=np.int64), np.zeros(x.shape)
    j = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2)
    frac = (x - axis[j]) / (axis[j + 1] - axis[j])
    return j.astype(np.int64), frac


def multilinear(axes: list[FloatArray], table: FloatArray, points: list[FloatArray]) -> FloatArray:
    """Interpolate ``table`` (one dimension per axis) at broadcastable query arrays."""
    pts = np.broadcast_arrays(*[np.asarray(p, dtype=float) for p in points])
    idx, fr = zip(*(_interp_axis(a, p) for a, p in zip(axes, pts, strict=True)), strict=True)
    out = np.zeros(pts[0].shape)
    d = len(axes)
    for corner in range(1 << d):
        w = np.ones(pts[0].shape)
        index = []
        for k in range(d):
            bit = (corner >> k) & 1
            w = w * (fr[k] if bit else 1 - fr[k])
            index.append(idx[k] + bit if len(axes[k]) > 1 else idx[k])
        out = out + w * table[tuple(index)]
    return out


@dataclass
class CapacityModel:
    """Tabulated latency and capacity model for one server flavour and one SLO."""

    slo_ms: float
    percentile: int
    load_axis: FloatArray  # requests/s per server
    read_axis: FloatArray  # read ratio, 0..1
    migration_axis: FloatArray  # MiB/s per server
    interference_axis: FloatArray  # index, 0..1
    log_latency: FloatArray  # ln(ms), shape (load, read, migration, interference)
    capacity_table: FloatArray = field(default_factory=lambda: np.zeros(0))
    training: dict[str, Any] = field(default_factory=dict)
    fit_error: dict[str, float] = field(default_factory=dict)
    method: str = "monotone HistGradientBoosting of inverse latency, tabulated"
    #: g(i) over the whole [0, 1] (None: the profiled interference axis, clamped at its top)
    interference_effect: InterferenceEffect | None = None
    _warned_clamp: bool = field(default=False, init=False, repr=False, compare=False)
    _slices: dict[tuple[float, float], tuple[FloatArray, FloatArray, FloatArray]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.interference_effect is not None and len(self.interference_axis) != 1:
            raise ModelError("a capacity model with an interference effect holds only its "
                             "interference-free slice (one interference grid point)")
        self._enforce_monotone()
        self._edge_tables()
        # always derived from the latencies (a stored table is for readers of the file)
        self.capacity_table = self._capacities()
        self._migration_tables()

    def _migration_tables(self) -> None:
        """Per (read ratio, interference) grid point: the capacity at the largest profiled
        migration rate, and how much capacity each MiB/s past it takes (the steepest of
        the last segment's slope, the mean slope, and one that saturates the server at
        twice the largest profiled rate)."""
        cap = self.capacity_table  # (R, M, I)
        mig = self.migration_axis
        top = float(mig[-1])
        edge = cap[:, -1, :]
        if top <= 0:
            self._mig_edge_cap, self._mig_slope = edge, edge  # saturated at 1 MiB/s more
            return
        slopes = [edge / top]
        if len(mig) >= 2:
            slopes.append((cap[:, -2, :] - edge) / (top - float(mig[-2])))
            slopes.append((cap[:, 0, :] - edge) / (top - float(mig[0])))
        self._mig_edge_cap = edge
        self._mig_slope = np.maximum.reduce(slopes)

    def _edge_tables(self) -> None:
        """Per (read, migration, interference) grid point: the inverse latency (SLO units)
        at the largest profiled load, and how fast it falls per request/s past it (the
        steepest of the last segment's slope, the mean slope, and saturation at twice the
        profiled load). Interpolated between grid points like the latencies."""
        inv = self.slo_ms / np.exp(self.log_latency)  # (L, R, M, I)
        grid = self.load_axis
        top = float(grid[-1])
        edge = inv[-1]
        slopes = [edge / top]
        if len(grid) >= 2:
            slopes.append((inv[-2] - edge) / (top - float(grid[-2])))
            slopes.append((inv[0] - edge) / (top - float(grid[0])))
        self._edge_inv = edge
        # non-decreasing in migration and interference, as latency is: more of either
        # never makes the extrapolated queue grow more slowly
        slope = np.maximum.reduce(slopes)
        for axis in (1, 2):
            slope = np.maximum.accumulate(slope, axis=axis)
        self._edge_slope = slope

    # -- building -----------------------------------------------------------------------
    def _enforce_monotone(self) -> None:
        lat = self.log_latency
        for axis in (0, 2, 3):  # load, migration, interference: latency non-decreasing
            lat = np.maximum.accumulate(lat, axis=axis)
        self.log_latency = lat

    def _capacities(self) -> FloatArray:
        """Capacity at every (read, migration, interference) grid point."""
        r, m, i = np.meshgrid(self.read_axis, self.migration_axis, self.interference_axis,
                              indexing="ij")
        cap = np.asarray(self.capacity(r, m, i))
        for axis in (1, 2):  # capacity non-increasing in migration and interference
            cap = np.minimum.accumulate(cap, axis=axis)
        return cap

    def for_slo(self, latency_ms: float, percentile: int) -> CapacityModel:
        """The same measured latencies read against another SLO border (the capacities
        recomputed). The percentile cannot change: the table holds one percentile's
        latencies, so asking for another is an error, not a silent approximation."""
        if percentile != self.percentile:
            raise ModelError(f"the capacity model holds p{self.percentile} latencies; an SLO "
                             f"on p{percentile} needs a model fitted for it ('elastore models "
                             f"fit --percentile {percentile}')")
        if not math.isfinite(latency_ms) or latency_ms <= 0:
            raise ModelError(f"SLO latency must be > 0 ms, got {latency_ms}")
        if latency_ms == self.slo_ms:
            return self
        return replace(self, slo_ms=float(latency_ms), capacity_table=np.zeros(0))

    # -- queries ---------------------------------------------------------------------------
    def latency_ms(self, load_rps: Any, read_ratio: Any, migration_mibps: Any = 0.0,
                   interference: Any = 0.0) -> FloatArray:
        """Predicted percentile latency (ms) per server; vectorised."""
        return np.exp(self._log_latency(load_rps, read_ratio, migration_mibps, interference))

    def _crossing(self, grid: FloatArray, log_lat: FloatArray, slo_fraction: float = 1.0
                  ) -> FloatArray:
        """Largest grid value where the (non-decreasing, piecewise-linear) log latency along
        axis 0 is still within ``slo_fraction`` x the SLO; 0 where even the first point is
        over."""
        lim = math.log(self.slo_ms * slo_fraction)
        ok = log_lat <= lim
        k = len(grid)
        last = np.where(ok.all(axis=0), k - 1, np.argmin(ok, axis=0) - 1)
        nxt = np.clip(last + 1, 0, k - 1)
        lo = np.clip(last, 0, k - 1)
        y0 = np.take_along_axis(log_lat, lo[None], axis=0)[0]
        y1 = np.take_along_axis(log_lat, nxt[None], axis=0)[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(y1 > y0, (lim - y0) / (y1 - y0), 0.0)
        val = grid[lo] + np.clip(t, 0, 1) * (grid[nxt] - grid[lo])
        return np.asarray(np.where(last < 0, 0.0, val))

    def _effective(self, load: Any, interference: Any) -> tuple[Any, Any]:
        """With an interference effect: the load an interference-free server would serve as
        this one serves ``load`` (``load * g(i)``) and index 0. Without: unchanged (an index
        above the profiled axis is clamped, and said once)."""
        if self.interference_effect is not None:
            g = self.interference_effect.factor(interference)
            return np.asarray(load, dtype=float) * g, 0.0
        self._check_clamp(interference)
        return load, interference

    def _check_clamp(self, interference: Any) -> None:
        if self._warned_clamp:
            return
        i = np.asarray(interference, dtype=float)
        top = float(self.interference_axis[-1])
        if i.size and np.nanmax(i) > top + 1e-9:
            self._warned_clamp = True
            warnings.warn(f"interference index {float(np.nanmax(i)):g} is above this capacity "
                          f"model's profiled axis (top {top:g}): it is read as {top:g} (fit "
                          "with --interference-effect learned for the whole [0, 1])",
                          InterferenceClampWarning, stacklevel=4)

    def _log_latency(self, load: Any, read_ratio: Any, migration: Any, interference: Any
                     ) -> FloatArray:
        load, interference = self._effective(load, interference)
        r = np.asarray(read_ratio, dtype=float)
        i = np.asarray(interference, dtype=float)
        m = np.asarray(migration, dtype=float)
        if np.any(m > self.migration_axis[-1]):
            load, migration = self._past_migration(load, r, m, i)
        if r.size >= 1 and np.all(r == r.flat[0]):
            # the common query (one read ratio, few interference levels): interpolate a
            # (load, migration) slice instead of the whole table, several times faster
            shape = np.broadcast_shapes(np.shape(load), r.shape, np.shape(migration), i.shape)
            r0 = float(r.flat[0])
            if i.size >= 1 and np.all(i == i.flat[0]):
                return self._at_slice(np.broadcast_to(load, shape),
                                      np.broadcast_to(migration, shape), r0, float(i.flat[0]))
            levels = np.unique(i)
            if len(levels) <= 16:
                ld = np.broadcast_to(np.asarray(load, dtype=float), shape)
                mg = np.broadcast_to(np.asarray(migration, dtype=float), shape)
                ib = np.broadcast_to(i, shape)
                out = np.empty(shape)
                for level in levels:
                    at = ib == level
                    out[at] = self._at_slice(ld[at], mg[at], r0, float(level))
                return out
        return self._log_latency_4d(load, read_ratio, migration, interference)

    def _past_migration(self, load: Any, r: FloatArray, m: FloatArray, i: FloatArray
                        ) -> tuple[FloatArray, FloatArray]:
        """A migration faster than any profiled takes capacity as the profile's trend says
        (see :meth:`_migration_tables`): the server then serves its load as if the load
        were larger by its lost capacity, at the largest profiled rate."""
        top = float(self.migration_axis[-1])
        axes = [self.read_axis, self.interference_axis]
        edge = multilinear(axes, self._mig_edge_cap, [r, i])
        slope = multilinear(axes, self._mig_slope, [r, i])
        left = np.maximum(edge - slope * np.maximum(m - top, 0.0), edge * 1e-3)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(m > top, np.where(left > 0, edge / left, 1e3), 1.0)
        return np.asarray(np.asarray(load, dtype=float) * scale), np.minimum(m, top)

    def _slice(self, r: float, i: float) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The (load, migration) table of log latency at read ratio ``r`` and interference
        ``i``, and the extrapolation's edge and slope per migration grid point. Cached."""
        key = (r, i)
        hit = self._slices.get(key)
        if hit is not None:
            return hit
        jr, fr = _interp_axis(self.read_axis, np.asarray(r))
        ji, fi = _interp_axis(self.interference_axis, np.asarray(i))
        a, b = int(jr), int(ji)
        a1 = min(a + 1, len(self.read_axis) - 1)
        b1 = min(b + 1, len(self.interference_axis) - 1)
        wr, wi = float(fr), float(fi)

        def mix(t: FloatArray) -> FloatArray:  # t: (..., R, M, I) -> (..., M)
            return np.asarray(((1 - wr) * (1 - wi)) * t[..., a, :, b]
                              + (wr * (1 - wi)) * t[..., a1, :, b]
                              + ((1 - wr) * wi) * t[..., a, :, b1]
                              + (wr * wi) * t[..., a1, :, b1])

        out = (mix(self.log_latency), mix(self._edge_inv), mix(self._edge_slope))
        if len(self._slices) > 256:
            self._slices.clear()
        self._slices[key] = out
        return out

    def _at_slice(self, load: Any, migration: Any, r: float, i: float) -> FloatArray:
        table, edge_inv, edge_slope = self._slice(r, i)
        ld = np.asarray(load, dtype=float)
        jl, fl = _interp_axis(self.load_axis, ld)
        jm, fm = _interp_axis(self.migration_axis, np.asarray(migration, dtype=float))
        jl1 = np.minimum(jl + 1, len(self.load_axis) - 1)
        jm1 = np.minimum(jm + 1, len(self.migration_axis) - 1)
        out = np.array((1 - fl) * (1 - fm) * table[jl, jm] + fl * (1 - fm) * table[jl1, jm]
                       + (1 - fl) * fm * table[jl, jm1] + fl * fm * table[jl1, jm1],
                       dtype=float)
        top = float(self.load_axis[-1])
        past = ld > top
        if past.any():
            m = np.broadcast_to(np.asarray(migration, dtype=float), ld.shape)[past]
            y = (np.interp(m, self.migration_axis, edge_inv)
                 - np.interp(m, self.migration_axis, edge_slope) * (ld[past] - top))
            out[past] = np.maximum(math.log(self.slo_ms) - np.log(
                np.maximum(y, 1.0 / SATURATED_X_SLO)), out[past])
        return np.asarray(out)

    def _log_latency_4d(self, load: Any, read_ratio: Any, migration: Any, interference: Any
                        ) -> FloatArray:
        axes = [self.load_axis, self.read_axis, self.migration_axis, self.interference_axis]
        inside = multilinear(axes, self.log_latency, [load, read_ratio, migration, interference])
        top = float(self.load_axis[-1])
        past = np.asarray(load, dtype=float) > top
        if not past.any():
            return inside
        ld, r, m, i = (np.broadcast_to(np.asarray(a, dtype=float), inside.shape)[
            np.broadcast_to(past, inside.shape)] for a in (load, read_ratio, migration,
                                                            interference))
        y_edge, slope = self._beyond(r, m, i)
        y = y_edge - slope * (ld - top)
        out = np.array(inside, dtype=float)
        mask = np.broadcast_to(past, inside.shape)
        out[mask] = np.maximum(math.log(self.slo_ms) - np.log(
            np.maximum(y, 1.0 / SATURATED_X_SLO)), inside[mask])
        return out

    def _beyond(self, read_ratio: Any, migration: Any, interference: Any
                ) -> tuple[FloatArray, FloatArray]:
        """Inverse latency (SLO units) at the largest profiled load and its slope per
        request/s past it, at these (read ratio, migration, interference)."""
        axes = [self.read_axis, self.migration_axis, self.interference_axis]
        pts = [read_ratio, migration, interference]
        return (multilinear(axes, self._edge_inv, pts),
                multilinear(axes, self._edge_slope, pts))

    def capacity(self, read_ratio: Any, migration_mibps: Any = 0.0, interference: Any = 0.0
                 ) -> FloatArray:
        """Requests/s one server serves within the SLO; vectorised. The exact inverse of
        :meth:`latency_ms` along load, so a server loaded to its capacity sits on the SLO."""
        r, m, i = np.broadcast_arrays(np.asarray(read_ratio, dtype=float),
                                      np.asarray(migration_mibps, dtype=float),
                                      np.asarray(interference, dtype=float))
        if self.interference_effect is not None:
            g = self.interference_effect.factor(i)
            return np.asarray(self._capacity0(r, m) / g)
        self._check_clamp(i)
        return self._capacity_at(r, m, i)

    def _capacity0(self, r: FloatArray, m: FloatArray) -> FloatArray:
        return self._capacity_at(r, m, np.zeros(r.shape))

    def _capacity_at(self, r: FloatArray, m: FloatArray, i: FloatArray) -> FloatArray:
        shape = r.shape
        grid = self.load_axis
        lat = self._log_latency(grid[:, None], r.ravel()[None], m.ravel()[None],
                                i.ravel()[None])
        cap = self._crossing(grid, lat)
        # within the SLO at the largest profiled load: the crossing is past the edge
        past = lat[-1] <= math.log(self.slo_ms)
        if past.any():
            y_edge, slope = self._beyond(r.ravel()[past], m.ravel()[past], i.ravel()[past])
            cap[past] = float(grid[-1]) + (y_edge - 1.0) / slope
        return np.asarray(cap).reshape(shape)

    def servers_needed(self, load_rps: float, read_ratio: float, interference: float = 0.0,
                       headroom: float = 0.0, migration_mibps: float = 0.0) -> int:
        """Fewest servers that keep every server under the SLO border with ``headroom``
        (a fraction of capacity kept free, e.g. 0.1)."""
        if not math.isfinite(load_rps) or load_rps < 0:
            raise ModelError(f"load must be a finite number >= 0 requests/s, got {load_rps}")
        if not 0 <= headroom < 1:
            raise ModelError(f"headroom must be in [0, 1), got {headroom}")
        cap = float(self.capacity(read_ratio, migration_mibps, interference))
        usable = cap * (1 - headroom)
        if usable <= 0:
            raise ModelError(
                f"no load fits under the {self.slo_ms:g} ms SLO at read ratio {read_ratio:g}, "
                f"migration {migration_mibps:g} MiB/s, interference {interference:g}"
            )
        return max(1, math.ceil(load_rps / usable - 1e-9))

    def max_migration_rate(self, load_per_server_rps: Any, read_ratio: Any,
                           interference: Any = 0.0, slo_fraction: float = 1.0) -> FloatArray:
        """The paper's f(): the fastest migration (MiB/s per server) that keeps latency within
        ``slo_fraction`` x the SLO at this per-server load; 0 when even no migration does.
        The exact inverse of :meth:`latency_ms` along migration; vectorised."""
        load, r, i = np.broadcast_arrays(np.asarray(load_per_server_rps, dtype=float),
                                         np.asarray(read_ratio, dtype=float),
                                         np.asarray(interference, dtype=float))
        shape = load.shape
        grid = self.migration_axis
        lat = self._log_latency(load.ravel()[None], r.ravel()[None], grid[:, None],
                                i.ravel()[None])
        return self._crossing(grid, lat, slo_fraction).reshape(shape)

    def in_profile(self, load_rps: float, read_ratio: float, migration_mibps: float,
                   interference: float) -> bool:
        """Whether a query lies inside the profiled region (else it was clamped, or
        extrapolated past the largest profiled load). With an interference effect every
        index in [0, 1] is defined, and the load is the effective one (``load * g(i)``)."""
        if self.interference_effect is not None:
            if not 0 <= interference <= 1:
                return False
            load_rps = load_rps * float(self.interference_effect.factor(interference))
            inter_ok = True
        else:
            inter_ok = bool(self.interference_axis[0] <= interference
                            <= self.interference_axis[-1])
        return bool(
            self.load_axis[0] <= load_rps <= self.load_axis[-1]
            and self.read_axis[0] <= read_ratio <= self.read_axis[-1]
            and self.migration_axis[0] <= migration_mibps <= self.migration_axis[-1]
            and inter_ok
        )

    def with_interference_effect(self, effect: InterferenceEffect) -> CapacityModel:
        """This model's interference-free slice with ``effect`` as its whole interference
        axis: ``latency(L, r, m, i) = latency0(L g(i), r, m)`` and
        ``capacity(r, m, i) = capacity0(r, m) / g(i)``, exactly, for every ``i`` in [0, 1].
        The slice is the profiled axis's first point (0 for every fit that profiled an
        interference-free state; ``training["interference_base"]`` records it)."""
        base = float(self.interference_axis[0])
        training = {**self.training, "interference_base": base,
                    "interference_effect": effect.source}
        method = self.method.split("; interference:")[0]
        return CapacityModel(
            slo_ms=self.slo_ms, percentile=self.percentile, load_axis=self.load_axis,
            read_axis=self.read_axis, migration_axis=self.migration_axis,
            interference_axis=self.interference_axis[:1].copy(),
            log_latency=self.log_latency[..., :1].copy(), training=training,
            fit_error=dict(self.fit_error),
            method=f"{method}; interference: {effect.source} effect g(i) on the "
                   f"interference-free slice", interference_effect=effect)

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        def r(a: FloatArray) -> Any:
            return np.round(a, AXIS_DECIMALS).tolist()

        doc = {
            "format": FORMAT,
            "version": VERSION if self.interference_effect is None else VERSION_EFFECT,
            "method": self.method,
            "slo": {"latency_ms": self.slo_ms, "percentile": self.percentile},
            "units": {"load": "requests/s per server", "read_ratio": "fraction",
                      "migration": "MiB/s per server", "interference": "index 0..1",
                      "log_latency": "ln(ms)", "capacity": "requests/s per server"},
            "axes": {"load": r(self.load_axis), "read_ratio": r(self.read_axis),
                     "migration": r(self.migration_axis),
                     "interference": r(self.interference_axis)},
            "log_latency": r(self.log_latency),
            "capacity": r(self.capacity_table),
            "training": self.training,
            "fit_error": self.fit_error,
        }
        if self.interference_effect is not None:
            doc["interference_effect"] = self.interference_effect.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str = "<model>") -> CapacityModel:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ModelError(f"not an {FORMAT} document", where)
        if doc.get("version") not in (VERSION, VERSION_EFFECT):
            raise ModelError(f"model version {doc.get('version')!r} is not supported "
                             f"(this elastore reads {VERSION} and {VERSION_EFFECT})", where)
        effect = None
        if doc.get("version") == VERSION_EFFECT or "interference_effect" in doc:
            from elastore.hubbub.effect import InterferenceEffect, InterferenceError

            try:
                effect = InterferenceEffect.from_json(doc.get("interference_effect"), where)
            except InterferenceError as exc:
                raise ModelError(exc.message, where) from exc
        try:
            axes = doc["axes"]

            def arr(v: Any) -> FloatArray:
                a = np.asarray(v, dtype=np.float64)
                if not np.all(np.isfinite(a)):
                    raise ValueError("non-finite number")
                return a

            load, rr, mig, inter = (arr(axes[k]) for k in
                                    ("load", "read_ratio", "migration", "interference"))
            lat = arr(doc["log_latency"])
            cap = arr(doc["capacity"])
            slo = doc["slo"]
            shape = (len(load), len(rr), len(mig), len(inter))
            if lat.shape != shape or cap.shape != shape[1:]:
                raise ModelError(f"malformed model document: table shape {lat.shape} does "
                                 f"not match its axes {shape}", where)
            for name, a in (("load", load), ("read_ratio", rr), ("migration", mig),
                            ("interference", inter)):
                if len(a) > 1 and not np.all(np.diff(a) > 0):
                    raise ModelError(f"malformed model document: axis {name} is not "
                                     "increasing", where)
            if not float(slo["latency_ms"]) > 0:
                raise ModelError("malformed model document: SLO must be > 0 ms", where)
            if not load[-1] > 0:
                raise ModelError("malformed model document: the load axis must reach above "
                                 "0 requests/s", where)
            model = cls(
                slo_ms=float(slo["latency_ms"]), percentile=int(slo["percentile"]),
                load_axis=load, read_axis=rr, migration_axis=mig, interference_axis=inter,
                log_latency=lat, capacity_table=cap,
                training=dict(doc.get("training", {})), fit_error=dict(doc.get("fit_error", {})),
                method=str(doc.get("method", "")), interference_effect=effect,
            )
        except ModelError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ModelError(f"malformed model document: {exc!r}", where) from exc
        return model


#: spreads below which a profiled quantity counts as one setting (read ratio; MiB/s per
#: server; interference index)
HELD_TOLERANCE = {"read_ratio": 0.01, "migration": 0.1, "interference": 0.01}


def _held(values: FloatArray, tolerance: float) -> FloatArray:
    """``values``, or their median everywhere when they spread less than ``tolerance``."""
    if len(values) and float(np.ptp(values)) < tolerance:
        return np.full_like(values, float(np.median(values)))
    return values


def fit_capacity(samples: dict[str, FloatArray], slo_ms: float, percentile: int = 95,
                 seed: int = 0) -> CapacityModel:
    """Fit the SLO-border model from profiling samples (one row per server-interval)."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    if percentile not in PERCENTILES:
        raise ModelError(f"percentile must be one of {', '.join(map(str, PERCENTILES))}, "
                         f"got {percentile}")
    if not slo_ms > 0:
        raise ModelError(f"the SLO must be > 0 ms, got {slo_ms}")
    read = np.asarray(samples["read_rps"], dtype=float)
    write = np.asarray(samples["write_rps"], dtype=float)
    mig = np.asarray(samples["migration_mibps"], dtype=float)
    inter = np.asarray(samples["interference"], dtype=float)
    lat = np.asarray(samples[f"p{percentile}_ms"], dtype=float)
    load = read + write
    n = len(load)
    if n < 30:
        raise ModelError(f"{n} samples are too few to learn an SLO border (need >= 30)")
    with np.errstate(invalid="ignore", divide="ignore"):
        rr = np.where(load > 0, read / np.where(load > 0, load, 1), 1.0)
    # A setting the sweep held fixed (one read ratio, no migration) still varies a little
    # from window to window as measured; the trees would split on that noise and the
    # capacity jump between two neighbouring "settings" (a one-ratio sweep gave 66 and 191
    # requests/s at read ratios 0.94999 and 0.95002). Such a column is its median.
    rr, mig, inter = (_held(v, tol) for v, tol in ((rr, HELD_TOLERANCE["read_ratio"]),
                                                   (mig, HELD_TOLERANCE["migration"]),
                                                   (inter, HELD_TOLERANCE["interference"])))
    x = np.column_stack([load, rr, mig, inter])
    # The regression target is the *inverse* latency, in units of the SLO: for a queueing
    # server 1/latency falls about linearly with load (M/M/1: p95 = q S / (1 - rho)), so a
    # boosted model follows it closely, whereas log latency has a knee that piecewise-
    # constant trees smear. Past saturation it is ~0, so timeouts cannot dominate the fit.
    y = slo_ms / np.maximum(lat, 1e-3)
    below = float(np.mean(lat <= slo_ms))
    if below == 0 or below == 1:
        raise ModelError(
            f"all samples are {'above' if below == 0 else 'within'} the {slo_ms:g} ms SLO: "
            "the profile must cross the SLO border to locate it (profile higher loads)"
            if below == 1 else
            f"all samples are above the {slo_ms:g} ms SLO: profile lower loads or relax the SLO"
        )
    rng = np.random.default_rng(seed)
    test = rng.random(n) < 0.2
    params = dict(monotonic_cst=[-1, 0, -1, -1], max_iter=600, learning_rate=0.05,
                  max_leaf_nodes=31, min_samples_leaf=8, l2_regularization=0.1,
                  random_state=seed)
    # Weight the samples near the border: that is where the model is queried.
    near = np.exp(-0.5 * (np.log(np.maximum(lat, 1e-3) / slo_ms) / BORDER_WIDTH) ** 2)
    weight = 1.0 + BORDER_WEIGHT * near
    held = HistGradientBoostingRegressor(**params).fit(x[~test], y[~test],
                                                       sample_weight=weight[~test])
    pred_test = held.predict(x[test])
    est = HistGradientBoostingRegressor(**params).fit(x, y, sample_weight=weight)
    pred = est.predict(x)
    lim = 1.0  # inverse latency at the SLO, in SLO units

    def axis(values: FloatArray, k: int, lo: float | None = None) -> FloatArray:
        """Grid points: the profiled settings themselves when there are at most ``k``
        distinct ones (a designed sweep), so queries between settings interpolate linearly
        instead of jumping between tree leaves; else ``k`` evenly spaced points."""
        distinct = np.unique(np.round(values, 6))
        if len(distinct) <= k:
            out = distinct.astype(np.float64)
        else:
            a, b = (float(np.min(values)) if lo is None else lo), float(np.max(values))
            out = np.array([a]) if b <= a else np.linspace(a, b, k)
        # the model file keeps AXIS_DECIMALS (to_json): points closer than that are one
        # (a measured read ratio of 0.94999..0.95001 is one setting, not 8 points that the
        # file would write as a non-increasing axis)
        kept = np.round(out, AXIS_DECIMALS)
        return out if np.all(np.diff(kept) > 0) else np.unique(kept)

    load_axis = axis(load, GRID["load"], 0.0)
    read_axis = axis(rr, GRID["read_ratio"])
    mig_axis = axis(mig, GRID["migration"], 0.0)
    inter_axis = axis(inter, GRID["interference"], 0.0)
    mesh = np.stack(np.meshgrid(load_axis, read_axis, mig_axis, inter_axis, indexing="ij"),
                    axis=-1).reshape(-1, 4)
    inv = est.predict(mesh).reshape(len(load_axis), len(read_axis), len(mig_axis),
                                    len(inter_axis))
    floor = 1.0 / CLIP_X_SLO  # latencies beyond CLIP_X_SLO x SLO are all "violated"
    table = np.log(slo_ms / np.maximum(inv, floor))
    log_lat = np.log(np.maximum(lat, 1e-3))

    def log_of(p: FloatArray) -> FloatArray:
        return np.asarray(np.log(slo_ms / np.maximum(p, floor)))

    clip = math.log(CLIP_X_SLO * slo_ms)
    fit_error = {
        "rmse_log_latency_train": float(np.sqrt(np.mean(
            (log_of(pred) - np.minimum(log_lat, clip)) ** 2))),
        "rmse_log_latency_heldout": float(np.sqrt(np.mean(
            (log_of(pred_test) - np.minimum(log_lat[test], clip)) ** 2))),
        "slo_classification_accuracy_heldout": float(
            np.mean((pred_test >= lim) == (y[test] >= lim))),
    }
    training = {
        "samples": n,
        "within_slo_fraction": below,
        "load_rps": [float(load.min()), float(load.max())],
        "read_ratio": [float(rr.min()), float(rr.max())],
        "migration_mibps": [float(mig.min()), float(mig.max())],
        "interference": [float(inter.min()), float(inter.max())],
        f"p{percentile}_ms": [float(lat.min()), float(lat.max())],
    }
    return CapacityModel(
        slo_ms=slo_ms, percentile=percentile, load_axis=load_axis, read_axis=read_axis,
        migration_axis=mig_axis, interference_axis=inter_axis, log_latency=table,
        training=training, fit_error=fit_error,
    )
