"""Measured vs configured rates of the tc actuator (issue 6), printed.

Usage (root): .venv/bin/python benchmarks/tc_rates.py
Creates its own namespace elastore-bench-tc-<pid>, shapes its loopback, runs bounded TCP
flows between 127.0.0.x addresses inside it, and deletes it.
"""

from __future__ import annotations

import os

from elastore.actuators.tc import HtbShaper
from elastore.lab import netns
from elastore.lab.flow import mean_rate
from elastore.lab.flow import measure as flow


def main() -> None:
    ns = f"elastore-bench-tc-{os.getpid()}"
    netns.create(ns)
    try:
        base = mean_rate(flow(ns, "127.0.0.2", 9042, 2.0), 0.5, 2.0)
        print(f"unshaped loopback: {base:,.0f} Mbit/s")
        sh = HtbShaper(ns, total_mbit=500)
        sh.install(["127.0.0.2", "127.0.0.3"], client_mbit=20, storage_mbit=10)
        try:
            for ip, port, want in (("127.0.0.2", 9042, 20), ("127.0.0.3", 7000, 10)):
                got = mean_rate(flow(ns, ip, port, 3.0), 1.0, 3.0)
                print(f"{ip}:{port} configured {want} Mbit/s, measured {got:.2f} "
                      f"({100 * (got / want - 1):+.1f} %)")
            s = flow(ns, "127.0.0.2", 9042, 6.0,
                     during=[(3.0, lambda: sh.set_rates("127.0.0.2", client_mbit=60))])
            a, b = mean_rate(s, 1.0, 2.8), mean_rate(s, 4.0, 6.0)
            print(f"live change 20 -> 60 Mbit/s at t=3 s: before {a:.2f}, after {b:.2f} "
                  f"({100 * (b / 60 - 1):+.1f} %)")
        finally:
            sh.remove()
    finally:
        netns.delete(ns)


if __name__ == "__main__":
    main()
