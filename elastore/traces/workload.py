"""``elastore trace build``: the ProRenaTa workload construction (reference text, 5.3.4).

Steps, in order:

1. remove noise pages (``Main_Page``, ``Special:*`` ... : a configurable list of globs);
2. keep the top ``top_fraction`` (5 %) of the remaining pages by requests in the window;
3. turn a seeded ``write_fraction`` (5 %) of accesses into writes;
4. spread each hour over ``windows_per_hour`` (60) windows: the accesses of an hour arrive
   as a Poisson process, so given the hour's total N the window counts are
   Multinomial(N, 1/60 each), and each access is a write with probability 5 %;
5. compress time: one trace hour is replayed in ``hour_seconds`` (600 s) of wall time;
6. optionally scale every rate so that the busiest window runs at ``peak_rps``.

The result is a :class:`Workload`, saved as a versioned JSON document (``.gz`` optional)
that the load generator and the simulator both read. See docs/workload-format.md.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from elastore.errors import TraceError
from elastore.traces.readers import PageTable, hours_to_timestamps

log = logging.getLogger("elastore.traces")

FORMAT = "elastore.workload"
VERSION = 1
STAMP = "%Y-%m-%d %H:%M:%S"

#: Pages that are not content and skew the load (reference text, 5.3.4). Globs.
DEFAULT_NOISE_PAGES: tuple[str, ...] = (
    "Main_Page",
    "Special:*",
    "-",
    "Wikipedia:*",
    "Portal:*",
    "User:*",
    "User_talk:*",
    "Talk:*",
    "Help:*",
    "Template:*",
    "Category:*",
    "File:*",
    "undefined",
    "favicon.ico",
    "index.html",
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class BuildParams:
    noise_pages: tuple[str, ...] = DEFAULT_NOISE_PAGES
    top_fraction: float = 0.05
    write_fraction: float = 0.05
    windows_per_hour: int = 60
    hour_seconds: float = 600.0
    peak_rps: float | None = None
    seed: int = 0

    def validate(self) -> None:
        if not 0 < self.top_fraction <= 1:
            raise TraceError(f"top fraction must be in (0, 1], got {self.top_fraction}")
        if not 0 <= self.write_fraction <= 1:
            raise TraceError(f"write fraction must be in [0, 1], got {self.write_fraction}")
        if self.windows_per_hour < 1:
            raise TraceError(f"windows per hour must be >= 1, got {self.windows_per_hour}")
        if not self.hour_seconds > 0:
            raise TraceError(f"hour seconds must be > 0, got {self.hour_seconds}")
        if self.peak_rps is not None and not self.peak_rps > 0:
            raise TraceError(f"peak rate must be > 0 requests/s, got {self.peak_rps}")


@dataclass
class Workload:
    """A replayable workload: one row per window, and the key popularity table.

    Rates are requests/s of *replay* time. Window ``i`` starts ``start_s[i]`` seconds after
    the replay starts and lasts ``window_seconds``. ``hour_index[i]`` is the trace hour it
    came from (hours after ``first_hour``). A trace gap gives windows with NaN rates (null in
    JSON): the replayer must decide what a gap means, it is never silently filled.
    """

    first_hour: str
    window_seconds: float
    hour_seconds: float
    start_s: FloatArray
    hour_index: npt.NDArray[np.int64]
    read_rps: FloatArray
    write_rps: FloatArray
    keys: list[str]
    key_weight: FloatArray
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def total_rps(self) -> FloatArray:
        return self.read_rps + self.write_rps

    @property
    def duration_s(self) -> float:
        return float(len(self.start_s) * self.window_seconds)

    def hourly_requests(self) -> FloatArray:
        """Requests per trace hour (sum over that hour's windows), NaN for a gap hour."""
        n = int(self.hour_index.max()) + 1 if len(self.hour_index) else 0
        counts = self.total_rps * self.window_seconds
        out = np.full(n, np.nan)
        ok = ~np.isnan(counts)
        sums = np.bincount(self.hour_index[ok], weights=counts[ok], minlength=n)
        present = np.bincount(self.hour_index[ok], minlength=n) > 0
        out[present] = sums[present]
        return out

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        def nums(a: FloatArray) -> list[float | None]:
            return [None if math.isnan(v) else round(float(v), 6) for v in a]

        return {
            "format": FORMAT,
            "version": VERSION,
            "units": {"start_s": "s", "read_rps": "requests/s", "write_rps": "requests/s",
                      "window_seconds": "s", "hour_seconds": "s"},
            "first_hour": self.first_hour,
            "window_seconds": self.window_seconds,
            "hour_seconds": self.hour_seconds,
            "meta": self.meta,
            "windows": {
                "start_s": nums(self.start_s),
                "hour_index": [int(h) for h in self.hour_index],
                "read_rps": nums(self.read_rps),
                "write_rps": nums(self.write_rps),
            },
            "keys": {"name": self.keys, "weight": [float(w) for w in self.key_weight]},
        }

    def save(self, path: Path | str) -> None:
        path = Path(path)
        text = json.dumps(self.to_json(), separators=(",", ":"))
        tmp = path.with_name(path.name + ".tmp")
        if path.suffix == ".gz":
            with gzip.open(tmp, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)  # never leave a half-written workload behind

    @classmethod
    def load(cls, path: Path | str) -> Workload:
        path = Path(path)
        if not path.is_file():
            raise TraceError("no such workload file", str(path))
        try:
            with path.open("rb") as fh:
                raw = fh.read()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            doc = json.loads(raw)
        except (OSError, EOFError, ValueError) as exc:
            raise TraceError(f"not a readable workload document: {exc}", str(path)) from exc
        return cls.from_json(doc, str(path))

    @classmethod
    def from_json(cls, doc: Any, where: str = "<workload>") -> Workload:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise TraceError(f"not an {FORMAT} document", where)
        if doc.get("version") != VERSION:
            raise TraceError(
                f"workload version {doc.get('version')!r} is not supported (this is {VERSION})",
                where,
            )
        try:
            w = doc["windows"]

            def arr(v: list[float | None]) -> FloatArray:
                return np.array([np.nan if x is None else x for x in v], dtype=np.float64)

            wl = cls(
                first_hour=str(doc["first_hour"]),
                window_seconds=float(doc["window_seconds"]),
                hour_seconds=float(doc["hour_seconds"]),
                start_s=arr(w["start_s"]),
                hour_index=np.asarray(w["hour_index"], dtype=np.int64),
                read_rps=arr(w["read_rps"]),
                write_rps=arr(w["write_rps"]),
                keys=[str(k) for k in doc["keys"]["name"]],
                key_weight=np.asarray(doc["keys"]["weight"], dtype=np.float64),
                meta=dict(doc.get("meta", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"malformed workload document: {exc!r}", where) from exc
        n = len(wl.start_s)
        if not (len(wl.hour_index) == len(wl.read_rps) == len(wl.write_rps) == n):
            raise TraceError("malformed workload document: window columns differ in length",
                             where)
        if len(wl.keys) != len(wl.key_weight) or not len(wl.keys):
            raise TraceError("malformed workload document: bad key table", where)
        return wl


def noise_mask(pages: list[str], patterns: tuple[str, ...]) -> npt.NDArray[np.bool_]:
    """True for pages that match any noise glob (matched once per distinct page)."""
    exact = {p for p in patterns if not any(c in p for c in "*?[")}
    globs = [p for p in patterns if p not in exact]
    return np.array(
        [name in exact or any(fnmatch.fnmatchcase(name, g) for g in globs) for name in pages],
        dtype=bool,
    )


def build_workload(table: PageTable, params: BuildParams | None = None) -> Workload:
    """Construct the workload from per-page data (see the module doc for the steps)."""
    params = params or BuildParams()
    params.validate()
    totals = table.page_totals()
    seen = np.zeros(len(table.pages), dtype=bool)
    seen[np.unique(table.page)] = True
    noise = noise_mask(table.pages, params.noise_pages) & seen
    candidates = np.flatnonzero(seen & ~noise)
    if candidates.size == 0:
        raise TraceError("no pages left after removing noise pages", table.source)
    n_keep = max(1, math.ceil(params.top_fraction * candidates.size))
    # rank by requests (desc), ties by title, so the choice is deterministic
    names = np.array(table.pages, dtype=object)[candidates]
    order = np.lexsort((names, -totals[candidates]))
    kept = candidates[order[:n_keep]]
    kept_mask = np.zeros(len(table.pages), dtype=bool)
    kept_mask[kept] = True
    hourly = table.hourly_totals(kept_mask)
    noise_requests = float(totals[noise].sum())
    all_requests = float(totals.sum())
    kept_requests = float(totals[kept].sum())

    rng = np.random.default_rng(params.seed)
    per_hour = hourly.values
    wph = params.windows_per_hour
    n_hours = len(per_hour)
    present = ~np.isnan(per_hour)
    counts = np.full((n_hours, wph), np.nan)
    writes = np.full((n_hours, wph), np.nan)
    n_int = np.rint(per_hour[present]).astype(np.int64)
    c = rng.multinomial(n_int, np.full(wph, 1.0 / wph)).astype(np.float64)
    counts[present] = c
    writes[present] = rng.binomial(c.astype(np.int64), params.write_fraction)
    reads = counts - writes
    window_s = params.hour_seconds / wph
    read_rps = (reads / window_s).ravel()
    write_rps = (writes / window_s).ravel()
    scale = 1.0
    peak = float(np.nanmax(read_rps + write_rps))
    if params.peak_rps is not None:
        if peak <= 0:
            raise TraceError("cannot scale to a peak rate: the workload is all zeros",
                             table.source)
        scale = params.peak_rps / peak
        read_rps *= scale
        write_rps *= scale
    weights = totals[kept] / kept_requests if kept_requests > 0 else np.full(n_keep, 1 / n_keep)
    gaps = [[a.strftime(STAMP), b.strftime(STAMP)] for a, b in hourly.gaps()]
    if gaps:
        log.warning("%s: %d gap(s) kept as windows without a rate", table.source, len(gaps))
    meta = {
        "source": table.source,
        "trace_start": hourly.start.strftime(STAMP),
        "trace_end": hourly.end.strftime(STAMP),
        "trace_hours": n_hours,
        "gaps": gaps,
        "pages_seen": int(seen.sum()),
        "noise_pages_removed": int(noise.sum()),
        "noise_share_of_requests": noise_requests / all_requests if all_requests else 0.0,
        "pages_kept": int(n_keep),
        "kept_share_of_non_noise_requests": (
            kept_requests / (all_requests - noise_requests)
            if all_requests > noise_requests else 0.0
        ),
        "scale": scale,
        "peak_rps_before_scaling": peak,
        "params": {
            "noise_pages": list(params.noise_pages),
            "top_fraction": params.top_fraction,
            "write_fraction": params.write_fraction,
            "windows_per_hour": wph,
            "hour_seconds": params.hour_seconds,
            "peak_rps": params.peak_rps,
            "seed": params.seed,
        },
    }
    return Workload(
        first_hour=hourly.start.strftime(STAMP),
        window_seconds=window_s,
        hour_seconds=params.hour_seconds,
        start_s=np.arange(n_hours * wph, dtype=np.float64) * window_s,
        hour_index=np.repeat(np.arange(n_hours, dtype=np.int64), wph),
        read_rps=read_rps,
        write_rps=write_rps,
        keys=[table.pages[int(k)] for k in kept],
        key_weight=weights,
        meta=meta,
    )


def describe(wl: Workload) -> str:
    rate = wl.total_rps
    ok = ~np.isnan(rate)
    top = np.sort(wl.key_weight)[::-1]
    n1 = max(1, len(top) // 100)
    m = wl.meta
    return "\n".join([
        f"workload  {len(wl.start_s):,} windows of {wl.window_seconds:g} s "
        f"({wl.duration_s / 3600:.2f} h replay of {m.get('trace_hours', '?')} trace hours, "
        f"{m.get('trace_start', '?')} .. {m.get('trace_end', '?')})",
        f"rate      min {np.min(rate[ok]):,.1f}  mean {np.mean(rate[ok]):,.1f}  "
        f"max {np.max(rate[ok]):,.1f} requests/s; writes "
        f"{np.nansum(wl.write_rps) / max(np.nansum(rate), 1e-12):.2%}"
        + (f"; scaled x{m['scale']:.4g}" if m.get("scale", 1.0) != 1.0 else ""),
        f"pages     {m.get('pages_seen', '?'):,} seen, {m.get('noise_pages_removed', '?'):,} noise "
        f"({m.get('noise_share_of_requests', 0):.1%} of requests), {len(wl.keys):,} kept "
        f"({m.get('kept_share_of_non_noise_requests', 0):.1%} of the rest)",
        f"keys      top 1 % ({n1:,}) carry {top[:n1].sum():.1%}; most popular "
        f"{wl.keys[int(np.argmax(wl.key_weight))]!r} {top[0]:.2%}",
        f"gaps      {len(m.get('gaps', []))}",
    ])


def hours_of(wl: Workload) -> list[str]:
    """The trace hour label of each hour index."""
    base = np.datetime64(wl.first_hour.replace(" ", "T"), "h").astype(np.int64)
    n = int(wl.hour_index.max()) + 1
    return [t.strftime(STAMP) for t in hours_to_timestamps(np.arange(base, base + n))]
