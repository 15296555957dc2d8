"""Issue 22's Cassandra housekeeping, as logic and on the simulated cluster: cleanup on the
old nodes after a scale-out (one at a time, throttled, in the status, never overtaken by a
scale-in; superseded by a further scale-out), and no topology change during a repair unless
the SLO is at risk. The real-Cassandra test is in tests/test_cassandra_lab.py; the real API
server's in tests/test_controls_k8s.py."""

from __future__ import annotations

from typing import Any

import pytest
from test_operator_runner import Rig, day

from elastore.actuators import nodetool
from elastore.errors import ElastoreError
from elastore.models import ModelSet
from elastore.operator.spec import SpecError, parse
from elastore.resources import builtin_model
from elastore.stores import operation
from elastore.stores.cassandra import machine

#: nodetool compactionstats of Cassandra 5.0.4 during a cleanup (recorded on the lab:
#: `nodetool compactionstats` on node 1 while `nodetool cleanup` ran after a 2 -> 3 join)
HEADER = ("id                                   compaction type keyspace table completed "
          "total    unit  progress")
COMPACTIONSTATS_CLEANUP = f"""\
concurrent compactors                1
pending tasks                        0
compactions completed                3
data compacted                       20545034
compactions aborted                  0
compactions reduced                  0
sstables dropped from compaction     0
15 minute rate                       0.19/minute
mean rate                            98.87/hour
compaction throughput (MiB/s)        1.0
{HEADER}
e8a1ea90-e9f9-11f1-91cd-83a3fcaade78 Cleanup         ks       kv    6760186   19582007 bytes 34.52%
active compaction remaining time     0h00m12s
"""
#: the same node idle (recorded)
COMPACTIONSTATS_IDLE = """\
concurrent compactors            1
pending tasks                    0
compactions completed            1
data compacted                   833
compactions aborted              0
compactions reduced              0
sstables dropped from compaction 0
15 minute rate                   0.06/minute
mean rate                        98.87/hour
compaction throughput (MiB/s)    64.0
"""


@pytest.fixture(scope="module")
def ms() -> ModelSet:
    return ModelSet.load(builtin_model("placeholder"))


def facts(**kw: Any) -> machine.Facts:
    base: dict[str, Any] = dict(spec_replicas=4, ready_replicas=4, pod_exists=True,
                                pod_ready=True, node_mode="NORMAL")
    base.update(kw)
    return machine.Facts(**base)


def joined() -> operation.OperationState:
    op = operation.start("ScaleOut", "db", 3, 0.0, 60.0, "data")
    op, _, _ = machine.advance(op, facts(node_mode="JOINING"), 1.0)
    assert op.phase == "Joining"
    return op


# -- the parsers, on Cassandra 5.0.4's own output -------------------------------------------------
def test_compactionstats_tasks_cleanup_and_repairs() -> None:
    assert nodetool.compaction_tasks(COMPACTIONSTATS_CLEANUP) == ["Cleanup"]
    assert nodetool.compaction_tasks(COMPACTIONSTATS_IDLE) == []
    validation = COMPACTIONSTATS_CLEANUP.replace("Cleanup   ", "Validation")
    assert nodetool.compaction_tasks(validation) == ["Validation"]
    assert nodetool.repair_activity(validation, "Mode: NORMAL\n") == \
        "1 Validation task(s) in compactionstats"
    assert nodetool.repair_activity(COMPACTIONSTATS_CLEANUP, "Mode: NORMAL\nNot sending any "
                                    "streams.\nRead Repair Statistics:\nAttempted: 0") is None
    # a repair's streaming session in netstats (NetStats prints "<description> <planId>")
    streaming = "Mode: NORMAL\nRepair 125a4e40-e9fa-11f1-91cd-83a3fcaade78\n    /127.0.0.2\n"
    assert nodetool.repair_activity(COMPACTIONSTATS_IDLE, streaming) == \
        "1 repair streaming session(s) in netstats"
    # a type that fills its column leaves one space before the keyspace: still one word
    tight = COMPACTIONSTATS_CLEANUP.replace("Cleanup         ks", "Cleanup ks")
    assert nodetool.compaction_tasks(tight) == ["Cleanup"]
    with pytest.raises(ElastoreError, match="not nodetool compactionstats"):
        nodetool.compaction_tasks("error: JMX connection refused")


def test_compaction_throughput_read_and_set() -> None:
    assert nodetool.parse_compaction_throughput("Current compaction throughput: 64 MB/s") == 64
    assert nodetool.parse_compaction_throughput("Current compaction throughput: 0 MB/s") == 0
    with pytest.raises(ElastoreError, match="unreadable"):
        nodetool.parse_compaction_throughput("nope")
    assert nodetool.compaction_setting(0.3) == (["1"], 1.0)  # 0 would unthrottle
    assert nodetool.compaction_setting(7.6) == (["8"], 8.0)
    with pytest.raises(ElastoreError):
        nodetool.compaction_setting(0)


