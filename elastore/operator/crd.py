"""The ElasticPolicy CRD, kept in step with the code that declares its lists.

The CRD ships as package data (:func:`elastore.resources.crd_path`); the Helm chart's
``crds/`` holds the same file. The one list of the schema that other code owns is the
prediction methods: the predictor registry (:data:`elastore.predictor.registry.METHODS`) is
their only declaration, and the schema's enum is written from it here. The line that
carries it ends with :data:`MARK`.

    python -m elastore.operator.crd            # rewrite the enum, copy to the chart
    python -m elastore.operator.crd --check    # exit 1 if anything is out of step

``tests/test_crd.py`` checks the same, and every other enum and default of the schema
against :func:`elastore.operator.spec.parse`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from elastore.errors import ElastoreError
from elastore.resources import CRD_FILE, crd_path

MARK = "# generated: elastore.predictor.registry.METHODS"
_LINE = re.compile(r"^(?P<indent>\s*)enum: \[[^\]]*\]\s*" + re.escape(MARK) + r"\s*$",
                   re.MULTILINE)


def render(text: str) -> str:
    """``text`` with the method enum written from the registry."""
    from elastore.predictor.registry import METHODS

    found = _LINE.findall(text)
    if len(found) != 1:
        raise ElastoreError(f"the CRD must have exactly one line ending with {MARK!r}, "
                            f"found {len(found)}", str(crd_path()))
    return _LINE.sub(lambda m: f"{m.group('indent')}enum: [{', '.join(METHODS)}]  {MARK}",
                     text)


def chart_copy(repo: Path) -> Path:
    return repo / "charts" / "elastore" / "crds" / CRD_FILE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m elastore.operator.crd",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only report; exit 1 if stale")
    ap.add_argument("--repo", type=Path, default=Path.cwd(),
                    help="the source checkout whose chart gets the copy (default: .)")
    args = ap.parse_args(argv)
    src = crd_path()
    current = src.read_text()
    want = render(current)
    chart = chart_copy(args.repo)
    stale = [p for p, text in ((src, current),
                               (chart, chart.read_text() if chart.is_file() else None))
             if text != want]
    if args.check:
        for p in stale:
            print(f"stale: {p} (run: python -m elastore.operator.crd)", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(want)
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
