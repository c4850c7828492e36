"""The task reducer's side of child tasks and map steps: which children a map step starts,
how their ends are gathered, routed and bounded, what a child tells its parent, and which
live children a parent cancels. Pure: events in, state and commands out."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import IllegalEventError, TaskStatus, workflow_from_dict
from statewright.definition.model import Workflow
from statewright.machine.children import ParentRef
from statewright.machine.commands import CancelChild, Command, StartChild, TellParent
from statewright.machine.events import ChildEnded, TaskCancelled, TaskRetried
from strategies import Driver

CHILD_HASH = "c" * 64


def fan(*, concurrency: int = 2, tolerated: Any = 0, on_failure: Any = "halt", items: str = "input.files",
        extra: list[dict[str, Any]] | None = None) -> Workflow:
    steps: list[dict[str, Any]] = [
        {"id": "each", "kind": "map", "owner": "t", "workflow": "review-one", "workflow_hash": CHILD_HASH,
         "items": items, "max_concurrency": concurrency, "tolerated_failures": tolerated,
         "on_failure": on_failure},
        {"id": "after", "kind": "code", "owner": "t", "run": {"command": ["true"]}},
    ]
    return workflow_from_dict({"workflow": "fan", "steps": [*(extra or []), *steps]})


def starts(cmds: list[Command]) -> list[tuple[str, int, Any]]:
    return [(c.child_id, c.index, c.input["item"]) for c in cmds if isinstance(c, StartChild)]


def end(d: Driver, index: int, status: str = "completed", *, attempt: int = 1, result: Any = None,
        reason: str = "") -> list[Command]:
    cid = f"t1.each.{attempt}.{index}"
    return d.apply(d.make(ChildEnded, child_id=cid, step="each", attempt=attempt, index=index, status=status,
                          reason=reason, result=result if result is not None else {"out": {"n": index}}))


def test_a_map_step_starts_children_up_to_its_concurrency() -> None:
    """Three items, max_concurrency 2: two children start, each with {item, index}, pinned to the child hash."""
    d = Driver(fan())
    cmds = d.submit({"files": ["a", "b", "c"]})
    assert starts(cmds) == [("t1.each.1.0", 0, "a"), ("t1.each.1.1", 1, "b")]
    first = cmds[0]
    assert isinstance(first, StartChild)
    assert (first.workflow_hash, first.input) == (CHILD_HASH, {"item": "a", "index": 0})
    assert d.state.status is TaskStatus.RUNNING
    assert [(c.task_id, c.live) for c in d.state.children] == [("t1.each.1.0", True), ("t1.each.1.1", True)]


def test_each_end_starts_the_next_item_and_the_last_gathers_results_in_item_order() -> None:
    """Children ending out of order still give results in item order; the task moves on."""
    d = Driver(fan())
    d.submit({"files": ["a", "b", "c"]})
    assert starts(end(d, 1)) == [("t1.each.1.2", 2, "c")]
    assert end(d, 2) == []
    cmds = end(d, 0)
    assert [c.type for c in cmds] == ["RunStep"] and cmds[0].step == "after"
    result = d.state.results["each"]
    assert result["results"] == [{"out": {"n": 0}}, {"out": {"n": 1}}, {"out": {"n": 2}}]
    assert (result["succeeded"], result["failed"], result["failures"]) == (3, 0, [])
    assert d.state.attempts[-1].actor == "statewright:map"


def test_an_empty_list_passes_at_once() -> None:
    d = Driver(fan())
    cmds = d.submit({"files": []})
    assert [c.step for c in cmds] == ["after"]
    assert d.state.results["each"] == {"results": [], "succeeded": 0, "failed": 0, "failures": []}


@pytest.mark.parametrize(("value", "reason"), [({"a": 1}, "items_not_a_list"), ("abc", "items_not_a_list"),
                                               (None, "missing_reference")])
def test_items_that_are_not_a_list_fail_the_step_clearly(value: Any, reason: str) -> None:
    """A non-list (or missing) value fails the attempt with a reason code; nothing starts."""
    d = Driver(fan())
    cmds = d.submit({} if value is None else {"files": value})
    assert not starts(cmds)
    assert d.state.status is TaskStatus.HALTED
    assert d.state.halt is not None and d.state.halt.reason == reason
    assert "files" in d.state.halt.detail


def test_more_failures_than_tolerated_fail_the_step_and_cancel_the_live_children() -> None:
    """tolerated_failures 1 of 4: the second failure fails the step; live children are cancelled once."""
    d = Driver(fan(concurrency=3, tolerated=1))
    d.submit({"files": ["a", "b", "c", "d"]})
    assert starts(end(d, 0, "halted", reason="exit_status")) == [("t1.each.1.3", 3, "d")]
    cmds = end(d, 1, "cancelled")
    assert d.state.status is TaskStatus.HALTED and d.state.halt is not None
    assert d.state.halt.reason == "map_failures"
    assert "2 of 4 children failed, 1 tolerated" in d.state.halt.detail
    cancels = [c for c in cmds if isinstance(c, CancelChild)]
    assert sorted(c.child_id for c in cancels) == ["t1.each.1.2", "t1.each.1.3"]
    assert {c.actor for c in cancels} == {"statewright:map"}
    failures = d.state.results["each"]["failures"]
    assert [(f["index"], f["status"], f["reason"]) for f in failures] == [(0, "halted", "exit_status"),
                                                                          (1, "cancelled", "")]
    # The cancelled children's ends are recorded, and ask for nothing more.
    assert end(d, 2, "cancelled") == [] and end(d, 3, "cancelled") == []
    assert not any(c.live for c in d.state.children)


def test_a_percentage_is_of_the_items() -> None:
    """25% of 4 items tolerates one failure: the step passes with it, and lists it."""
    d = Driver(fan(concurrency=4, tolerated="25%"))
    d.submit({"files": [1, 2, 3, 4]})
    end(d, 0, "halted")
    for i in (1, 2, 3):
        end(d, i)
    assert d.state.current is not None and d.state.current.step == "after"
    assert d.state.results["each"]["results"][0] is None
    assert d.state.results["each"]["failed"] == 1


def test_a_failed_map_loops_back_with_new_children() -> None:
    """A loop-back re-enters the map step: attempt 2 starts children with new ids."""
    prepare = {"id": "prepare", "kind": "code", "owner": "t", "run": {"command": ["true"]}}
    d = Driver(fan(on_failure={"loop_back": "prepare", "max_attempts": 2}, extra=[prepare]))
    d.submit({"files": ["a"]})
    assert starts(d.report()) == [("t1.each.1.0", 0, "a")]
    end(d, 0, "halted")
    assert d.state.current is not None and d.state.current.step == "prepare"
    assert starts(d.report()) == [("t1.each.2.0", 0, "a")]


def test_cancelling_the_parent_cancels_its_live_children_as_the_operator() -> None:
    d = Driver(fan())
    d.submit({"files": ["a", "b", "c"]})
    end(d, 0)
    cmds = d.cancel(actor="olga", reason="wrong batch")
    cancels = [c for c in cmds if isinstance(c, CancelChild)]
    assert sorted(c.child_id for c in cancels) == ["t1.each.1.1", "t1.each.1.2"]
    assert {c.actor for c in cancels} == {"olga"}
    assert all("wrong batch" in c.reason for c in cancels)
    assert d.state.status is TaskStatus.CANCELLED
    # Their ends still arrive, and are recorded.
    end(d, 1, "cancelled")
    assert [c.status for c in d.state.children] == ["completed", "cancelled", "running"]


def test_a_child_end_the_task_did_not_start_is_refused() -> None:
    d = Driver(fan())
    d.submit({"files": ["a"]})
    with pytest.raises(IllegalEventError, match="not a child"):
        d.apply(d.make(ChildEnded, child_id="t9.each.1.0", step="each", attempt=1, status="completed"))


# --- the child's side -----------------------------------------------------------------

CHILD = workflow_from_dict({
    "workflow": "review-one",
    "input_schema": {"type": "object", "properties": {"item": {"type": "string"}, "index": {"type": "integer"}},
                     "required": ["item"]},
    "steps": [{"id": "work", "kind": "code", "owner": "t", "run": {"command": ["true"]}}],
})
PARENT = ParentRef("p1", "each", 1, 4)


def child() -> Driver:
    return Driver(CHILD, task_id="p1.each.1.4")


def submit_child(d: Driver, payload: dict[str, Any]) -> list[Command]:
    from statewright.machine.events import TaskSubmitted

    return d.apply(d.make(TaskSubmitted, input=payload, parent=PARENT.as_dict()))


def test_a_child_records_its_parent_and_tells_it_once_when_it_completes() -> None:
    d = child()
    submit_child(d, {"item": "a.py", "index": 4})
    assert d.state.parent == PARENT
    cmds = d.report(result={"lines": 3})
    tells = [c for c in cmds if isinstance(c, TellParent)]
    assert len(tells) == 1
    assert tells[0].parent == PARENT.as_dict() and tells[0].status == "completed"
    assert tells[0].result == {"work": {"lines": 3}}


def test_a_child_with_input_its_schema_refuses_halts_and_tells_its_parent() -> None:
    """Its input came from the parent: rather than refuse the parent's event, the child halts."""
    d = child()
    cmds = submit_child(d, {"item": 7, "index": 4})
    assert d.state.status is TaskStatus.HALTED
    assert d.state.halt is not None and d.state.halt.reason == "invalid_input"
    assert [(c.type, c.status, c.reason) for c in cmds if isinstance(c, TellParent)] == [
        ("TellParent", "halted", "invalid_input")]


