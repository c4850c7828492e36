"""The acts around a review, on every backend: rejection reason codes from the workflow's
set, evidence an operator supplies (which rebuilds a waiting proposal), and roles scoped
by the task's input (``finance:region=eu``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from people.support import People
from statewright._errors import ApprovalError, InputError, PermissionDeniedError
from statewright.cli import cli
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.machine.state import TaskStatus
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_task
from statewright.runtime.worker import Worker


@pytest.fixture
def engine_defaults(tmp_path: Path) -> Callable[[], dict[str, Any]]:
    return lambda: {"clock": FakeClock(), "workspace_root": tmp_path / "ws"}


@pytest.fixture
def engine(open_engine: Callable[..., Engine]) -> Engine:
    return open_engine()


def _payment(**approvers: Any) -> Workflow:
    return workflow_from_dict({"workflow": "payment", "steps": [
        {"id": "prepare", "kind": "code", "owner": "ops", "run": {"command": ["true"]}},
        {"id": "approve", "kind": "human", "owner": "finance",
         "approvers": {"role": "finance", **approvers}},
    ]}, "<payment>")


def _waiting(engine: Engine, wf: Workflow, payload: dict[str, Any] | None = None) -> str:
    tid = engine.submit(wf, payload or {})
    Worker(engine).run(until_idle=True)
    assert engine.state(tid).status is TaskStatus.AWAITING_APPROVAL
    return tid


# --- reason codes ---------------------------------------------------------------------------


def test_a_rejection_takes_a_code_from_the_default_set_and_refuses_others(engine: Engine) -> None:
    people = People(engine)
    fay = people.add("fay", "finance")
    tid = _waiting(engine, _payment())
    version = engine.state(tid).version
    with pytest.raises(InputError, match="reason code 'wrong_fix' is not one this step takes; use one of: "
                                         "insufficient_evidence, incorrect_extraction, policy_denial"):
        engine.reject(tid, fay, reason_code="wrong_fix")
    assert engine.state(tid).version == version  # nothing changed
    st = engine.reject(tid, fay, reason_code="insufficient_evidence", comment="no callback record")
    assert (st.halt.reason, st.halt.detail) == ("insufficient_evidence", "no callback record")


def test_a_workflow_declares_its_own_reason_codes(engine: Engine) -> None:
    wf = workflow_from_dict({"workflow": "codes", "reject_codes": ["wrong_account", "other"], "steps": [
        {"id": "approve", "kind": "human", "owner": "f", "approvers": {"role": "finance"}},
        {"id": "final", "kind": "human", "owner": "f", "approvers": {"role": "finance"},
         "reject_codes": ["too_late"]},
    ]}, "<codes>")
    fay = People(engine).add("fay", "finance")
    tid = _waiting(engine, wf)
    with pytest.raises(InputError, match="use one of: wrong_account, other"):
        engine.reject(tid, fay, reason_code="policy_denial")
    engine.approve(tid, fay, proposal_hash=engine.state(tid).current.proposal_hash)
    with pytest.raises(InputError, match="use one of: too_late"):
        engine.reject(tid, fay, reason_code="wrong_account")
    assert engine.reject(tid, fay, reason_code="too_late").halt.reason == "too_late"


def test_who_may_reject_is_said_before_the_code(engine: Engine) -> None:
    people = People(engine)
    erin = people.add("erin", "support")
    tid = _waiting(engine, _payment())
    with pytest.raises(ApprovalError, match="lacks the role 'finance'"):
        engine.reject(tid, erin, reason_code="nonsense")


# --- evidence -------------------------------------------------------------------------------


def test_evidence_rebuilds_a_waiting_proposal_and_the_old_hash_is_refused(engine: Engine) -> None:
    people = People(engine)
    fay, olga = people.add("fay", "finance"), people.add("olga", "operator")
    tid = _waiting(engine, _payment())
    old = engine.state(tid).current.proposal_hash
    st = engine.add_evidence(tid, olga, {"id": "callback-7", "kind": "verified_callback"}, "called the number on file")
    assert st.status is TaskStatus.AWAITING_APPROVAL
    assert st.current.proposal_hash != old
    assert [(e.actor, e.evidence["id"], e.note) for e in st.evidence] == [
        ("olga", "callback-7", "called the number on file")]
    with pytest.raises(ApprovalError, match="is not the current proposal"):
        engine.approve(tid, fay, proposal_hash=old)
    done = engine.approve(tid, fay, proposal_hash=st.current.proposal_hash)
    assert done.status is TaskStatus.COMPLETED
    assert verify_task(engine, tid) == []
    assert [e.type for e in engine.events(tid)].count("EvidenceAdded") == 1


def test_evidence_needs_an_operator_an_object_and_a_live_task(engine: Engine) -> None:
    people = People(engine)
    fay, olga = people.add("fay", "finance"), people.add("olga", "operator")
    tid = _waiting(engine, _payment())
    version = engine.state(tid).version
    with pytest.raises(PermissionDeniedError, match="lacks the role 'operator'"):
        engine.add_evidence(tid, fay, {"id": "x"})
    with pytest.raises(InputError, match="non-empty JSON object"):
        engine.add_evidence(tid, olga, {})
    with pytest.raises(InputError, match="evidence refused"):
        engine.add_evidence(tid, olga, {"n": float("nan")})
    assert engine.state(tid).version == version
    engine.cancel(tid, olga, "withdrawn")
    with pytest.raises(InputError, match="is cancelled; evidence goes to a task that has not ended"):
        engine.add_evidence(tid, olga, {"id": "x"})


def test_the_evidence_command_appends_an_audited_event(engine: Engine, store_url: str, tmp_path: Path) -> None:
    people = People(engine, tmp_path)
    people.add("olga", "operator")
    tid = _waiting(engine, _payment())
    doc = tmp_path / "callback.json"
    doc.write_text(json.dumps({"id": "callback-9", "kind": "verified_callback"}))
    run = CliRunner().invoke(cli, ["evidence", tid, "--file", str(doc), "--note", "callback", "--token-file",
                                   str(people.file("olga")), "--db", store_url])
    assert run.exit_code == 0, run.output
    assert "its proposal was built again" in run.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    refused = CliRunner().invoke(cli, ["evidence", tid, "--file", str(bad), "--token-file",
                                       str(people.file("olga")), "--db", store_url])
    assert refused.exit_code != 0 and "Traceback" not in refused.output
    assert len(refused.output.strip().splitlines()) == 1, refused.output
    assert [e.evidence["id"] for e in engine.state(tid).evidence] == ["callback-9"]


# --- scoped roles ---------------------------------------------------------------------------


def test_a_scoped_role_approves_only_tasks_of_its_scope(engine: Engine) -> None:
    people = People(engine)
    eu, us, anywhere = (people.add("eva", "finance:region=eu"), people.add("uma", "finance:region=us"),
                        people.add("gus", "finance"))
    wf = _payment(scope={"region": "input.region"})
    eu_task = _waiting(engine, wf, {"region": "eu"})
    us_task = _waiting(engine, wf, {"region": "us"})
    with pytest.raises(ApprovalError, match="lacks the role 'finance:region=eu'"):
        engine.approve(eu_task, us, proposal_hash=engine.state(eu_task).current.proposal_hash)
    assert engine.approve(eu_task, eu, proposal_hash=engine.state(eu_task).current.proposal_hash).status \
        is TaskStatus.COMPLETED
    with pytest.raises(ApprovalError, match="lacks the role 'finance:region=us'"):
        engine.reject(us_task, eu, reason_code="other")
    assert engine.approve(us_task, anywhere, proposal_hash=engine.state(us_task).current.proposal_hash).status \
        is TaskStatus.COMPLETED


def test_a_scoped_role_never_holds_an_unscoped_step(engine: Engine) -> None:
    eu = People(engine).add("eva", "finance:region=eu")
    tid = _waiting(engine, _payment(), {"region": "eu"})
    with pytest.raises(ApprovalError, match="lacks the role 'finance'"):
        engine.approve(tid, eu, proposal_hash=engine.state(tid).current.proposal_hash)


def test_a_scope_taken_away_after_the_approval_stops_the_approved_work(engine: Engine, tmp_path: Path) -> None:
    people = People(engine)
    eva = people.add("eva", "finance:region=eu")
    effect = tmp_path / "paid"
    wf = workflow_from_dict({"workflow": "pay", "steps": [
        {"id": "approve", "kind": "human", "owner": "f",
         "approvers": {"role": "finance", "scope": {"region": "input.region"}}},
        {"id": "pay", "kind": "code", "owner": "ops", "run": {"command": ["touch", str(effect)]}},
    ]}, "<pay>")
    tid = _waiting(engine, wf, {"region": "eu"})
    engine.approve(tid, eva, proposal_hash=engine.state(tid).current.proposal_hash)
    engine.users.drop_roles(people.admin, "eva", ["finance:region=eu"])
    engine.users.add(people.admin, "eva", ["finance:region=us"])
    Worker(engine).run(until_idle=True)
    st = engine.state(tid)
    assert (st.status, st.halt.reason) == (TaskStatus.HALTED, "approval_revoked")
    assert "no longer holds the role 'finance' for this task" in st.halt.detail
    assert not effect.exists()


@pytest.mark.parametrize("role", ["finance:", "finance:region", "finance:region=eu,region=us", "finance:re gion=eu",
                                  "finance:region=e u", ":region=eu"])
def test_a_malformed_scoped_role_is_refused_with_one_line(engine: Engine, role: str) -> None:
    people = People(engine)
    before = (engine.store.people_log(), engine.store.people())
    with pytest.raises(InputError, match="optionally scoped as NAME:KEY=VALUE"):
        engine.users.add(people.admin, "zed", [role])
    assert (engine.store.people_log(), engine.store.people()) == before


# --- the review and the task list -------------------------------------------------------------


def test_review_shows_what_an_approver_decides_on(engine: Engine, store_url: str, tmp_path: Path) -> None:
    people = People(engine, tmp_path)
    people.add("eva", "finance:region=eu")
    people.add("uma", "finance:region=us")
    people.add("gus", "finance")
    olga = people.add("olga", "operator")
    wf = workflow_from_dict({"workflow": "payment", "steps": [
        {"id": "prepare", "kind": "code", "owner": "ops", "run": {"callable": "results.res_steps:analyse"}},
        {"id": "approve", "kind": "human", "owner": "finance", "expires_after": "1d",
         "approvers": {"role": "finance", "scope": {"region": "input.region"}},
         "proposal": ["input.supplier", "results.prepare.iban"]},
    ]}, "<payment>")
    tid = _waiting(engine, wf, {"region": "eu", "supplier": "S-4", "evidence": [{"id": "doc-1"}]})
    engine.add_evidence(tid, olga, {"id": "callback-3"}, "called back")
    data = engine.review(tid)
    assert data["why"] == "waits at 'approve' for an approval by the role 'finance:region=eu'"
    assert data["proposal"]["fields"] == {"input.supplier": "S-4", "results.prepare.iban": "DE89370400440532013000"}
    assert data["proposal_hash"] == engine.state(tid).current.proposal_hash
    assert data["approvers"]["people"] == ["eva", "gus"]
    assert [e["evidence"]["id"] for e in data["evidence"]] == ["doc-1", "callback-3"]
    assert [(c["step"], c["outcome"]) for c in data["checks"]] == [("prepare", "passed")]
    assert data["reject_codes"][0] == "insufficient_evidence"
    assert data["expires"] and "ms" not in data["expires"] and data["expires"][:2] == "20"
    text = CliRunner().invoke(cli, ["review", tid, "--db", store_url])
    assert text.exit_code == 0, text.output
    assert f"what will change (proposal hash {data['proposal_hash']}):" in text.output
    assert "who may approve: role 'finance:region=eu': eva, gus" in text.output
    assert "olga at " in text.output and "(called back)" in text.output
    mine = CliRunner().invoke(cli, ["tasks", "--waiting-for-me", "--token-file", str(people.file("eva")),
                                    "--db", store_url, "--json"])
    assert [t["task_id"] for t in json.loads(mine.output)] == [tid]
    theirs = CliRunner().invoke(cli, ["tasks", "--waiting-for-me", "--token-file", str(people.file("uma")),
                                      "--db", store_url, "--json"])
    assert json.loads(theirs.output) == []


def test_tasks_lists_a_header_the_step_and_why_a_task_halted(engine: Engine, store_url: str) -> None:
    wf = workflow_from_dict({"workflow": "fails", "steps": [
        {"id": "build", "kind": "code", "owner": "ci", "run": {"command": ["sh", "-c", "echo broke; exit 3"]}},
    ]}, "<fails>")
    tid = engine.submit(wf, {})
    Worker(engine).run(until_idle=True)
    out = CliRunner().invoke(cli, ["tasks", "--db", store_url])
    lines = out.output.splitlines()
    assert lines[0].split() == ["TASK", "WORKFLOW", "STATUS", "STEP", "UPDATED", "WHY"]
    row = next(line for line in lines if line.startswith(tid))
    assert "halted" in row and "build" in row and "exit_status: broke" in row


def test_review_of_a_halted_task_says_why_with_its_checks_verdicts_and_notes(engine: Engine, store_url: str) -> None:
    """A task halted at a failing check: the review says where and why it halted, lists the
    check's failure and the agent's verdict and note; no approval is offered."""
    verdict = ("printf '{\"approved\": true, \"summary\": \"fixed the rounding\"}' > \"$STATEWRIGHT_VERDICT\"; "
               "echo patched")
    wf = workflow_from_dict({"workflow": "fix", "steps": [
        {"id": "fix", "kind": "ai", "owner": "bots", "agent": {"type": "command", "command": ["sh", "-c", verdict]},
         "output_schema": {"type": "object", "properties": {"approved": {"type": "boolean"},
                                                            "summary": {"type": "string"}},
                           "required": ["approved"]}},
        {"id": "tests", "kind": "code", "owner": "ci", "run": {"command": ["sh", "-c", "echo 2 failed; exit 1"]}},
    ]}, "<fix>")
    tid = engine.submit(wf, {})
    Worker(engine).run(until_idle=True)
    assert engine.state(tid).status is TaskStatus.HALTED
    data = engine.review(tid)
    assert (data["status"], data["step"]) == ("halted", "tests")
    assert data["why"].startswith("halted at 'tests': exit_status") and "2 failed" in data["why"]
    assert [(c["step"], c["outcome"], c["reason"]) for c in data["checks"]] == [("tests", "failed", "exit_status")]
    [made] = data["verdicts"]
    assert (made["step"], made["verdict"], made["note"].strip()) == (
        "fix", {"approved": True, "summary": "fixed the rounding"}, "patched")
    assert "proposal" not in data and "approvers" not in data
    out = CliRunner().invoke(cli, ["review", tid, "--db", store_url])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[1].startswith("why: halted at 'tests': exit_status")
    assert any(line.startswith("  FAIL tests #1 (") and "exit_status: " in line for line in lines)
    assert '      verdict: {"approved": true, "summary": "fixed the rounding"}' in lines
    assert "who may approve" not in out.output
