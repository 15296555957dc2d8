"""Hubbub-scale's four phases in simulation (experiments/hubbub/simulate.py, issue 40):
the lab's measured interference as the store's physics, the bound a controller that knows
that physics reaches, and the results file's lines."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from elastore.errors import ElastoreError
from elastore.hubbub.effect import InterferenceLearner
from elastore.lab.hubbub import schedule
from elastore.models.bundle import ModelSet
from elastore.sim.cli import LAB_MODEL

SIM = Path(__file__).resolve().parent.parent / "experiments" / "hubbub" / "simulate.py"


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hubbub_simulate", SIM)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["hubbub_simulate"] = mod
    spec.loader.exec_module(mod)
    return mod


PROFILE = {"points": [
    {"kind": "none", "level": 0, "index": 0.2, "slowdown": 1.0},
    {"kind": "none", "level": 0, "index": 0.3, "slowdown": 1.0},
    {"kind": "stream", "level": 1, "index": 0.4, "slowdown": 2.0},
    {"kind": "stream", "level": 1, "index": 0.5, "slowdown": 1.5},  # out of order: pooled
    {"kind": "stream", "level": 2, "index": 0.6, "slowdown": 3.0}],
    "index_slowdown_spearman": 0.5}


CPU_PROFILE = {"baseline_cpu_ms_per_request": {"400.0": 2.0},
               "kinds": {"stream": {"levels": [1, 2, 1], "cpu_ratio": [1.2, 1.5, 1.4]},
                         "cpu": {"levels": [1, 2], "cpu_ratio": [None, None]}}}


def test_the_labs_cpu_per_request_becomes_a_ratio_per_level(sim: ModuleType) -> None:
    cpu = sim.CpuPhysics(CPU_PROFILE, "stream")
    assert cpu.ratio(0) == 1.0  # alone: the store's own CPU per request
    assert cpu.ratio(1) == pytest.approx(1.3)  # two points at level 1: their median
    assert cpu.ratio(2) == pytest.approx(1.5) and cpu.ratio(4) == pytest.approx(1.5)
    # a kind measured before the column (unknown ratios) is refused, never read as 1
    with pytest.raises(ElastoreError, match="no CPU-per-request ratios for kind 'cpu'"):
        sim.CpuPhysics(CPU_PROFILE, "cpu")
    with pytest.raises(ElastoreError, match="kind 'cache'"):
        sim.CpuPhysics(CPU_PROFILE, "cache")


def test_a_cpu_based_sizing_sees_the_extra_cpu_the_co_runner_costs(sim: ModuleType) -> None:
    """Under a co-runner that raises the store's CPU per request, blind-cpu asks for more
    nodes than blind-workload at the same load; alone (phase 1) they are the same."""
    ms = ModelSet.load(LAB_MODEL)
    phys = sim.LabPhysics(PROFILE, "stream")
    cpu = sim.CpuPhysics(CPU_PROFILE, "stream")
    cap0 = float(ms.capacity.capacity(0.95, 0.0, 0.0))
    steps = schedule(240, 30, 1.5 * cap0, 4.5 * cap0, phys.max_level)
    w, c = (sim.run(n, steps, ms, phys, 30.0, 2, 20, np.random.default_rng(0), cpu=x)
            for n, x in (("blind-workload", None), ("blind-cpu", cpu)))
    assert w["phases"][1] == c["phases"][1]
    for a, b in zip(w["periods"], c["periods"], strict=True):
        assert b["work_rps"] == pytest.approx(a["load_rps"] * cpu.ratio(a["level"]), abs=0.1)
    assert (sum(v["server_hours"] for v in c["phases"].values())
            > sum(v["server_hours"] for v in w["phases"].values()))


def test_the_labs_points_become_a_monotone_slowdown(sim: ModuleType) -> None:
    phys = sim.LabPhysics(PROFILE, "stream")
    assert phys.index(0) == pytest.approx(0.25) and phys.index(1) == pytest.approx(0.45)
    assert phys.index(9) == phys.index(2) == pytest.approx(0.6)  # past the top: the top
    assert phys.slowdown(0.25) == 1.0 and phys.slowdown(0.1) == 1.0  # alone: none
    # 2.0 then 1.5 pool to their geometric mean (isotonic in log slowdown)
    pooled = math.sqrt(2.0 * 1.5)
    assert phys.slowdown(0.4) == pytest.approx(pooled) == phys.slowdown(0.5)
    assert phys.slowdown(0.6) == pytest.approx(3.0)
    with pytest.raises(ElastoreError, match=r"no points for kind 'cache'.*stream"):
        sim.LabPhysics(PROFILE, "cache")


def test_the_physics_bound_holds_the_slo_where_the_blind_controller_cannot(
        sim: ModuleType) -> None:
    """A short schedule on the lab model: ``true_capacity`` meets the SLO exactly under a
    slowdown; the controller that sizes on it violates less than half as often as the blind one
    and
    pays more server-hours; the learner's controller sits in between on both."""
    ms = ModelSet.load(LAB_MODEL)
    cap = ms.capacity
    c3 = sim.true_capacity(ms, 3.0)
    assert float(cap.latency_ms(c3, 0.95, 0.0, 0.0)) * 3.0 == pytest.approx(cap.slo_ms,
                                                                            rel=1e-3)
    assert sim.true_capacity(ms, 1.0) == float(cap.capacity(0.95, 0.0, 0.0))
    phys = sim.LabPhysics(PROFILE, "stream")
    cap0 = float(cap.capacity(0.95, 0.0, 0.0))
    steps = schedule(240, 30, 1.5 * cap0, 4.5 * cap0, phys.max_level)
    out = {name: sim.run(name, steps, ms, phys, 30.0, 2, 20, np.random.default_rng(0),
                         InterferenceLearner() if name == "hubbub" else None,
                         oracle=name == "physics") for name in ("blind", "physics", "hubbub")}

    def later(r: dict, key: str) -> float:  # type: ignore[type-arg]
        return sum(v[key] for ph, v in r["phases"].items() if ph >= 2)

    assert later(out["blind"], "violations") > 2 * later(out["physics"], "violations")
    assert later(out["physics"], "server_hours") > later(out["blind"], "server_hours")
    assert later(out["hubbub"], "violations") < later(out["blind"], "violations")
    assert later(out["hubbub"], "server_hours") > later(out["blind"], "server_hours")