# -- the state machine --------------------------------------------------------------------------
def test_cleanup_runs_on_each_old_node_in_turn_then_the_operation_is_done() -> None:
    op = joined()
    op, eff, done = machine.advance(op, facts(), 2.0)
    assert (eff, done, op.phase, op.cleanup_pod(), op.cleanup_issued_s) == \
        ("cleanup", False, "CleaningUp", "db-0", 2.0)
    assert operation.allowed_replicas(op) == (4,)
    op, eff, _ = machine.advance(op, facts(cleanup="running"), 3.0)
    assert eff == "none" and "running on db-0 (1 of 3)" in op.message
    op, eff, _ = machine.advance(op, facts(cleanup="done"), 4.0)
    assert (eff, op.cleanup_pod()) == ("cleanup", "db-1")
    op, eff, _ = machine.advance(op, facts(cleanup="done"), 5.0)
    assert (eff, op.cleanup_pod()) == ("cleanup", "db-2")
    op, eff, done = machine.advance(op, facts(cleanup="done"), 6.0)
    assert (eff, done, op.phase) == ("none", True, "Done")
    assert "3 old node(s) cleaned up" in op.message


def test_a_restarted_operator_resumes_cleanup_from_the_status() -> None:
    op, _, _ = machine.advance(joined(), facts(), 2.0)
    op = op.__class__(**{**op.__dict__, "cleanup_restore_mibps": 64.0})
    again = operation.OperationState.from_status(op.to_status())
    assert again == op
    operation.check_identity(again, "db", "data")
    # this process issued nothing: a cleanup the node shows is waited for, none is re-issued
    w, eff, _ = machine.advance(again, facts(cleanup=None, cleanup_seen=True), 50.0)
    assert eff == "none" and w.cleanup_issued_s == 2.0
    r, eff, _ = machine.advance(again, facts(cleanup=None, cleanup_seen=False), 50.0)
    assert (eff, r.cleanup_pod(), r.cleanup_issued_s, r.cleanup_restore_mibps) == \
        ("cleanup", "db-0", 50.0, 64.0)  # the node's own throttle is still the one to restore
    u, eff, _ = machine.advance(again, facts(cleanup=None, cleanup_seen=None), 50.0)
    assert eff == "none" and "could not be read" in u.message


def test_a_failed_cleanup_is_stuck_and_a_tampered_ordinal_refused() -> None:
    op, _, _ = machine.advance(joined(), facts(), 2.0)
    stuck, eff, done = machine.advance(op, facts(cleanup="failed: exited 2: no space"), 3.0)
    assert (eff, done, stuck.phase) == ("stuck", False, "Stuck")
    assert "no space" in stuck.message and "scale-in" in stuck.message
    bad = op.__class__(**{**op.__dict__, "cleanup_ordinal": 3})  # the new node itself
    with pytest.raises(ElastoreError, match=r"old nodes 0\.\.2"):
        operation.check_identity(bad, "db", "data")
    # drift during cleanup is a conflict, as in every phase
    _, eff, _ = machine.advance(op, facts(spec_replicas=3), 4.0)
    assert eff == "conflict"


def test_the_migration_time_model_counts_cleanup() -> None:
    gib = 2.0**30
    plain = operation.expected_seconds("ScaleOut", 3, 30 * gib, 10.0, 60.0)
    with_cleanup = operation.expected_seconds("ScaleOut", 3, 30 * gib, 10.0, 60.0,
                                              cleanup=True)
    # the join receives D/4; the three old nodes then rewrite D/3 each at the same rate
    assert plain == pytest.approx(60 + 7.5 * 1024 / 10)
    assert with_cleanup == pytest.approx(plain + 30 * 1024 / 10)
    assert operation.expected_seconds("ScaleIn", 3, 30 * gib, 10.0, 60.0, cleanup=True) == \
        operation.expected_seconds("ScaleIn", 3, 30 * gib, 10.0, 60.0)


def test_spec_cleanup_and_repairs() -> None:
    base = {"target": {"name": "db", "replicationFactor": 3},
            "replicas": {"min": 3, "max": 6},
            "slo": {"latencyMs": 30}}
    s = parse(base)
    assert s.cleanup and s.hold_for_repairs
    s = parse({**base, "scaleUp": {"cleanup": False}, "repairs": {"hold": False}})
    assert not s.cleanup and not s.hold_for_repairs
    with pytest.raises(SpecError, match=r"spec\.scaleUp\.cleanup"):
        parse({**base, "scaleUp": {"cleanup": "yes"}})
    with pytest.raises(SpecError, match=r"spec\.repairs"):
        parse({**base, "repairs": []})


