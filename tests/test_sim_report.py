"""The simulation report: a colour per controller, the controllers given the true future,
the paragraph that says who wins and why (issue 41), and ``ideal``'s new name."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from matplotlib.colors import to_rgba

from elastore.cli import cli, register
from elastore.sim import report
from elastore.sim.controllers import (
    ABOUT,
    BOUND,
    CONTROLLERS,
    FORESIGHT,
    KNOWN,
    RENAMED,
    make_controller,
)
from elastore.sim.report import controller_colors, verdict

register()


def m(vm: float, viol_h: float = 0.0, actions: int = 10) -> dict[str, Any]:
    """A controller's metrics, as :meth:`ControllerRun.metrics` names them."""
    return {"vm_hours": vm, "violation_hours": viol_h, "scale_actions": actions}


def test_every_registered_controller_has_a_colour_of_its_own() -> None:
    colors = controller_colors()
    assert list(colors) == list(KNOWN)
    rgba = {n: to_rgba(c) for n, c in colors.items()}  # two spellings of one colour are one
    assert len(set(rgba.values())) == len(KNOWN), colors
    # the ones the issue found sharing: optimal and feedback, the two prorenata lines
    assert rgba["optimal"] != rgba["feedback"]
    assert rgba["prorenata"] != rgba["prorenata-window"]


def test_a_controller_registered_without_a_colour_gets_a_free_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "KNOWN", (*KNOWN, "newcomer", "another"))
    monkeypatch.setattr(report, "COLORS",
                        {n: c for n, c in report.COLORS.items() if n != "operator"})
    colors = controller_colors()
    assert {"newcomer", "another", "operator"} <= set(colors)
    assert len({to_rgba(c) for c in colors.values()}) == len(colors), colors
    # the same colour in every report, whatever else the run holds
    assert controller_colors(["newcomer"]) == {"newcomer": colors["newcomer"]}
    assert controller_colors(["another", "feedback"])["another"] == colors["another"]


def test_the_controllers_given_the_true_future_are_declared_as_they_are_built() -> None:
    assert BOUND in FORESIGHT
    assert {n for n in KNOWN if make_controller(n).foresight} == set(FORESIGHT)
    assert set(ABOUT) == set(KNOWN)
    assert make_controller("perfect-forecast-window").name == "perfect-forecast-window"
    assert "perfect-forecast-window" in CONTROLLERS and "ideal" not in KNOWN
    assert all(old not in KNOWN and new in KNOWN for old, new in RENAMED.items())


def test_the_verdict_names_the_winner_the_bound_and_where_each_other_loses() -> None:
    runs = {
        "feedback": m(900.0, 6.0, 300),  # U(100) 1500: violations
        "prorenata": m(880.0, 0.0, 20),  # U(100) 880: wins
        "perfect-forecast-window": m(870.0, 0.0, 30),  # lower, but it knows the future
        "optimal": m(800.0, 0.0, 18),
        "static-peak": m(1260.0, 0.0, 2),  # VM-hours, never a violation
        "hpa": m(875.0, 1.0, 400),  # saves VM-hours, loses on violations
    }
    text = verdict(runs, 100)
    assert text.startswith("At a penalty of 100, `prorenata` wins")
    assert "880.0 VM-hours, no SLO violation, 20 scale actions" in text
    assert "80.0 (10.0 %) above the bound, `optimal` (U = 800.0" in text
    assert ("Not ranked, as they are given the true future: `optimal` and "
            "`perfect-forecast-window`.") in text
    assert "`perfect-forecast-window` reaches U = 870.0, 10.0 less than `prorenata`" in text
    # the losers in order of U, each with its reason
    losers = re.findall(r"`([a-z-]+)` loses ([0-9.]+)", text)
    assert losers == [("hpa", "95.0"), ("static-peak", "380.0"), ("feedback", "620.0")]
    assert ("`hpa` loses 95.0: 1.00 more violation-hours (+100.0 at P = 100), "
            "5.0 VM-hours saved, 400 scale actions against 20.") in text
    assert ("`static-peak` loses 380.0: 380.0 more VM-hours, 2 scale actions against 20."
            in text)
    assert "`feedback` loses 620.0: 6.00 more violation-hours (+600.0 at P = 100) and " \
           "20.0 more VM-hours" in text


def test_the_penalty_decides_the_winner() -> None:
    runs = {"hpa": m(875.0, 1.0), "prorenata": m(880.0, 0.0), "optimal": m(870.0, 0.0)}
    assert verdict(runs, 100).startswith("At a penalty of 100, `prorenata` wins")
    cheap = verdict(runs, 1)
    assert cheap.startswith("At a penalty of 1, `hpa` wins: the lowest U(1) = VM-hours + "
                            "1 x violation-hours")
    assert "876.0 (875.0 VM-hours, 1.00 violation-hours, 10 scale actions)" in cheap
    # prorenata never violates: what it saves by that is its reason, not a violation cost
    assert ("`prorenata` loses 4.0: 5.0 more VM-hours, 1.0 saved by never violating the SLO"
            in cheap)


def test_a_tie_is_a_tie() -> None:
    runs = {"optimal": m(500.0), "prorenata": m(510.0, 0.1), "hpa": m(512.5, 0.05, 40),
            "feedback": m(530.0, 0.0, 5)}
    text = verdict(runs, 50)
    assert text.startswith("At a penalty of 50, `prorenata` and `hpa` tie for the lowest "
                           "U(50)")
    assert "wins" not in text
    assert "15.0 (3.0 %) above the bound" in text
    assert re.findall(r"`([a-z-]+)` loses", text) == ["feedback"]
    # against the first of the tied, feedback loses on VM-hours and wins on violations
    assert ("`feedback` loses 15.0: 20.0 more VM-hours, 5.0 saved by never violating the SLO"
            in text)


def test_a_winner_at_the_bound_and_runs_without_it() -> None:
    at = verdict({"optimal": m(100.0), "static-peak": m(100.02)}, 10)
    assert "That is what the bound, `optimal`, reaches." in at
    alone = verdict({"prorenata": m(100.0, 0.5), "feedback": m(90.0, 2.0)}, 10)
    assert "`optimal`, was not run" in alone and "Not ranked" not in alone
    assert "`feedback` loses 5.0: 1.50 more violation-hours (+15.0 at P = 10), " \
           "10.0 VM-hours saved" in alone
    only = verdict({"optimal": m(100.0), "perfect-forecast": m(110.0)}, 10)
    assert "none is ranked" in only and "wins" not in only
    assert "`optimal`, reaches U(10) = 100.0" in only


def test_ideal_still_runs_by_its_old_name_with_a_warning(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["simulate", "--start", "2009-03-08", "--end", "2009-03-09",
                                   "--controllers", "ideal,feedback,optimal", "--out",
                                   str(tmp_path / "rep"), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert warnings == ["warning: controller 'ideal' is deprecated: it is now "
                        "'perfect-forecast-window' (the same controller)"]
    doc = json.loads(res.stdout)
    assert list(doc["controllers"]) == ["perfect-forecast-window", "feedback", "optimal"]
    text = (tmp_path / "rep" / "report.md").read_text()
    # the report's paragraph is the generator's, on this run's numbers
    assert f"**Who wins.** {verdict(doc['controllers'], 100)}\n" in text
    assert "`feedback` wins" in text and "`ideal`" not in text.replace(
        "`ideal` before issue 41", "")
