"""The model file that ``elastore models fit`` writes and everything else reads.

A versioned JSON document: the SLO-border (capacity) model and, optionally, the BwMan
bandwidth models. Loading parses JSON only (never pickle), caps the size, and validates
every number and shape, so an untrusted file can at worst be rejected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from elastore.models.bandwidth import BandwidthModels, fit_bandwidth
from elastore.models.capacity import SAMPLE_COLUMNS, CapacityModel, ModelError, fit_capacity
from elastore.units import MIB, bytes_to_mib

FORMAT = "elastore.models"
VERSION = 1
MAX_BYTES = 16 * MIB
FloatArray = npt.NDArray[np.float64]


@dataclass
class ModelSet:
    capacity: CapacityModel
    bandwidth: BandwidthModels = field(default_factory=lambda: BandwidthModels(None, None))
    source: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "source": self.source,
                "capacity": self.capacity.to_json(), "bandwidth": self.bandwidth.to_json()}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    def save(self, path: Path | str) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.dumps(), encoding="utf-8")
        tmp.replace(path)

    def for_slo(self, latency_ms: float, percentile: int) -> ModelSet:
        """This set with the capacity model read against another SLO (see
        :meth:`CapacityModel.for_slo`)."""
        cap = self.capacity.for_slo(latency_ms, percentile)
        return self if cap is self.capacity else replace(self, capacity=cap)

    @classmethod
    def loads(cls, text: str | bytes, where: str = "<model>") -> ModelSet:
        if len(text) > MAX_BYTES:
            raise ModelError(f"model document larger than {bytes_to_mib(MAX_BYTES):g} MiB", where)
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ModelError(f"not JSON: {exc}", where) from exc
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ModelError(f"not an {FORMAT} document (made by 'elastore models fit')", where)
        if doc.get("version") != VERSION:
            raise ModelError(f"model file version {doc.get('version')!r} is not supported "
                             f"(this elastore reads {VERSION})", where)
        return cls(
            capacity=CapacityModel.from_json(doc.get("capacity"), where),
            bandwidth=BandwidthModels.from_json(doc.get("bandwidth"), where),
            source=dict(doc.get("source") or {}),
        )

    @classmethod
    def load(cls, path: Path | str) -> ModelSet:
        path = Path(path)
        if not path.is_file():
            raise ModelError("no such model file", str(path))
        if path.stat().st_size > MAX_BYTES:
            raise ModelError(f"model file larger than {bytes_to_mib(MAX_BYTES):g} MiB", str(path))
        return cls.loads(path.read_bytes(), str(path))


def read_columns(path: Path, required: tuple[str, ...] | None, optional_pairs: tuple[
        tuple[str, str], ...] = ()) -> dict[str, FloatArray]:
    """Numeric, non-negative CSV columns; a bad cell is an error naming its line."""
    import pandas as pd

    from elastore.errors import TraceError
    from elastore.traces.readers import parse_counts

    if not path.is_file():
        raise ModelError("no such file", str(path))
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ModelError(f"not a readable CSV: {exc}", str(path)) from exc
    cols = [c.strip() for c in frame.columns]
    frame.columns = pd.Index(cols)
    wanted: list[str] = list(required or ())
    for a, b in optional_pairs:
        if a in cols and b in cols:
            wanted += [a, b]
    missing = [c for c in (required or ()) if c not in cols]
    if missing:
        raise ModelError(f"missing column(s) {', '.join(missing)} (found: {', '.join(cols)})",
                         f"{path}:1")
    if not wanted:
        raise ModelError("none of the expected column pairs "
                         + " / ".join(f"{a},{b}" for a, b in optional_pairs)
                         + f" (found: {', '.join(cols)})", f"{path}:1")
    if frame.empty:
        raise ModelError("the file has a header but no data rows", str(path))
    out = {}
    paired = {c: (a, b) for a, b in optional_pairs for c in (a, b)}
    for c in wanted:
        col = frame[c]
        if c in paired and c not in (required or ()):
            # a file may hold several curves of different lengths: a row that leaves *both*
            # cells of a pair empty does not contribute to that pair
            a, b = paired[c]
            col = col[~((frame[a].str.strip() == "") & (frame[b].str.strip() == ""))]
        try:
            out[c] = parse_counts(col.reset_index(drop=True), f"value in {c!r}", 2, str(path))
        except TraceError as exc:
            i = int((exc.where or ":2").rsplit(":", 1)[1]) - 2
            raise ModelError(exc.message, f"{path}:{int(col.index[i]) + 2}") from exc
    return out


def pool_samples(samples: dict[str, FloatArray], key: FloatArray) -> dict[str, FloatArray]:
    """One row per distinct ``key``: the median of the latency percentiles and the mean of
    everything else. Several short windows of one profiled point, pooled this way, are a
    far steadier sample than each window alone: a single GC pause or compaction makes one
    window's p95 jump several-fold, and the median ignores it."""
    keys, inverse = np.unique(key, return_inverse=True)
    out: dict[str, FloatArray] = {}
    for name, col in samples.items():
        agg = np.median if name.endswith("_ms") else np.mean
        out[name] = np.array([agg(col[inverse == k]) for k in range(len(keys))])
    return out


