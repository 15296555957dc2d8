"""A documented latency law: placeholder physics until a lab profile exists, and the
known law that the model-recovery test fits.

Per server, per request service time ``S = s0 * (r + w (1 - r)) * (1 + k i)`` (reads cost
1, writes ``w``; interference index ``i`` in [0, 1] stretches service by up to ``1 + k``).
Data migration at ``m`` MiB/s uses ``m / m_full * (1 + k i)`` of the server.
Utilisation ``rho = lambda S + u_m``; for rho < 1 the M/M/1 response time is exponential
with mean ``S / (1 - rho)``, so p95 = ln(20) S / (1 - rho) and p99 = ln(100) S / (1 - rho).
Past saturation, latency is ``timeout_ms``.

The default parameters are PLACEHOLDERS, chosen to be of the order the lab notes measured
for Cassandra 5 on 2 cores (a few hundred requests/s per node, MiB/s-scale streaming);
they are not measurements. Reports say so whenever they are used.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class LatencyLaw:
    s0_ms: float = 2.0  # service time of one read
    write_cost: float = 1.5  # a write costs this many reads
    m_full_mibps: float = 40.0  # migration rate that alone saturates a server
    interference_k: float = 1.0  # full interference doubles service times
    timeout_ms: float = 5000.0

    def service_ms(self, read_ratio: FloatArray | float, interference: FloatArray | float
                   ) -> FloatArray:
        r = np.asarray(read_ratio, dtype=float)
        i = np.asarray(interference, dtype=float)
        cost = r + self.write_cost * (1 - r)
        return np.asarray(self.s0_ms * cost * (1 + self.interference_k * i))

    def rho(self, load_rps: FloatArray | float, read_ratio: FloatArray | float,
            migration_mibps: FloatArray | float, interference: FloatArray | float) -> FloatArray:
        s = self.service_ms(read_ratio, interference) / 1000.0
        i = np.asarray(interference, dtype=float)
        um = np.asarray(migration_mibps, dtype=float) / self.m_full_mibps * (
            1 + self.interference_k * i)
        return np.asarray(np.asarray(load_rps, dtype=float) * s + um)

    def latency_ms(self, load_rps: FloatArray | float, read_ratio: FloatArray | float,
                   migration_mibps: FloatArray | float, interference: FloatArray | float,
                   percentile: int = 95) -> FloatArray:
        q = {95: math.log(20), 99: math.log(100)}[percentile]
        s = self.service_ms(read_ratio, interference)
        rho = self.rho(load_rps, read_ratio, migration_mibps, interference)
        with np.errstate(divide="ignore", invalid="ignore"):
            lat = np.where(rho < 1, q * s / np.maximum(1 - rho, 1e-12), self.timeout_ms)
        return np.asarray(np.minimum(lat, self.timeout_ms))

    def capacity_rps(self, read_ratio: float, migration_mibps: float, interference: float,
                     slo_ms: float, percentile: int = 95) -> float:
        """The exact per-server capacity under the SLO (for tests and reports)."""
        q = {95: math.log(20), 99: math.log(100)}[percentile]
        s_ms = float(self.service_ms(read_ratio, interference))
        um = migration_mibps / self.m_full_mibps * (1 + self.interference_k * interference)
        rho_max = 1 - q * s_ms / slo_ms - um
        return max(0.0, rho_max / (s_ms / 1000.0))

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def sample_profile(law: LatencyLaw, seed: int = 0, noise: float = 0.08,
                   read_ratios: tuple[float, ...] = (0.5, 0.7, 0.9, 1.0),
                   migrations_mibps: tuple[float, ...] = (0, 5, 10, 15, 20, 25),
                   interferences: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75),
                   load_steps: int = 24, slo_ms: float = 30.0) -> dict[str, FloatArray]:
    """Profiling samples from ``law``, laid out as the lab profiler sweeps: for every
    (read ratio, migration, interference) setting, load rises in ``load_steps`` steps from
    near zero to 1.3 x that setting's capacity (a profiler ramps each setting until it
    violates the SLO, so every sweep resolves its own border equally well), with
    lognormal measurement noise."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list[float]] = {c: [] for c in
                                    ("read_rps", "write_rps", "migration_mibps",
                                     "interference", "p95_ms", "p99_ms")}
    for r in read_ratios:
        for i in interferences:
            for m in migrations_mibps:
                top = 1.3 * max(law.capacity_rps(r, m, i, slo_ms), 0.1 * law.capacity_rps(
                    r, 0.0, i, slo_ms), 1.0)
                loads = np.linspace(top / load_steps, top, load_steps)
                loads = loads * np.exp(0.03 * rng.standard_normal(load_steps))
                p95 = law.latency_ms(loads, r, m, i, 95) * np.exp(
                    noise * rng.standard_normal(load_steps))
                p99 = law.latency_ms(loads, r, m, i, 99) * np.exp(
                    noise * rng.standard_normal(load_steps))
                cols["read_rps"] += list(loads * r)
                cols["write_rps"] += list(loads * (1 - r))
                cols["migration_mibps"] += [m] * load_steps
                cols["interference"] += [i] * load_steps
                cols["p95_ms"] += list(p95)
                cols["p99_ms"] += list(np.maximum(p99, p95))
    return {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}


def bandwidth_profile(n: int = 200, seed: int = 0, rps_per_mbit: float = 12.0,
                      max_rps: float = 700.0, migration_efficiency: float = 0.92
                      ) -> dict[str, FloatArray]:
    """BwMan samples: served requests/s vs client Mbit/s (linear, then the CPU ceiling),
    and migration MiB/s vs migration Mbit/s (protocol overhead ~8 %). Placeholder values."""
    rng = np.random.default_rng(seed)
    cb = rng.uniform(1, 100, n)
    served = np.minimum(rps_per_mbit * cb, max_rps) * np.exp(0.04 * rng.standard_normal(n))
    mb = rng.uniform(1, 400, n)
    from elastore.units import mbit_to_mibps

    speed = np.array([mbit_to_mibps(v) for v in mb]) * migration_efficiency * np.exp(
        0.03 * rng.standard_normal(n))
    return {"client_mbit": cb, "served_rps": served, "migration_mbit": mb,
            "migration_mibps": speed}
