"""Authorisation is checked again when the approved work is about to run: a worker does not
perform a step after an approval whose approver was removed, lost the step's role, or had
the token they approved with revoked. The task halts at the human step; an operator's retry
asks for a new approval."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.run import run_task
from statewright.store import open_store
from tally import tally

from .support import People, gate, hash_of


def _drop_role(people: People) -> None:
    people.engine.users.drop_roles(people.admin, "carol", ["maintainer"])


def _remove(people: People) -> None:
    people.engine.users.remove(people.admin, "carol")


def _revoke(people: People) -> None:
    users = people.engine.users
    for t in users.tokens():
        if t.name == "carol":
            users.revoke_token(people.admin, t.token_id)


CHANGES: dict[str, Callable[[People], None]] = {
    "the approved step, after the approver lost the role": _drop_role,
    "the approved step, after the approver was removed": _remove,
    "the approved step, after the approving token was revoked": _revoke,
}


@pytest.mark.parametrize("case", sorted(CHANGES))
def test_the_approved_step_does_not_run_once_the_approval_no_longer_holds(
    case: str, backend: str, store_url: str, tmp_path: Path
) -> None:
    """ship is not performed; the task halts at 'approve' with approval_revoked; a retry by an
    operator asks again, and a maintainer's new approval ships once."""
    engine = Engine(open_store(store_url), workspace_root=tmp_path / "ws")
    try:
        people = People(engine, tmp_path)
        carol = people.add("carol", "maintainer")
        effect = tmp_path / "shipped"
        tid = engine.submit(gate(effect), {"workspace": str(tmp_path)})
        assert run_task(engine, tid).status == "awaiting_approval"
        engine.approve(tid, carol, proposal_hash=hash_of(engine, tid))

        CHANGES[case](people)
        st = run_task(engine, tid)

        halt = st.halt
        refused = not effect.exists() and st.status is TaskStatus.HALTED and halt is not None \
            and halt.reason == "approval_revoked"
        tally("bypass", case, backend=backend, refused=refused)
        assert not effect.exists()
        assert halt is not None and (st.status, halt.step, halt.reason) == (
            TaskStatus.HALTED, "approve", "approval_revoked")
        assert "'carol', who approved 'approve'" in halt.detail and "'ship' is not performed" in halt.detail
        assert (st.attempts[-1].step, st.attempts[-1].reason) == ("ship", "approval_revoked")

        ops = people.add("ops", "operator")
        st = engine.retry(tid, ops, "carol no longer approves; ask again")
        assert st.status is TaskStatus.AWAITING_APPROVAL and st.current is not None
        assert st.current.step == "approve"
        dave = people.add("dave", "maintainer")
        engine.approve(tid, dave, proposal_hash=hash_of(engine, tid))
        assert run_task(engine, tid).status == "completed"
        assert effect.read_text(encoding="utf-8") == "shipped\n"
    finally:
        engine.close()


def test_a_step_never_sees_the_token_of_whoever_started_the_worker(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person who starts a worker with STATEWRIGHT_TOKEN set does not hand it to the steps."""
    from statewright.definition.loader import workflow_from_dict

    monkeypatch.setenv("STATEWRIGHT_TOKEN", "swt_" + "S" * 43)
    wf = workflow_from_dict({"workflow": "peek", "steps": [
        {"id": "peek", "kind": "code", "owner": "ci",
         "run": {"command": ["sh", "-c", "echo token=${STATEWRIGHT_TOKEN:-none}"]}},
    ]}, "<peek>")
    engine = Engine(open_store(store_url), workspace_root=tmp_path / "ws")
    try:
        tid = engine.submit(wf, {})
        st = run_task(engine, tid)
        assert st.status == "completed"
        assert st.attempts[-1].output.strip() == "token=none"
    finally:
        engine.close()