#: how ``elastore models fit`` models interference: ``profiled``, the boosted fit's own
#: axis (the paper's offline Hubbub-scale model, clamped past the largest profiled index);
#: ``learned``, the effect g(i) learned from the samples' measured index on the
#: interference-free slice (:mod:`elastore.hubbub.effect`), defined on all of [0, 1]
INTERFERENCE_EFFECTS = ("profiled", "learned")


def fit_models(samples_csv: Path, slo_ms: float, percentile: int = 95,
               bandwidth_csv: Path | None = None, pool_by: str | None = None,
               interference_effect: str = "profiled") -> ModelSet:
    if interference_effect not in INTERFERENCE_EFFECTS:
        raise ModelError(f"interference effect must be one of {', '.join(INTERFERENCE_EFFECTS)}"
                         f", got {interference_effect!r}")
    samples = read_columns(samples_csv, SAMPLE_COLUMNS + ((pool_by,) if pool_by else ()))
    if pool_by:
        samples = pool_samples({k: v for k, v in samples.items() if k != pool_by},
                               samples[pool_by])
    interference = samples["interference"]
    if np.any(interference > 1):
        raise ModelError("interference is an index in [0, 1]; a value above 1 was found",
                         str(samples_csv))
    capacity = fit_capacity(samples, slo_ms, percentile)
    if interference_effect == "learned":
        capacity = learn_interference(capacity, samples, percentile)
    bandwidth = BandwidthModels(None, None)
    if bandwidth_csv is not None:
        cols = read_columns(bandwidth_csv, None, (("client_mbit", "served_rps"),
                                                  ("migration_mbit", "migration_mibps")))
        bandwidth = fit_bandwidth(cols)
    return ModelSet(capacity, bandwidth, {"samples": str(samples_csv),
                                          "bandwidth": str(bandwidth_csv or ""),
                                          "pooled_by": pool_by or "",
                                          "interference_effect": interference_effect})


def learn_interference(capacity: CapacityModel, samples: dict[str, FloatArray],
                       percentile: int = 95) -> CapacityModel:
    """``capacity``'s interference-free slice with the effect g(i) learned from the samples
    (their measured ``interference`` column and latency), never forgetting (a profile's
    samples are all equally current); the samples without interference are observations
    too (they pin the bins near 0)."""
    from elastore.hubbub.effect import InterferenceLearner

    read = np.asarray(samples["read_rps"], dtype=float)
    load = read + np.asarray(samples["write_rps"], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        rr = np.where(load > 0, read / np.where(load > 0, load, 1), np.nan)
    x = np.column_stack([load, rr, samples["migration_mibps"], samples["interference"]])
    learner = InterferenceLearner(memory=None).fit(x, samples[f"p{percentile}_ms"],
                                                   base=capacity)
    if learner.observations == 0:
        raise ModelError("no sample could teach the interference effect (every one was "
                         f"outside the invertible range: {learner.skipped}); fit with "
                         "--interference-effect profiled")
    return capacity.with_interference_effect(learner.effect())
