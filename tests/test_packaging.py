"""What the package ships, as the operator image installs it (a wheel built from the image's
build context, not the checkout): the CRD, the built-in models and the trace as package data
behind one helper, no test bed (the control-plane builder, kwok's exec stand-in, the port
forwarder) and no storage lab (.dockerignore leaves elastore/lab/ out of the context; there
`elastore lab` and `elastore load` say so)."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTBED = ("k8s", "podexec", "forward")
#: the storage lab, which the image's build context leaves out (.dockerignore)
LAB = "elastore/lab"
NO_LAB = "the storage lab is not part of this installation"
#: run the package's command line with the checkout's editable install out of the way: its
#: finder (pip install -e) would find any elastore.* module the wheel lacks, such as the
#: lab, in the checkout, which the image does not have
CLI = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path "
       "if 'editable' not in str(getattr(f, '__module__', ''))]; "
       "runpy.run_module('elastore', run_name='__main__', alter_sys=True)")


def _dockerignore() -> list[str]:
    """The patterns of .dockerignore (this repo's own file: plain paths and ``**/`` globs,
    no exceptions), without a trailing slash."""
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()]
    patterns = [ln.rstrip("/") for ln in lines if ln and not ln.startswith("#")]
    assert not [p for p in patterns if p.startswith("!")], "exceptions are not read here"
    return patterns


def _ignored(rel: str, patterns: list[str]) -> bool:
    """Whether the build context leaves out ``rel`` ('/'-separated, from the checkout's
    root): a pattern matches it or one of the directories above it."""
    parts = rel.split("/")
    for k in range(1, len(parts) + 1):
        head = "/".join(parts[:k])
        for pat in patterns:
            if fnmatch.fnmatchcase(head, pat) or (
                    pat.startswith("**/") and fnmatch.fnmatchcase(head, pat[3:])):
                return True
    return False


def _copied() -> list[str]:
    """What the Dockerfile's COPY lines take from the build context (a ``COPY --from``
    takes from an earlier stage, not the context)."""
    out = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words and words[0] == "COPY" and not [w for w in words if w.startswith("--from")]:
            out += [w for w in words[1:-1] if not w.startswith("--")]
    return out


def test_the_build_context_leaves_out_the_lab_and_keeps_the_rest_of_the_package() -> None:
    patterns = _dockerignore()
    assert (REPO / LAB / "__init__.py").is_file()  # the path .dockerignore names exists
    assert LAB in patterns
    copied = _copied()
    assert copied == ["pyproject.toml", "README.md", "elastore"], copied
    assert not [c for c in copied if _ignored(c, patterns)]
    kept = [f.relative_to(REPO).as_posix() for f in (REPO / "elastore").rglob("*")
            if f.is_file() and "__pycache__" not in f.parts]
    assert [f for f in kept if _ignored(f, patterns)] == \
        [f for f in kept if f.startswith(LAB + "/")]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from what the Dockerfile copies (pyproject.toml, README.md,
    elastore/) less what .dockerignore leaves out of the build context (the lab), in a
    copy, so the build leaves nothing in the checkout."""
    src = tmp_path_factory.mktemp("src")
    patterns = _dockerignore()

    def ignore(d: str, names: list[str]) -> set[str]:
        rel = Path(d).relative_to(REPO).as_posix()
        return {n for n in names if _ignored(f"{rel}/{n}", patterns)}

    for name in _copied():
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=ignore)
        else:
            shutil.copy(REPO / name, src / name)
    assert not (src / LAB).exists()
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                          "--no-build-isolation", "-q", "-w", str(out)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    (whl,) = out.glob("elastore-*.whl")
    return whl


def test_the_wheel_has_the_package_data_and_no_test_bed(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("elastore/operator/crds/elasticpolicies.elastore.io.yaml",
                 "elastore/operator/crds/kopf-peering.yaml",
                 "elastore/models/data/lab-profile.json",
                 "elastore/models/data/placeholder.json",
                 "elastore/traces/data/all-projects-2008-10_2009-12-hourly.csv",
                 "elastore/stores/swift/statsd-mapping.yml"):
        assert data in names, data
    assert not [n for n in names if "testbed" in n or n.startswith("tests/")]
    for mod in TESTBED:
        assert f"elastore/lab/{mod}.py" not in names
    assert not [n for n in names if n.startswith(LAB + "/")]  # nor the lab
    # and nothing in the package imports them
    for src in (REPO / "elastore").rglob("*.py"):
        text = src.read_text()
        assert "import testbed" not in text and "from testbed" not in text, src
        for mod in TESTBED:
            assert f"elastore.lab.{mod}" not in text, (src, mod)


def test_an_installed_wheel_finds_its_files_without_the_checkout(wheel: Path,
                                                                 tmp_path: Path) -> None:
    site = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                          "--target", str(site), str(wheel)], capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    env = dict(os.environ, PYTHONPATH=str(site))
    probe = ("import elastore, elastore.resources as r; "
             "print(elastore.__file__); print(r.crd_path()); print(r.builtin_model('lab')); "
             "print(r.builtin_trace())")
    res = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    paths = res.stdout.split()
    assert len(paths) == 4 and all(p.startswith(str(site)) for p in paths), paths
    res = subprocess.run([sys.executable, "-m", "elastore", "operator", "crd"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    crds = REPO / "elastore" / "operator" / "crds"
    assert res.stdout == "---\n".join((crds / f).read_text() for f in (
        "elasticpolicies.elastore.io.yaml", "kopf-peering.yaml"))
    # the lab's commands are there, and say that the lab is not
    for argv in (["lab", "status"], ["lab", "up", "--nodes", "3"], ["lab", "--help"],
                 ["load", "run", "x"]):
        res = subprocess.run([sys.executable, "-c", CLI, *argv], cwd=tmp_path, env=env,
                             capture_output=True, text=True, check=False)
        assert res.returncode != 0, (argv, res.stdout, res.stderr)
        said = [ln for ln in res.stderr.splitlines() if NO_LAB in ln]
        assert len(said) == 1 and said[0].startswith(f"error: elastore {argv[0]}: ") and \
            said[0].endswith("pip install -e '.[lab]'"), (argv, res.stderr)
    res = subprocess.run([sys.executable, "-c", CLI, "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert " lab " in res.stdout and " load " in res.stdout, res.stdout
