"""What the package ships, as the operator image installs it (a wheel, not the checkout):
the CRD, the built-in models and the trace as package data behind one helper, and no test
bed (the control-plane builder, kwok's exec stand-in, the port forwarder)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTBED = ("k8s", "podexec", "forward")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from what the Dockerfile copies (pyproject.toml, README.md,
    elastore/), in a copy, so the build leaves nothing in the checkout."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "elastore", src / "elastore",
                    ignore=shutil.ignore_patterns("__pycache__"))
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
                 "elastore/models/data/lab-profile.json",
                 "elastore/models/data/placeholder.json",
                 "elastore/traces/data/all-projects-2008-10_2009-12-hourly.csv"):
        assert data in names, data
    assert not [n for n in names if "testbed" in n or n.startswith("tests/")]
    for mod in TESTBED:
        assert f"elastore/lab/{mod}.py" not in names
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
    assert res.stdout == (REPO / "elastore" / "operator" / "crds" /
                          "elasticpolicies.elastore.io.yaml").read_text()