# -- the runner, on the simulated cluster ---------------------------------------------------------
def test_a_scale_out_cleans_the_old_nodes_throttled_and_scale_in_waits(ms: ModelSet) -> None:
    rig = Rig(ms, day(ms))
    rig.kube.cleanup_seconds = 600.0  # long enough that the plan wants a scale-in during it
    rig.run(3 * 3600, stop=lambda: rig.calls("cleanup db-0") != [])
    assert rig.calls("cleanup") == ["cleanup db-0"]
    st = rig.policies.status["operation"]
    assert (st["phase"], st["cleanupOrdinal"], st["cleanupRestoreMiBps"]) == \
        ("CleaningUp", 0, 64.0)
    # throttled to the migration rate in force while it runs
    rate = rig.policies.status["migrationMiBps"]
    assert rig.kube.compaction_mibps["db-0"] == float(max(1, round(rate)))
    # the plan's scale-ins wait for every old node's cleanup; none starts meanwhile
    rig.run(rig.t + 7200)
    cleaned = rig.calls("cleanup")
    scale_in_at = next((t for t, c in rig.kube.calls if c.startswith("decommission")), None)
    assert scale_in_at is not None, rig.kube.calls
    last_clean = max(t for t, c in rig.kube.calls if c.startswith("cleanup"))
    assert scale_in_at >= last_clean + rig.kube.cleanup_seconds
    # every old node once per scale-out that completed; each node's throttle put back
    assert set(cleaned) >= {"cleanup db-0", "cleanup db-1", "cleanup db-2"}
    assert all(v == 64.0 for v in rig.kube.compaction_mibps.values()), \
        rig.kube.compaction_mibps
    assert rig.kube.violations == []
    reasons = [r for r, _, _ in rig.policies.events]
    assert "CleanupStarted" in reasons


def test_a_further_scale_out_supersedes_a_running_cleanup(ms: ModelSet) -> None:
    rig = Rig(ms, day(ms))
    rig.kube.cleanup_seconds = 3600.0  # hours on a large node: no resize waits for it
    rig.run(1800)
    sizes = [int(c.split()[1]) for c in rig.calls("scale")]
    assert max(sizes) >= 5, rig.kube.calls
    reasons = [r for r, _, _ in rig.policies.events]
    assert "CleanupSuperseded" in reasons
    # the superseded cleanup's node got its own throttle back
    assert rig.kube.violations == []


def test_a_forgotten_cleanup_is_reissued_and_a_failed_one_is_stuck(ms: ModelSet) -> None:
    rig = Rig(ms, day(ms))
    rig.kube.cleanup_seconds = 30.0
    rig.run(3600, stop=lambda: rig.calls("cleanup db-0") != [])
    # the operator restarts: its successor knows of no cleanup it issued, and db-0 shows
    # none running once the first has finished: it is issued again (a no-op on a clean node)
    rig.kube.forgotten.add("db-0")
    rig.runner = rig.new_runner()
    rig.run(rig.t + 60)
    assert rig.calls("cleanup db-0") == ["cleanup db-0", "cleanup db-0"]
    rig.kube.cleanup_fails.add("db-1")
    rig.run(rig.t + 300)
    st = rig.policies.status["operation"]
    assert st["phase"] == "Stuck" and "db-1" in st["message"], st
    reasons = [r for r, _, _ in rig.policies.events]
    assert "OperationStuck" in reasons


def test_a_repair_holds_a_scale_in_and_a_scale_out_unless_the_slo_is_at_risk(
        ms: ModelSet) -> None:
    rig = Rig(ms, day(ms), spec_patch={"scaleUp": {"cleanup": False}})
    rig.run(1800)  # the day's peak: 5-6 servers
    peak = rig.kube.spec_replicas
    assert peak >= 5 and rig.calls("decommission") == []
    # the load falls while a node validates for a repair: no scale-in starts
    rig.kube.repairs["db-1"] = "1 Validation task(s) in compactionstats"
    rig.run(3600)
    assert rig.calls("decommission") == [] and rig.kube.spec_replicas == peak
    down = rig.cond("ScalingDown")
    assert down["reason"] == "RepairRunning" and "db-1: 1 Validation" in down["message"], down
    del rig.kube.repairs["db-1"]
    rig.run(rig.t + 900)
    assert rig.calls("decommission")[:1] == [f"decommission db-{peak - 1}"], rig.kube.calls

    # a rising load during a repair: the SLO is at risk at the size there is, so the scale-
    # out starts and an Event says why
    rig = Rig(ms, day(ms))
    rig.kube.repairs["db-0"] = "1 repair streaming session(s) in netstats"
    rig.run(1800, stop=lambda: rig.calls("scale") != [])
    assert rig.calls("scale")[:1] == ["scale 4"], rig.kube.calls
    reasons = [r for r, _, _ in rig.policies.events]
    assert "RepairOverridden" in reasons


def test_hold_off_and_cleanup_off_are_honoured(ms: ModelSet) -> None:
    rig = Rig(ms, day(ms), spec_patch={"scaleUp": {"cleanup": False},
                                       "repairs": {"hold": False}})
    rig.kube.repairs["db-1"] = "1 Validation task(s) in compactionstats"
    rig.run(3600)
    assert rig.calls("scale")[:1] == ["scale 4"] and rig.calls("cleanup") == []
    assert "RepairOverridden" not in [r for r, _, _ in rig.policies.events]
