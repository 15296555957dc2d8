"""Time and peak memory of `elastore trace build` on the shared per-page file.

Usage: .venv/bin/python benchmarks/trace_build.py [PAGES.csv.gz] [--runs 3]
Target (issue 2): < 60 s and < 1.5 GB RSS on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = REPO.parent / "shared" / "traces" / "wikipedia" / "en-2016-01-pages-hourly.csv.gz"


def one_run(pages: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one build, in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        code = (
            "import resource, sys\n"
            "from elastore.cli import main\n"
            "sys.argv = ['elastore', '-q', 'trace', 'build', sys.argv[1], '-o', sys.argv[2]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        )
        t0 = time.perf_counter()
        res = subprocess.run(
            [sys.executable, "-c", code, str(pages), str(Path(tmp) / "w.json.gz")],
            capture_output=True, text=True, check=True,
        )
        wall = time.perf_counter() - t0
        rss_kib = int(res.stdout.strip().splitlines()[-1])
        return wall, rss_kib / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("pages", nargs="?", type=Path,
                    default=Path(os.environ.get("ELASTORE_PAGES", DEFAULT)))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not args.pages.exists():
        sys.exit(f"error: {args.pages}: not found (pass the per-page CSV path)")
    walls, rss = [], []
    for i in range(args.runs):
        w, r = one_run(args.pages)
        walls.append(w)
        rss.append(r)
        print(f"run {i + 1}: {w:.2f} s, peak RSS {r:,.0f} MiB", flush=True)
    print(f"trace build ({args.pages.name}, {args.pages.stat().st_size / 1e6:.1f} MB): "
          f"best {min(walls):.2f} s, median {sorted(walls)[len(walls) // 2]:.2f} s, "
          f"peak RSS {max(rss):,.0f} MiB  [target < 60 s, < 1536 MiB]")


if __name__ == "__main__":
    main()
