"""Staged modules: tests that are the steps of one run, in order, sharing its state.

A staged module says so in its docstring and keeps one :class:`Stages`. A stage that
needs an earlier one calls ``stages.needs("name")`` first: if that stage did not pass
(it failed, or was not selected), this one fails at once and names it, instead of waiting
out a deadline on a cluster in the wrong state. A stage that passed says so last, with
``stages.done("name")``. Every test outside a staged module passes when selected alone.
"""

from __future__ import annotations

import pytest


class Stages:
    def __init__(self) -> None:
        self.passed: set[str] = set()

    def done(self, stage: str) -> None:
        self.passed.add(stage)

    def needs(self, *stages: str) -> None:
        for stage in stages:
            if stage not in self.passed:
                pytest.fail(f"this stage needs the {stage!r} stage, which did not pass in "
                            "this run (it failed, or was not selected: the module is "
                            "staged, see its docstring)", pytrace=False)
