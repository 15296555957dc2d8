"""The ElasticPolicy CRD, its ``spec`` schema written from the declarations.

The CRD ships as package data (:func:`elastore.resources.crd_path`); the Helm chart's
``crds/`` holds the same file. Its ``openAPIV3Schema`` for ``spec`` is generated from
:data:`elastore.operator.specfields.FIELDS` (every field's type, default, bounds, enum,
pattern, CEL rules and description, declared once; the prediction methods' enum is the
predictor registry, the presets' the presets): the block below the line ending with
:data:`MARK` is written here, the rest of the file (names, printer columns, the status
schema) is kept as it is.

    python -m elastore.operator.crd            # write the spec schema, copy to the chart
    python -m elastore.operator.crd --check    # exit 1 if anything is out of step

``tests/test_crd.py`` checks the same, and every enum and default of the schema against
:func:`elastore.operator.spec.parse`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from elastore.errors import ElastoreError
from elastore.resources import CRD_FILE, crd_path

MARK = "# generated from elastore.operator.specfields: python -m elastore.operator.crd"
#: a mapping of scalars this short is written on one line, as ``{type: integer, ...}``
_FLOW_WIDTH = 88


def _scalar(v: Any) -> bool:
    return not isinstance(v, dict | list)


def _dump(data: dict[str, Any]) -> str:
    """Block style for objects, flow style for lists of scalars and for leaves that fit
    :data:`_FLOW_WIDTH`; a block list indented under its key. (PyYAML is the ``operator``
    extra's, imported here only.)"""
    import yaml

    class Dumper(yaml.SafeDumper):
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
            super().increase_indent(flow, False)

    def represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data,
                                         flow_style=all(_scalar(v) for v in data))

    def represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
        leaf = all(_scalar(v) or (isinstance(v, list) and all(_scalar(x) for x in v))
                   for v in data.values())
        short = sum(len(str(k)) + len(str(v)) + 4 for k, v in data.items()) <= _FLOW_WIDTH
        return dumper.represent_mapping("tag:yaml.org,2002:map", data,
                                        flow_style=leaf and short and "description" not in data)

    Dumper.add_representer(list, represent_list)
    Dumper.add_representer(dict, represent_dict)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, width=1 << 20, allow_unicode=True,
                     indent=2)


def spec_yaml(indent: int) -> list[str]:
    """The ``spec:`` key and its schema, as lines indented by ``indent``."""
    from elastore.operator.specfields import spec_schema

    text = _dump({"spec": spec_schema()})
    return [" " * indent + line if line else line for line in text.splitlines()]


def render(text: str) -> str:
    """``text`` with the block after the line ending with :data:`MARK` (the ``spec:`` key of
    the ``openAPIV3Schema``, up to its next sibling) written from the declarations."""
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.rstrip().endswith(MARK)]
    if len(at) != 1:
        raise ElastoreError(f"the CRD must have exactly one line ending with {MARK!r}, "
                            f"found {len(at)}", str(crd_path()))
    start = at[0] + 1
    if start >= len(lines) or lines[start].strip() != "spec:":
        raise ElastoreError(f"the line after {MARK!r} must be the schema's spec:",
                            str(crd_path()))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip()
                                or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    out = [*lines[:start], *spec_yaml(indent), *lines[end:]]
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


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
