"""The two test tiers, run phase by phase, timed (issue 33).

    python tests/tiers.py test [--since EPOCH] [-- PYTEST_ARGS...]
    python tests/tiers.py lab-check [--only NAME[,NAME...]] [--list]
    python tests/tiers.py record --label LABEL [--note TEXT]
    python tests/tiers.py history [--last N]

``test`` (what ``make test`` and CI run) is the mechanisms: lint, types, the MSTL baseline's
tests in their own venv, then what times nothing and needs no control plane on 3
pytest-xdist workers with the machine to themselves (the unit suites, and the lab tests
marked ``concurrent``: real components, nothing timed), then two phases at once:

* ``lab``: the lab suites that time something (a latency, a rate, a deadline), one at a time,
  at full priority: the run's critical path;
* ``control-plane``, beside it on 2 workers at a lower CPU priority (``nice``): the
  control-plane suites, whose pods are kwok's and whose store is a stand-in (no Cassandra,
  no Swift). They mostly wait on the wall clock, so the lab phase keeps the CPU when it
  wants it.

A phase run beside another keeps its output in ``.test-times/<name>.log``, printed when all
have ended.

Every phase always runs; the exit code is the first failure's (pytest's 5, "nothing
selected", is not one). At the end it prints each phase's time and the slowest test files,
and writes them to ``.test-times/summary.json``.

``record`` appends the last run's summary (its commit, date, phase times, counts and failed
tests) to ``tests/test-runs.jsonl``, the project's history of whole runs, with a label
and a note; ``history`` prints that file as a table. The history lives there, not in prose.

``lab-check`` (``make lab-check``) is the measurements: each one writes ``results.json`` beside
its experiment (figures, targets, commit, date, cores) and fails when a target is missed.
They take hours in all; ``--only`` runs some of them. See docs/testing.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from elastore.lab.cassandra.nodes import QUICK_JIT_ENV

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv" / "bin"
FORECAST_VENV = REPO / ".venv-forecast" / "bin"
MSTL_TESTS = "tests/test_predictor_mstl.py"
OUT = REPO / ".test-times"
#: the committed history of whole runs (``record`` appends, ``history`` prints)
HISTORY = REPO / "tests" / "test-runs.jsonl"
#: how many of the slowest files the summary lists
SLOWEST = 25
#: the niceness of a phase run beside another: the lab phase keeps the CPU when it wants it
BESIDE_NICE = 10
#: numpy's BLAS threads per pytest process: 3 workers on 2 cores, more would oversubscribe
SINGLE_THREADED = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                     "MKL_NUM_THREADS")}
#: the lab's Cassandra nodes compile with C1 alone in make test (its mechanisms: about 30 %
#: less CPU, docs/testing.md), never in lab-check (its measurements: Java's default JIT)
QUICK_JIT = QUICK_JIT_ENV


#: the lab phase's tests: real stores, or a store beside a control plane
LAB_MARKERS = "lab and (not concurrent or k8s) and not measure"

@dataclass(frozen=True)
class Phase:
    name: str
    argv: tuple[str, ...]
    #: a pytest run: its per-test times are recorded, and exit 5 (nothing selected) is fine
    pytest: bool = False
    #: runs at the same time as the last phase before it that is not beside one, at a lower
    #: CPU priority (``nice``), its output kept in .test-times/<name>.log and printed when
    #: all have ended
    beside: bool = False


def test_phases(extra: list[str]) -> list[Phase]:
    py = (str(VENV / "pytest"),)
    return [
        Phase("lint", (str(VENV / "ruff"), "check", "elastore", "tests", "benchmarks",
                       "experiments")),
        Phase("types", (str(VENV / "mypy"),)),
        # statsforecast needs pandas < 3; the package and the rest run on pandas 3
        Phase("mstl", (str(FORECAST_VENV / "pytest"), "-p", "no:cacheprovider", "-q",
                       MSTL_TESTS, *extra), pytest=True),
        # nothing timed, no control plane: 3 workers on the 2 cores, BLAS single-threaded.
        # (Run beside the lab phase at nice 19 instead, stop 35, they slowed it by 4.6 min,
        # more than the 3.3 min they take alone)
        Phase("parallel", (*py, "-m", "not measure and not k8s and (not lab or concurrent)",
                           "-n", "3", "--dist", "loadfile", f"--ignore={MSTL_TESTS}", *extra),
              pytest=True),
        # real stores under load, one test at a time at full priority: the critical path.
        # (Two lab streams side by side were measured and dropped: docs/testing.md)
        Phase("lab", (*py, "-m", LAB_MARKERS, f"--ignore={MSTL_TESTS}", *extra),
              pytest=True),
        # control planes and operators over kwok's pods, no store: mostly waiting on the wall
        # clock, so they run beside the lab phase, niced, a module's fixtures in one process
        Phase("control-plane", ("nice", "-n", str(BESIDE_NICE), *py, "-m",
                                "not measure and k8s and not lab", "-n", "2", "--dist",
                                "loadfile", f"--ignore={MSTL_TESTS}", *extra),
              pytest=True, beside=True),
    ]


@dataclass(frozen=True)
class Measurement:
    name: str
    argv: tuple[str, ...]
    results: str  # the results.json it writes, from the repository's root
    minutes: int  # about, on the 2-core lab
    what: str
    env: tuple[tuple[str, str], ...] = ()  # set for this measurement's run


def measurements() -> list[Measurement]:
    py = str(VENV / "python")
    return [
        Measurement("calibration", (str(VENV / "pytest"), "-p", "no:xdist", "-m", "measure",
                                    "tests/test_calibration_lab_k8s.py", "-s"),
                    "experiments/calibration/results.json", 31,
                    "the learned SLO border against sweeps of the same lab before and after "
                    "the day (issues 18, 40)"),
        Measurement("repeatability", (py, "experiments/profiles/repeatability.py"),
                    "experiments/profiles/results.json", 10,
                    "how far one load point's p95 moves over minutes on this lab"),
        # 40-s points: a point's p95 is the median of eight 5-s windows' p95s, not four
        # (issue 40: "points long enough to resolve the p95")
        Measurement("interference", (py, "experiments/interference/run.py",
                                     "--point-seconds", "40"),
                    "experiments/interference/results.json", 60,
                    "the interference index's rank correlation with the store's slowdown"),
        Measurement("bwman", (py, "experiments/bwman/run.py"),
                    "experiments/bwman/results.json", 35,
                    "BwMan on real Cassandra: a decommission under load, with and without"),
        Measurement("swift-bwman", (py, "experiments/swift-bwman/run.py", "--reps", "1"),
                    "experiments/swift-bwman/results.json", 16,
                    "BwMan on real Swift: a node added under load, with and without"),
        Measurement("agent", (py, "experiments/agent/run.py"),
                    "experiments/agent/results.json", 25,
                    "the node agent through the operator: a scale-out under load"),
        Measurement("disk", (py, "experiments/disk/run.py"),
                    "experiments/disk/results.json", 20,
                    "scale for the bytes: the simulator's 29 windows growing 2 % a day"),
        # the lab's move first: the simulator's RESULTS.md reads its lab.json
        Measurement("skew-lab", (py, "experiments/skew/lab.py"),
                    "experiments/skew/lab/results.json", 4,
                    "a nodetool move on single-token real Cassandra: share, bytes, rows"),
        # the quantities make test's lab suites meet, judged here (tests/figures.py): the
        # same runs, with every figure's target enforced and written to results.json
        Measurement("lab-figures", (str(VENV / "pytest"), "-p", "no:xdist", "-m",
                                    "lab and not measure", "-p", "no:cacheprovider"),
                    "experiments/lab-figures/results.json", 45,
                    "the lab suites' rates, counts and margins against their targets",
                    env=(("ELASTORE_JUDGE_FIGURES", str(REPO / "experiments" / "lab-figures")),)),
        Measurement("skew", (py, "experiments/skew/run.py"),
                    "experiments/skew/results.json", 9,
                    "balance before buy: count-only against skew-aware on the per-page trace"),
    ]


def _run(argv: tuple[str, ...] | list[str], env: dict[str, str]) -> tuple[int, float]:
    t0 = time.monotonic()
    print(f"\n=== {' '.join(argv)}", flush=True)
    rc = subprocess.call(list(argv), cwd=REPO, env=env)
    return rc, time.monotonic() - t0


def _fresh(path: Path) -> Path:
    path.unlink(missing_ok=True)
    return path


def _start_beside(ph: Phase, env: dict[str, str],
                  alongside: str) -> tuple[subprocess.Popen[bytes], list[float]]:
    """Start the phase; the list gets its start and, from a watcher thread, the moment it
    ended (its own time, not the time until the phase beside it ended too)."""
    import threading

    log = OUT / f"{ph.name}.log"
    print(f"\n=== {ph.name}, beside the {alongside} phase (its output: {log}, printed when "
          f"all have ended)\n=== {' '.join(ph.argv)}", flush=True)
    with log.open("wb") as fh:
        proc = subprocess.Popen(list(ph.argv), cwd=REPO, env=env, stdout=fh,
                                stderr=subprocess.STDOUT)
    times = [time.monotonic()]

    def watch() -> None:
        proc.wait()
        times.append(time.monotonic())

    threading.Thread(target=watch, daemon=True).start()
    return proc, times


def _finish_beside(ph: Phase, proc: subprocess.Popen[bytes],
                   times: list[float]) -> tuple[int, float]:
    rc = proc.wait()
    while len(times) < 2:  # the watcher has seen the exit by now, or is about to
        time.sleep(0.01)
    secs = times[1] - times[0]
    print(f"\n=== {ph.name} (ran beside the phase above; {_fmt(secs).strip()}, exit {rc})",
          flush=True)
    sys.stdout.write((OUT / f"{ph.name}.log").read_text(errors="replace"))
    sys.stdout.flush()
    return rc, secs


def _by_file(timings: Path) -> dict[str, float]:
    per: dict[str, float] = defaultdict(float)
    if not timings.exists():
        return per
    for line in timings.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut short by a killed run
        per[str(rec["nodeid"]).split("::", 1)[0]] += float(rec["seconds"])
    return per


def _outcomes(timings: Path) -> dict[str, str]:
    """Each test's outcome in a phase: failed if any of its setup, call or teardown failed,
    skipped if it was skipped, else passed (a test that never reported is not counted)."""
    out: dict[str, str] = {}
    if not timings.exists():
        return out
    for line in timings.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        node, got = str(rec["nodeid"]), str(rec["outcome"])
        if got == "failed" or out.get(node) == "failed":
            out[node] = "failed"
        elif got == "skipped":
            out[node] = "skipped"
        elif rec["when"] == "call" and node not in out:
            out[node] = "passed"
    return out


def _off_target(sink: Path) -> list[dict[str, object]]:
    sys.path.insert(0, str(REPO / "tests"))
    import figures  # tests/figures.py: the recorded quantities

    return figures.off_target(sink)


def _fmt(seconds: float) -> str:
    return f"{seconds / 60:5.1f} min" if seconds >= 60 else f"{seconds:5.0f} s  "


def run_tests(since: float | None, extra: list[str]) -> int:
    OUT.mkdir(exist_ok=True)
    began = time.time()
    rows: list[tuple[str, float, int]] = []
    if since is not None:
        rows.append(("set-up (installs)", began - since, 0))
    rc_first = 0
    files: dict[str, tuple[str, float]] = {}
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed: list[str] = []
    figures_sink = _fresh(OUT / "figures.jsonl")
    phases = test_phases(extra)
    k = 0
    while k < len(phases):
        ph = phases[k]
        k += 1
        beside: list[Phase] = []
        while k < len(phases) and phases[k].beside:  # every phase beside this one
            beside.append(phases[k])
            k += 1
        env = dict(os.environ, **SINGLE_THREADED, ELASTORE_FIGURES=str(figures_sink),
                   **{QUICK_JIT: "1"})
        started = [(b, *_start_beside(b, dict(env, ELASTORE_TIMINGS=str(
            _fresh(OUT / f"{b.name}.jsonl"))), ph.name)) for b in beside]
        try:
            rc, secs = _run(ph.argv, dict(env, ELASTORE_TIMINGS=str(
                _fresh(OUT / f"{ph.name}.jsonl"))))
        except BaseException:  # interrupted: the phases beside it go too
            for _, proc, _ in started:
                proc.terminate()
            raise
        results = [(ph, rc, secs)]
        results += [(b, *_finish_beside(b, proc, times)) for b, proc, times in started]
        for p, rc, secs in results:
            ok = rc == 0 or (p.pytest and rc == 5)
            rows.append((f"{p.name} (beside)" if p.beside else p.name, secs, 0 if ok else rc))
            if not ok and rc_first == 0:
                rc_first = rc
            timings = OUT / f"{p.name}.jsonl"
            for f, s in _by_file(timings).items():
                files[f] = (p.name, s)
            for node, outcome in _outcomes(timings).items():
                counts[outcome] += 1
                if outcome == "failed":
                    failed.append(node)
    total = time.time() - (since if since is not None else began)
    print("\n=== make test: time per phase")
    for name, secs, rc in rows:
        print(f"  {name:<20} {_fmt(secs)}{'' if rc == 0 else f'   FAILED (exit {rc})'}")
    print(f"  {'total':<20} {_fmt(total)}")
    slow = sorted(files.items(), key=lambda kv: -kv[1][1])[:SLOWEST]
    print(f"=== the {len(slow)} slowest test files (setup + tests + teardown)")
    for f, (ph_name, s) in slow:
        print(f"  {_fmt(s)}  {ph_name:<13} {f}")
    (OUT / "summary.json").write_text(json.dumps({
        **_provenance(),
        "phases": [{"name": n, "seconds": round(s, 1), "exit": rc} for n, s, rc in rows],
        "total_seconds": round(total, 1), "cores": os.cpu_count(), "exit": rc_first,
        "failed": sorted(failed),
        "slowest_files": [{"file": f, "phase": p, "seconds": round(s, 1)}
                          for f, (p, s) in slow], "tests": counts}, indent=1))
    off = _off_target(figures_sink)
    if off:
        print(f"=== {len(off)} figure(s) off their targets (recorded, not judged here: "
              "make lab-check judges them)")
        for rec in off:
            print(f"  {rec['figure']} = {rec['value']} (target {rec['op']} {rec['bound']:g})")
    # the plain closing line, over every phase's tests (a phase that failed without a test
    # failing, lint or types, still fails the run through the exit code)
    print(f"total: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")
    return rc_first


def _provenance() -> dict[str, object]:
    """What a run ran on: the commit, whether tracked files differed from it, the UTC date,
    and whether CI ran it (the CI variable)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(("git", *args), cwd=REPO, capture_output=True, text=True,
                                  check=False).stdout.strip()
        except OSError:
            return ""
    return {"commit": git("rev-parse", "--short=7", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "ci": os.environ.get("CI", "") == "true"}


def record(label: str, note: str, summary: Path, history: Path) -> int:
    """Append the run in ``summary`` to the history, as one JSON line with a label (which
    run: "CI", "fresh clone, quiet", "fresh clone, a CPU hog beside it" ...) and a note."""
    if not label.strip():
        print("record: --label must say which run this was", file=sys.stderr)
        return 2
    try:
        run = json.loads(summary.read_text())
    except FileNotFoundError:
        print(f"record: no run to record: {summary} is missing (run `make test` first)",
              file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"record: {summary} is not a run's summary: {exc}", file=sys.stderr)
        return 2
    if "phases" not in run or "tests" not in run:
        print(f"record: {summary} has no phases or test counts: not a run's summary",
              file=sys.stderr)
        return 2
    history.parent.mkdir(parents=True, exist_ok=True)
    with history.open("a") as fh:
        fh.write(json.dumps({"label": label.strip(), "note": note.strip(), **run},
                            sort_keys=False) + "\n")
    print(f"recorded in {history}: {_history_row(run | {'label': label})}")
    return 0


def _history_row(run: dict[str, object]) -> str:
    tests = run.get("tests") or {}
    assert isinstance(tests, dict)
    total = run.get("total_seconds")
    took = _fmt(float(total)).strip() if isinstance(total, (int, float)) else "?"
    phases = run.get("phases") or []
    assert isinstance(phases, list)
    per = ", ".join(f"{p['name']} {_fmt(float(p['seconds'])).strip()}"
                    + ("" if not p.get("exit") else " FAILED") for p in phases)
    return (f"{run.get('date') or 'undated'} {run.get('commit') or '?'} [{run.get('label', '')}] "
            f"{took}: {tests.get('passed', '?')} passed, {tests.get('failed', '?')} failed"
            + (f" ({per})" if per else ""))


def show_history(history: Path, last: int | None) -> int:
    if not history.exists():
        print(f"history: {history} does not exist yet", file=sys.stderr)
        return 2
    runs = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
    for run in runs[-last:] if last else runs:
        print(_history_row(run))
        if run.get("failed"):
            print("    failed: " + ", ".join(run["failed"]))
        if run.get("note"):
            print(f"    {run['note']}")
    return 0


def run_lab_check(only: list[str] | None) -> int:
    chosen = measurements()
    if only:
        unknown = sorted(set(only) - {m.name for m in chosen})
        if unknown:
            print(f"lab-check: no measurement named {', '.join(unknown)}; there are "
                  f"{', '.join(m.name for m in chosen)}", file=sys.stderr)
            return 2
        chosen = [m for m in chosen if m.name in only]
    total = sum(m.minutes for m in chosen)
    print(f"lab-check: {len(chosen)} measurement(s), about {total} min on a 2-core lab: "
          f"{', '.join(m.name for m in chosen)}", flush=True)
    rows = []
    for k, m in enumerate(chosen, 1):
        print(f"\n[{k}/{len(chosen)}] {m.name} (~{m.minutes} min): {m.what}", flush=True)
        env = {k: v for k, v in os.environ.items() if k != QUICK_JIT}
        rc, secs = _run(m.argv, dict(env, **dict(m.env)))
        rows.append((m, rc, secs))
    print("\n=== make lab-check")
    for m, rc, secs in rows:
        said = "met" if rc == 0 else f"MISSED or FAILED (exit {rc})"
        print(f"  {m.name:<14} {_fmt(secs)}  {said:<28} {m.results}")
    return next((rc for _, rc, _ in rows if rc != 0), 0)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args:
        k = args.index("--")
        args, extra = args[:k], args[k + 1:]
    ap = argparse.ArgumentParser(prog="tests/tiers.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="tier", required=True)
    t = sub.add_parser("test", help="the mechanisms: what make test and CI run")
    t.add_argument("--since", type=float, default=None,
                   help="epoch seconds when make test began (its installs are a phase)")
    lc = sub.add_parser("lab-check", help="the measurements, each to its results.json")
    lc.add_argument("--only", default=None, help="comma-separated measurement names")
    lc.add_argument("--list", action="store_true", help="list the measurements and stop")
    rec = sub.add_parser("record", help="append the last run's summary to the history")
    rec.add_argument("--label", required=True,
                     help='which run: "CI", "fresh clone, quiet", "fresh clone, CPU hog" ...')
    rec.add_argument("--note", default="", help="what the run showed, in a sentence or two")
    rec.add_argument("--summary", type=Path, default=OUT / "summary.json",
                     help="the run's summary (default: the last run's)")
    hist = sub.add_parser("history", help="print the recorded runs")
    hist.add_argument("--last", type=int, default=None, help="only the last N runs")
    ns = ap.parse_args(args)
    if ns.tier == "test":
        return run_tests(ns.since, extra)
    if ns.tier == "record":
        return record(ns.label, ns.note, ns.summary, HISTORY)
    if ns.tier == "history":
        return show_history(HISTORY, ns.last)
    if ns.list:
        for m in measurements():
            print(f"{m.name:<14} ~{m.minutes:>3} min  {m.results:<42} {m.what}")
        return 0
    return run_lab_check(ns.only.split(",") if ns.only else None)


if __name__ == "__main__":
    sys.exit(main())
