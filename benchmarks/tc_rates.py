"""Measured vs configured rates of the tc actuator (issue 6), printed.

Usage (root): .venv/bin/python benchmarks/tc_rates.py
Creates its own namespace elastore-bench-tc-<pid>, shapes its loopback, runs bounded TCP
flows between 127.0.0.x addresses inside it, and deletes it. Last, a server's link (NIC)
split by BwMan into guaranteed client and storage classes, and the same link as one FIFO.
"""

from __future__ import annotations

import os

from elastore.actuators.tc import HtbShaper
from elastore.lab import netns
from elastore.lab.flow import concurrent_rates, mean_rate
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
        nic(ns)
    finally:
        netns.delete(ns)


def nic(ns: str) -> None:
    """A server's 40 Mbit/s link (what node 2 sends): BwMan's split under two saturating
    flows, a live swap, and the unmanaged FIFO."""
    client = ("127.0.0.3", 5001, "127.0.0.2:9042")  # node 2 answering a client
    storage = ("127.0.0.3", 7000, "127.0.0.2")  # node 2's outgoing internode stream
    sh = HtbShaper(ns, total_mbit=500, nic_mbit=40, match="egress", queue_bytes=256_000)
    sh.install(["127.0.0.2", "127.0.0.3"], client_mbit=30, storage_mbit=10)
    try:
        for c, s in ((30, 10), (10, 30)):
            sh.set_rates("127.0.0.2", client_mbit=c, storage_mbit=s)
            got_c, got_s = concurrent_rates(ns, [client, storage], 4.0)
            print(f"NIC 40 Mbit/s split {c}/{s}: clients {got_c:.2f} ({100 * (got_c / c - 1):+.1f} "
                  f"%), storage {got_s:.2f} ({100 * (got_s / s - 1):+.1f} %)")
    finally:
        sh.remove()
    fifo = HtbShaper(ns, total_mbit=500, nic_mbit=40, split=False, match="egress",
                     queue_bytes=256_000)
    fifo.install(["127.0.0.2"], client_mbit=1, storage_mbit=1)
    try:
        got_c, got_s = concurrent_rates(ns, [client, storage], 4.0)
        print(f"NIC 40 Mbit/s, one FIFO: clients {got_c:.2f}, storage {got_s:.2f}, together "
              f"{got_c + got_s:.2f} ({100 * ((got_c + got_s) / 40 - 1):+.1f} %)")
    finally:
        fifo.remove()


if __name__ == "__main__":
    main()
