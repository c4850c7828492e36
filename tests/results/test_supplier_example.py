"""examples/supplier-bank-change.yaml on the engine, every backend: the facts of the case
live in the task's state, the approval binds to the canonical change, and a supplier
record edited after the approval answers conflict, which sends the task back for a new
proposal and a new approval (seed 002's concurrent edit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from people.support import People
from statewright import TaskStatus, load_workflow
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_task
from statewright.runtime.worker import Worker

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CASE = {"supplier_id": "sup-17", "account_fingerprint": "fp:9c1e",
        "evidence": [{"id": "document-17", "kind": "bank_letter"},
                     {"id": "vendor-record-4", "kind": "vendor_record"}]}


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


class Case:
    """One supplier change: the outside systems as files in the workspace, and the people."""

    def __init__(self, engine: Engine, case: dict[str, Any] | None = None) -> None:
        self.engine = engine
        wf = load_workflow(EXAMPLES / "supplier-bank-change.yaml")
        self.tid = engine.submit(wf, case or CASE)
        self.ws = Path(engine.workspace_root) / self.tid  # the task's own workspace
        self.ws.mkdir(parents=True)
        self.vendors = self.ws / "vendors.json"
        self.vendors.write_text(json.dumps({"suppliers": {"sup-17": {"account_fingerprint": "fp:0001", "version": 3}},
                                            "receipts": {}}))
        people = People(engine)
        self.amira = people.add("amira", "ap-clerk")
        self.farid = people.add("farid", "finance-approver")

    def drain(self) -> None:
        Worker(self.engine).run(until_idle=True)

    @property
    def state(self) -> Any:
        return self.engine.state(self.tid)

    def approve(self, who: Any) -> str:
        shown = self.state.current.proposal_hash
        self.engine.approve(self.tid, who, proposal_hash=shown)
        return str(shown)

    def through_clarification(self) -> None:
        """Intake, a first analysis that needs the verified contact, their answer after one
        check, a second analysis that is sufficient: the task then waits at approve."""
        self.drain()
        self.approve(self.amira)
        self.drain()
        assert self.state.status is TaskStatus.WAITING
        (self.ws / "mailbox.json").write_text(json.dumps({"sup-17": {"id": "callback-2", "kind": "verified_callback"}}))
        self.engine.clock.advance(15 * 60)
        self.drain()
        assert (self.state.status, self.state.current.step) == (TaskStatus.AWAITING_APPROVAL, "approve")


def test_the_change_is_task_state_and_is_applied_once(engine: Engine, tmp_path: Path) -> None:
    case = Case(engine)
    case.through_clarification()
    st = case.state
    assert st.results["prepare"] == {
        "supplier_id": "sup-17", "current_account_fingerprint": "fp:0001",
        "proposed_account_fingerprint": "fp:9c1e", "record_version": 3,
        "evidence_ids": ["document-17", "vendor-record-4", "callback-2"], "risk_flags": [],
    }
    from statewright.approvals.proposal import build_proposal

    shown = build_proposal(st, st.workflow.index_of("approve"))
    assert shown["fields"]["results.prepare.record_version"] == 3
    assert "input" not in shown  # exactly the declared fields, nothing the approver was not shown
    case.approve(case.farid)
    case.drain()
    done = case.state
    assert done.status is TaskStatus.COMPLETED, done.halt
    assert [(a.step, a.outcome.value) for a in done.attempts] == [
        ("intake", "passed"),
        ("analyse", "failed"),  # needs_clarification
        ("request-clarification", "passed"),
        ("await-clarification", "passed"),
        ("confirm-evidence", "failed"),  # loops back to analyse
        ("analyse", "passed"),
        ("request-clarification", "passed"),
        ("await-clarification", "passed"),
        ("confirm-evidence", "passed"),
        ("prepare", "passed"),
        ("approve", "passed"),
        ("execute", "passed"),
    ]
    assert done.results["execute"] == {"receipt": "rcpt-1", "record_version": 4}
    vendors = json.loads(case.vendors.read_text())
    assert vendors["suppliers"]["sup-17"] == {"account_fingerprint": "fp:9c1e", "version": 4}
    assert len(json.loads((case.ws / "outbox.json").read_text())) == 1
    assert not (case.ws / "analysis.json").exists()  # no facts passed through files
    assert verify_task(engine, done.task_id) == []


def test_a_record_edited_after_the_approval_answers_conflict_and_needs_a_new_approval(
    engine: Engine, tmp_path: Path
) -> None:
    case = Case(engine)
    case.through_clarification()
    first = case.approve(case.farid)
    # Someone edits the supplier record between the approval and the write.
    vendors = json.loads(case.vendors.read_text())
    vendors["suppliers"]["sup-17"] = {"account_fingerprint": "fp:0002", "version": 4}
    case.vendors.write_text(json.dumps(vendors))
    case.drain()
    st = case.state
    assert (st.status, st.current.step, st.current.attempt) == (TaskStatus.AWAITING_APPROVAL, "approve", 2)
    conflict = st.attempts_of("execute")[-1]
    assert (conflict.outcome.value, conflict.reason) == ("failed", "conflict")
    assert "version 4" in conflict.detail
    assert st.loop_backs[-1].target == "prepare" and st.loop_backs[-1].reason == "conflict"
    assert st.results["prepare"]["record_version"] == 4
    assert st.results["prepare"]["current_account_fingerprint"] == "fp:0002"
    assert st.current.proposal_hash != first  # the old approval covers nothing now
    case.approve(case.farid)
    case.drain()
    done = case.state
    assert done.status is TaskStatus.COMPLETED, done.halt
    assert json.loads(case.vendors.read_text())["suppliers"]["sup-17"] == {"account_fingerprint": "fp:9c1e",
                                                                           "version": 5}
    assert [a.key.count("/") for a in done.attempts_of("execute")] == [3, 3]  # each under its approval
    assert done.attempts_of("execute")[0].key != done.attempts_of("execute")[1].key
    assert verify_task(engine, done.task_id) == []


def test_an_altered_document_halts_as_a_policy_stop_and_writes_nothing(engine: Engine, tmp_path: Path) -> None:
    case = Case(engine, {**CASE, "evidence": [{"id": "document-17", "kind": "altered_document"}]})
    case.drain()
    case.approve(case.amira)
    case.drain()
    st = case.state
    assert st.status is TaskStatus.HALTED
    assert (st.halt.step, st.halt.reason) == ("analyse", "outcome:suspected_fraud")
    assert st.results["analyse"]["riskFlags"] == ["document-altered"]
    assert json.loads(case.vendors.read_text())["receipts"] == {}