def test_a_halted_child_tells_again_when_it_is_retried_to_the_end() -> None:
    d = child()
    submit_child(d, {"item": "a", "index": 4})
    first = [c for c in d.report(ok=False, error="exit_status") if isinstance(c, TellParent)]
    assert [c.status for c in first] == ["halted"]
    d.apply(d.make(TaskRetried, actor="olga", reason="fixed"))
    again = [c for c in d.report() if isinstance(c, TellParent)]
    assert [c.status for c in again] == ["completed"] and again[0].version != first[0].version


def test_only_its_parent_may_cancel_a_child_as_the_system() -> None:
    d = child()
    submit_child(d, {"item": "a", "index": 4})
    with pytest.raises(IllegalEventError, match="not its parent"):
        d.apply(d.make(TaskCancelled, actor="statewright:map", reason="x", by_parent="p2"))
    cmds = d.apply(d.make(TaskCancelled, actor="statewright:map", reason="step ended", by_parent="p1"))
    assert d.state.status is TaskStatus.CANCELLED
    assert [c.status for c in cmds if isinstance(c, TellParent)] == ["cancelled"]


def test_a_task_without_a_parent_tells_no_one() -> None:
    d = Driver(CHILD)
    d.submit({"item": "a"})
    assert not [c for c in d.report() if isinstance(c, TellParent)]


def test_cancelling_the_parent_also_cancels_its_halted_children() -> None:
    """A halted child waits in the operator queue; cancelling its parent takes it out too."""
    d = Driver(fan(concurrency=2, tolerated=1))
    d.submit({"files": ["a", "b", "c"]})
    end(d, 0, "halted", reason="exit_status")
    cmds = d.cancel(actor="olga", reason="wrong batch")
    assert sorted(c.child_id for c in cmds if isinstance(c, CancelChild)) == [
        "t1.each.1.0", "t1.each.1.1", "t1.each.1.2"]
