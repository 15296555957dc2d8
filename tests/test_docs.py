"""The docs stay true to the code (issue 41, item 7): every `elastore ...` example in the
README, docs/ and the commands' own --help parses against the CLI as it is (the command
exists, every option exists, no stray argument, a choice is one of its choices), the
repository files the examples name exist, and every field of the ElasticPolicy spec is in
docs/operator.md's spec table. Selected by ``pytest -k docs``."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml

from elastore.cli import cli, register
from elastore.resources import crd_path

register()
REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: repository folders whose files an example may name (and which must then exist)
REPO_DIRS = ("experiments/", "docs/", "charts/", "benchmarks/", "tests/", "elastore/")


@dataclass(frozen=True)
class Example:
    where: str  # file:line, or the command's --help
    argv: tuple[str, ...]  # after "elastore"
    #: an inline code span in prose: it may name an option without its value
    mention: bool = False


_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"`((?:sudo\s+)?(?:\S*/)?elastore\s[^`]+)`")


def _commands(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, a shell line, whether an inline span) from fenced and indented code
    blocks, backslash continuations joined, and the inline code spans that start with
    ``elastore``."""
    lines = text.splitlines()
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
            i += 1
            continue
        start = i
        if in_fence or line.startswith("    "):
            joined = line.strip()
            while joined.endswith("\\") and i + 1 < len(lines):
                i += 1
                joined = joined[:-1] + " " + lines[i].strip()
            yield start + 1, joined, False
        else:
            for m in _INLINE.finditer(line):
                yield i + 1, m.group(1), True
        i += 1


def _elastore_argvs(shell: str) -> Iterator[tuple[str, ...]]:
    """Each ``elastore`` invocation in one shell line: comments, env assignments, ``sudo``,
    ``$``, ``ip netns exec NS`` and a venv prefix stripped; pipelines and lists split. A
    synopsis's optional parts (``[--tokens A,B]``) count as given; sibling commands
    listed as ``lab up / status / down`` are each checked."""
    shell = re.sub(r"(^|\s)#.*$", "", shell)
    try:
        words = shlex.split(shell, comments=False)
    except ValueError:
        return
    seg: list[str] = []
    for w in [*words, "|"]:
        if w in ("|", "&&", "||", ";", ">", ">>", "<", "2>", "2>&1", "&") or w.startswith(
                (">", "2>")):
            yield from _one(seg)
            seg = []
        else:
            seg.append(w)


def _one(words: list[str]) -> Iterator[tuple[str, ...]]:
    k = 0
    while k < len(words):
        w = words[k]
        if w in ("sudo", "$", "nice", "time") or re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", w):
            k += 1
        elif w == "ip" and words[k + 1:k + 3] == ["netns", "exec"]:
            k += 4
        else:
            break
    if k < len(words) and (words[k] == "elastore" or words[k].endswith("/elastore")):
        argv = words[k + 1:]
    elif words[k:k + 3] in (["python", "-m", "elastore"], [".venv/bin/python", "-m", "elastore"]):
        argv = words[k + 3:]
    else:
        return
    argv = [w.strip("[]") for w in argv if w.strip("[]")]
    if "/" in argv:  # `elastore lab up / status / down`: siblings under one group
        first = argv.index("/")
        parent = argv[:first - 1]
        yield tuple(argv[:first])
        for alt in [w for w in argv[first:] if w != "/"]:
            yield (*parent, alt)
        return
    yield tuple(argv)


def doc_examples() -> list[Example]:
    out = []
    for path in DOCS:
        for n, shell, inline in _commands(path.read_text(encoding="utf-8")):
            for argv in _elastore_argvs(shell):
                out.append(Example(f"{path.relative_to(REPO)}:{n}", argv, inline))
    return out


def help_examples() -> list[Example]:
    """The examples in every command's own --help (its docstring's indented lines)."""
    out = []

    def walk(cmd: click.Command, name: str) -> None:
        for n, shell, _ in _commands(cmd.help or ""):
            for argv in _elastore_argvs(shell):
                out.append(Example(f"elastore {name} --help, line {n}", argv))
        if isinstance(cmd, click.Group):
            for sub, c in cmd.commands.items():
                walk(c, f"{name} {sub}".strip())

    walk(cli, "")
    return out


def _placeholder(v: str) -> bool:
    return "..." in v or "<" in v or "|" in v or v.isupper() or v.startswith("$")


#: parameters that name a file the command writes (it need not exist yet)
OUTPUTS = {"out", "output", "o"}


def check(ex: Example) -> str | None:
    """Why the example does not parse, or None."""
    cmd: click.Command = cli
    args = list(ex.argv)
    path = ["elastore"]
    while isinstance(cmd, click.Group) and args and not args[0].startswith("-"):
        sub = cmd.get_command(click.Context(cmd), args[0])
        if sub is None:
            return f"no command {' '.join(path)} {args[0]}"
        path.append(args.pop(0))
        cmd = sub
    if "--help" in args or "-h" in args:
        return None
    if isinstance(cmd, click.Group):
        return None if not args else f"{' '.join(path)} takes a command, got {args[0]}"
    ctx = click.Context(cmd, info_name=path[-1], **cmd.context_settings)
    parser = cmd.make_parser(ctx)
    try:
        opts, extra, _ = parser.parse_args(args=args)
    except click.UsageError as exc:
        msg = exc.format_message()
        if ex.mention and "requires an argument" in msg:
            return None  # prose naming an option: `elastore operator run --nodetool`
        return f"{' '.join(path)}: {msg}"
    if extra and not ctx.allow_extra_args:
        return f"{' '.join(path)}: unexpected extra argument(s) {extra}"
    for p in cmd.params:
        v = opts.get(p.name or "")
        values = v if isinstance(v, list | tuple) else [v]
        if isinstance(p.type, click.Choice):
            for x in values:
                if isinstance(x, str) and not _placeholder(x) and x not in p.type.choices:
                    return f"{' '.join(path)}: {x!r} is not one of {list(p.type.choices)}"
        for x in values:  # a repository file an example reads must be there
            if p.name not in OUTPUTS and isinstance(x, str) and x.startswith(REPO_DIRS) \
                    and "*" not in x and not _placeholder(x) and not (REPO / x).exists():
                return f"{' '.join(path)}: names {x}, which is not in the repository"
    return None