def test_the_results_file_names_the_lines_and_says_it_is_simulated(
        sim: ModuleType, tmp_path: Path) -> None:
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(PROFILE))
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps(CPU_PROFILE))
    # the lab-check's re-measurement is the line; the profile's own figure is beside it
    check = tmp_path / "interference-results.json"
    check.write_text(json.dumps({"commit": "abcdef0123", "date": "2026-12-03T19:00:00",
                                 "figures": {"index_slowdown_spearman": 0.8125,
                                             "point_seconds": 40.0}}))
    assert sim.main(["--profile", str(prof), "--phase-minutes", "2", "--seeds", "1",
                     "--cpu-profile", str(cpu), "--lab-check", str(check),
                     "--out", str(tmp_path)]) == 0
    text = (tmp_path / "RESULTS.md").read_text()
    lines = dict(line.split(": ", 1) for line in text.splitlines()
                 if line.startswith(("hubbub_", "index_slowdown")))
    assert set(lines) == {"hubbub_violation_ratio", "hubbub_vm_ratio",
                          "hubbub_violation_ratio_cpu", "hubbub_vm_ratio_cpu",
                          "index_slowdown_spearman"}
    assert float(lines["hubbub_vm_ratio"]) > 1.0
    assert math.isfinite(float(lines["hubbub_vm_ratio_cpu"]))
    assert "level 1 x1.30, level 2 x1.50" in text  # the CPU ratios it simulated on
    assert lines["index_slowdown_spearman"].startswith(
        "0.812 (measured on the lab by `make lab-check`, 40-s points, commit abcdef0"), \
        lines["index_slowdown_spearman"]
    assert "measured 0.500 on its own points" in lines["index_slowdown_spearman"]
    assert "Simulated, not run on the lab" in text and "not simulated" not in text
    # no lab-check result: the profile's figure, saying where the other was looked for
    assert sim.main(["--profile", str(prof), "--phase-minutes", "2", "--seeds", "1",
                     "--cpu-profile", str(cpu), "--lab-check", str(tmp_path / "absent.json"),
                     "--out", str(tmp_path)]) == 0
    line = next(x for x in (tmp_path / "RESULTS.md").read_text().splitlines()
                if x.startswith("index_slowdown_spearman: "))
    assert line.startswith("index_slowdown_spearman: 0.500 (the profile's own points; no "), line
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert sim.main(["--profile", str(bad), "--out", str(tmp_path)]) == 2
    assert sim.main(["--profile", str(prof), "--cpu-profile", str(bad),
                     "--out", str(tmp_path)]) == 2
