"""BwMan's bandwidth models (reference text, 5.2.1) and the bandwidth split (5.2.2).

* client model: requests/s served within the SLO as a function of the client bandwidth
  allocated (Mbit/s);
* migration model: migration speed (MiB/s) as a function of migration bandwidth (Mbit/s).

Both are isotonic regressions (scikit-learn ``IsotonicRegression``): non-decreasing, no
functional form assumed (the paper's Fig. 5.2 is linear then saturating; streaming has a
protocol overhead). They are saved as their breakpoints and evaluated by linear
interpolation; the inverse (bandwidth needed for a load or a speed) interpolates the same
breakpoints the other way.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from elastore.models.capacity import ModelError

FloatArray = npt.NDArray[np.float64]
MIN_LEVELS = 3


class Policy(enum.StrEnum):
    PREFER_CLIENTS = "PreferClients"
    PREFER_MIGRATION = "PreferMigration"


@dataclass(frozen=True)
class MonotoneCurve:
    """A non-decreasing piecewise-linear map ``x -> y`` given by its breakpoints."""

    x: FloatArray
    y: FloatArray
    x_unit: str
    y_unit: str

    def __call__(self, x: float) -> float:
        return float(np.interp(x, self.x, self.y))

    def inverse(self, y: float) -> float:
        """Smallest x reaching ``y``; ``inf`` if ``y`` is beyond the measured range."""
        if y <= self.y[0]:
            return float(self.x[0]) if y > 0 else 0.0
        if y > self.y[-1]:
            return float("inf")
        j = int(np.searchsorted(self.y, y, side="left"))
        y0, y1 = self.y[j - 1], self.y[j]
        x0, x1 = self.x[j - 1], self.x[j]
        return float(x0 + (y - y0) / (y1 - y0) * (x1 - x0)) if y1 > y0 else float(x1)

    def to_json(self) -> dict[str, Any]:
        return {"x": np.round(self.x, 5).tolist(), "y": np.round(self.y, 5).tolist(),
                "x_unit": self.x_unit, "y_unit": self.y_unit}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> MonotoneCurve:
        try:
            x = np.asarray(doc["x"], dtype=float)
            y = np.asarray(doc["y"], dtype=float)
            c = cls(x, y, str(doc["x_unit"]), str(doc["y_unit"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"malformed bandwidth curve: {exc!r}", where) from exc
        if (len(x) != len(y) or len(x) < 2 or not np.all(np.isfinite(x))
                or not np.all(np.isfinite(y)) or np.any(np.diff(x) <= 0)
                or np.any(np.diff(y) < 0)):
            raise ModelError("malformed bandwidth curve: breakpoints must be finite, "
                             "x increasing and y non-decreasing", where)
        return c


def fit_curve(x: FloatArray, y: FloatArray, x_unit: str, y_unit: str) -> MonotoneCurve:
    from sklearn.isotonic import IsotonicRegression

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    # a shaped sweep gives one pooled sample per bandwidth level (elastore lab
    # profile-bandwidth: 4 levels by default); with the origin that is enough for a
    # monotone curve, fewer levels are not
    if len(np.unique(x[ok])) < MIN_LEVELS:
        raise ModelError(f"too few bandwidth samples for {y_unit} vs {x_unit} (need >= "
                         f"{MIN_LEVELS} distinct bandwidths, got {len(np.unique(x[ok]))})")
    iso = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(x[ok], y[ok])
    bx = np.asarray(iso.X_thresholds_, dtype=float)
    by = np.asarray(iso.y_thresholds_, dtype=float)
    # anchor at the origin: no bandwidth, no throughput
    if bx[0] > 0:
        bx = np.concatenate([[0.0], bx])
        by = np.concatenate([[0.0], by])
    keep = np.concatenate([[True], np.diff(bx) > 0])
    return MonotoneCurve(bx[keep], by[keep], x_unit, y_unit)


@dataclass(frozen=True)
class Allocation:
    """A per-server bandwidth split, in Mbit/s, and what it achieves."""

    client_mbit: float
    migration_mbit: float
    client_needed_mbit: float
    migration_needed_mbit: float
    migration_mibps: float  # the speed the migration share buys
    clients_satisfied: bool
    migration_satisfied: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class BandwidthModels:
    client: MonotoneCurve | None  # served requests/s vs client Mbit/s
    migration: MonotoneCurve | None  # migration MiB/s vs migration Mbit/s

    def client_mbit_for(self, load_rps: float) -> float:
        if self.client is None:
            raise ModelError("no client bandwidth model (fit with --bandwidth ... "
                             "client_mbit,served_rps)")
        return self.client.inverse(load_rps)

    def migration_mbit_for(self, mibps: float) -> float:
        if self.migration is None:
            raise ModelError("no migration bandwidth model (fit with --bandwidth ... "
                             "migration_mbit,migration_mibps)")
        return self.migration.inverse(mibps)

    def split(self, total_mbit: float, client_load_rps: float, wanted_migration_mibps: float,
              policy: Policy | str = Policy.PREFER_CLIENTS) -> Allocation:
        """Split ``total_mbit`` of one server between clients and migration.

        Each class is given what its model says it needs; spare bandwidth goes to the
        preferred class. When the total is not enough, the preferred class is satisfied
        first and the other gets the rest (reference text, 5.2.2).
        """
        policy = Policy(policy)
        if not total_mbit > 0:
            raise ModelError(f"total bandwidth must be > 0 Mbit/s, got {total_mbit}")
        need_c = self.client_mbit_for(max(client_load_rps, 0.0))
        need_m = self.migration_mbit_for(wanted_migration_mibps) if wanted_migration_mibps > 0 \
            else 0.0
        beyond = []  # a need past a model's measured range is unknown, not satisfiable
        if math.isinf(need_c):
            assert self.client is not None
            beyond.append(f"{client_load_rps:.0f} req/s is beyond the client model "
                          f"(measured up to {self.client.y[-1]:.0f} req/s at "
                          f"{self.client.x[-1]:.1f} Mbit/s)")
        if math.isinf(need_m):
            assert self.migration is not None
            beyond.append(f"{wanted_migration_mibps:.2f} MiB/s is beyond the migration model "
                          f"(measured up to {self.migration.y[-1]:.2f} MiB/s at "
                          f"{self.migration.x[-1]:.1f} Mbit/s)")
        short = "; ".join(beyond) if beyond else \
            f"short by {need_c + need_m - total_mbit:.1f} Mbit/s"
        if need_c + need_m <= total_mbit:
            spare = total_mbit - need_c - need_m
            if policy is Policy.PREFER_CLIENTS or need_m == 0:
                c, m = need_c + spare, need_m
            else:
                c, m = need_c, need_m + spare
            reason = (f"both fit: clients need {need_c:.1f}, migration {need_m:.1f} of "
                      f"{total_mbit:.1f} Mbit/s; spare {spare:.1f} to "
                      f"{'clients' if c > need_c else 'migration'}")
        elif policy is Policy.PREFER_CLIENTS:
            c = min(need_c, total_mbit)
            m = total_mbit - c
            reason = (f"{short}: PreferClients gives clients {c:.1f}, migration the "
                      f"remaining {m:.1f}")
        else:
            m = min(need_m, total_mbit)
            c = total_mbit - m
            reason = (f"{short}: PreferMigration gives migration {m:.1f}, clients the "
                      f"remaining {c:.1f}")
        speed = self.migration(m) if self.migration is not None else 0.0
        return Allocation(
            client_mbit=c, migration_mbit=m, client_needed_mbit=need_c,
            migration_needed_mbit=need_m, migration_mibps=min(speed, wanted_migration_mibps)
            if wanted_migration_mibps > 0 else 0.0,
            clients_satisfied=c >= need_c - 1e-9, migration_satisfied=m >= need_m - 1e-9,
            reason=reason,
        )

    def to_json(self) -> dict[str, Any]:
        return {"client": self.client.to_json() if self.client else None,
                "migration": self.migration.to_json() if self.migration else None}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> BandwidthModels:
        if doc is None:
            return cls(None, None)
        if not isinstance(doc, dict):
            raise ModelError("malformed bandwidth section", where)
        c = doc.get("client")
        m = doc.get("migration")
        return cls(MonotoneCurve.from_json(c, where) if c else None,
                   MonotoneCurve.from_json(m, where) if m else None)


def fit_bandwidth(columns: dict[str, FloatArray]) -> BandwidthModels:
    """From a BW.csv: ``client_mbit,served_rps`` and/or ``migration_mbit,migration_mibps``."""
    client = migration = None
    if "client_mbit" in columns and "served_rps" in columns:
        client = fit_curve(columns["client_mbit"], columns["served_rps"], "Mbit/s",
                           "requests/s")
    if "migration_mbit" in columns and "migration_mibps" in columns:
        migration = fit_curve(columns["migration_mbit"], columns["migration_mibps"], "Mbit/s",
                              "MiB/s")
    if client is None and migration is None:
        raise ModelError("the bandwidth CSV needs client_mbit,served_rps and/or "
                         "migration_mbit,migration_mibps columns")
    return BandwidthModels(client, migration)