def test_docs_cli_examples_parse_against_the_cli() -> None:
    examples = doc_examples()
    # the scan finds the examples it is meant to (a regex that matched nothing would pass)
    assert len(examples) > 50, len(examples)
    assert any(ex.argv[:2] == ("operator", "run") for ex in examples)
    bad = [f"{ex.where}: elastore {' '.join(ex.argv)}\n    -> {why}" for ex in examples
           if (why := check(ex)) is not None]
    assert not bad, "examples in the docs that do not parse:\n" + "\n".join(bad)


def test_docs_help_examples_parse_against_the_cli() -> None:
    examples = help_examples()
    assert len(examples) > 20, len(examples)
    bad = [f"{ex.where}: elastore {' '.join(ex.argv)}\n    -> {why}" for ex in examples
           if (why := check(ex)) is not None]
    assert not bad, "examples in --help that do not parse:\n" + "\n".join(bad)


def test_docs_check_catches_what_it_is_for() -> None:
    """The checker itself: each kind of mistake is caught, a placeholder is not."""
    def why(line: str) -> str | None:
        (argv,) = list(_elastore_argvs(line))
        return check(Example("t", argv))

    assert why("elastore simulate --help") is None
    assert "no command elastore operater" in str(why("elastore operater run"))
    assert "No such option" in str(why("elastore load run wl.json --no-such-flag"))
    assert "extra argument" in str(why("elastore operator crd surplus"))
    assert "not one of" in str(why("elastore load run wl.json --store cassandrra"))
    assert "not in the repository" in str(
        why("elastore models fit --samples experiments/profiles/perf.csv -o m.json"))
    assert why("elastore models fit --samples experiments/profiles/lab-samples.csv "
               "-o experiments/profiles/new.json") is None  # an output need not exist yet
    assert why("FOO=1 sudo elastore load run WL.json --store swift | tee x") is None
    assert why("elastore lab move 1 -4611686018427387904") is None  # its own settings
    # a synopsis: optional parts are checked as given
    assert "No such option" in str(why("elastore lab up [--tokenz A,B]"))
    assert [check(Example("t", a)) for a in _elastore_argvs("elastore lab up / status")] \
        == [None, None]
    assert "no command elastore lab stat" in str(
        [check(Example("t", a)) for a in _elastore_argvs("elastore lab up / stat")])
    assert list(_elastore_argvs("kubectl get pods  # elastore not here")) == []


def _spec_paths() -> list[str]:
    doc = yaml.safe_load(crd_path().read_text(encoding="utf-8"))
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def walk(node: dict[str, object], path: list[str]) -> Iterator[str]:
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            yield from walk(node["items"], path)  # type: ignore[arg-type]
            return
        props = node.get("properties")
        if not isinstance(props, dict) or not props:
            yield ".".join(path)
            return
        for k, sub in props.items():
            yield from walk(sub, [*path, k])

    return list(walk(spec, []))


def documented_fields(text: str) -> set[str]:
    """The dotted paths the first column of the spec table names. Shorthands resolve
    against the row's first full path: ``.stopPercent`` and ``podLabel`` after
    ``skew.triggerPercent`` / ``metrics.prometheus.namespaceLabel`` are its siblings."""
    section = text.split("\n## The spec\n", 1)[1].split("\n## ", 1)[0]
    out: set[str] = set()
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        first = row.split("|")[1]
        parent = ""
        for tok in re.findall(r"`([^`]+)`", first):
            if tok.startswith("."):
                tok = parent + tok
            elif "." not in tok and parent:
                tok = f"{parent}.{tok}"
            parent = tok.rsplit(".", 1)[0] if "." in tok else ""
            out.add(tok)
    return out


def test_docs_spec_table_names_every_crd_field() -> None:
    paths = _spec_paths()
    assert "scaleUp.cleanup" in paths and len(paths) > 50  # the walk reaches the leaves
    have = documented_fields((REPO / "docs" / "operator.md").read_text(encoding="utf-8"))

    def covered(p: str) -> bool:  # the field, or the object it belongs to, has a row
        parts = p.split(".")
        return any(".".join(parts[:k]) in have for k in range(len(parts), 0, -1))

    missing = [p for p in paths if not covered(p)]
    assert not missing, f"spec fields not in docs/operator.md's spec table: {missing}"
    unknown = sorted(t for t in have if not any(p == t or p.startswith(t + ".")
                                                for p in paths))
    assert not unknown, f"the spec table names fields the CRD does not have: {unknown}"


@pytest.mark.parametrize(("row", "want"), [
    ("| `skew.triggerPercent`, `.stopPercent` | 1 | x |", {"skew.triggerPercent",
                                                        "skew.stopPercent"}),
    ("| `metrics.prometheus.namespaceLabel`, `podLabel` | a | b |",
     {"metrics.prometheus.namespaceLabel", "metrics.prometheus.podLabel"}),
    ("| `mode` | `Recommend` | `Enforce` acts |", {"mode"}),
])
def test_docs_spec_table_shorthands_resolve(row: str, want: set[str]) -> None:
    assert documented_fields(f"\n## The spec\n\n{row}\n\n## Next\n") == want
