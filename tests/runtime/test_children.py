"""Child tasks through the engine, on every store backend: a map step's children run as
tasks of their own, each records its parent, each end reaches the parent in the same commit
as the child's terminal event, a parent's cancel cancels its live children (audited), and
``verify`` passes with all of it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from people.support import People
from statewright import TaskStatus
from statewright._errors import DefinitionError, VersionConflictError
from statewright.definition.loader import load_workflow
from statewright.machine.events import ChildEnded
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_all
from statewright.runtime.worker import Worker
from statewright.store.base import AppendRequest

from .support import STEPS, drain

CHILD = f"""\
workflow: square-one
input_schema:
  type: object
  properties: {{item: {{}}, index: {{type: integer}}}}
steps:
  - id: square
    kind: code
    owner: tests
    run: {{callable: "{STEPS}:square"}}
"""
HUMAN_CHILD = """\
workflow: sign-one
steps:
  - id: sign
    kind: human
    owner: tests
    approvers: {role: maintainer}
"""


def parent_yaml(child: str = "child.yaml", **spec: Any) -> str:
    extra = "".join(f"    {k}: {v}\n" for k, v in spec.items())
    return f"""\
workflow: squares
input_schema:
  type: object
  properties: {{numbers: {{type: array}}}}
steps:
  - id: each
    kind: map
    owner: tests
    workflow: {child}
    items: input.numbers
{extra}  - id: total
    kind: code
    owner: tests
    run: {{callable: "{STEPS}:record"}}
"""


@pytest.fixture
def files(tmp_path: Path) -> Path:
    d = tmp_path / "defs"
    d.mkdir()
    (d / "child.yaml").write_text(CHILD, encoding="utf-8")
    (d / "sign.yaml").write_text(HUMAN_CHILD, encoding="utf-8")
    return d


def make(open_engine: Callable[..., Engine], workspace: Path) -> Engine:
    return open_engine(workspace_root=workspace.parent / "workspaces")


def test_a_map_step_runs_one_child_per_item_and_gathers_their_results(
    open_engine: Callable[..., Engine], files: Path, workspace: Path,
) -> None:
    """Five items, two at a time: five child tasks that record their parent, results in item
    order, one ChildEnded per child in the parent's log, and a clean verify."""
    (files / "parent.yaml").write_text(parent_yaml(max_concurrency=2), encoding="utf-8")
    engine = make(open_engine, workspace)
    tid = engine.submit(load_workflow(files / "parent.yaml"), {"numbers": [3, 1, 4, 1, 5]})
    assert [c.live for c in engine.state(tid).children] == [True, True]
    drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED
    assert [r["square"]["square"] for r in st.results["each"]["results"]] == [9, 1, 16, 1, 25]
    kids = engine.store.children(tid)
    assert sorted(k.task_id for k in kids) == [f"{tid}.each.1.{i}" for i in range(5)]
    for k in kids:
        child = engine.state(k.task_id)
        assert child.status is TaskStatus.COMPLETED
        assert child.parent is not None and (child.parent.task_id, child.parent.step) == (tid, "each")
    ended = [e for e in engine.events(tid) if isinstance(e, ChildEnded)]
    assert sorted(e.index for e in ended) == [0, 1, 2, 3, 4]
    assert verify_all(engine) == (6, [])


def test_a_failed_child_beyond_the_tolerance_fails_the_map_step(
    open_engine: Callable[..., Engine], files: Path, workspace: Path,
) -> None:
    """One bad item with none tolerated halts the parent at the map step, with the reason."""
    (files / "parent.yaml").write_text(parent_yaml(max_concurrency=1), encoding="utf-8")
    engine = make(open_engine, workspace)
    tid = engine.submit(load_workflow(files / "parent.yaml"), {"numbers": [2, "boom", 3]})
    drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED and st.halt is not None
    assert (st.halt.step, st.halt.reason) == ("each", "map_failures")
    assert [c.status for c in st.children] == ["completed", "halted"]  # the third never started
    assert verify_all(engine)[1] == []


def test_cancelling_a_parent_cancels_its_live_children_with_audited_events(
    open_engine: Callable[..., Engine], files: Path, workspace: Path,
) -> None:
    """Children parked at a human step are cancelled with the parent, by the same operator,
    in the same commit; the parent records each end."""
    (files / "parent.yaml").write_text(parent_yaml("sign.yaml", max_concurrency=3), encoding="utf-8")
    engine = make(open_engine, workspace)
    olga = People(engine).add("olga", "operator")
    tid = engine.submit(load_workflow(files / "parent.yaml"), {"numbers": [1, 2, 3, 4]})
    drain(engine)
    kids = [c.task_id for c in engine.state(tid).children]
    assert [engine.state(k).status for k in kids] == [TaskStatus.AWAITING_APPROVAL] * 3
    engine.cancel(tid, olga, "wrong batch")
    st = engine.state(tid)
    assert st.status is TaskStatus.CANCELLED
    assert [c.status for c in st.children] == ["cancelled"] * 3
    for k in kids:
        child = engine.state(k)
        assert child.status is TaskStatus.CANCELLED
        act = child.operator_actions[-1]
        assert (act.action, act.actor) == ("cancel", "olga") and "wrong batch" in act.reason
    assert verify_all(engine)[1] == []


def test_a_child_end_and_the_parents_event_commit_together_or_not_at_all(
    open_engine: Callable[..., Engine], files: Path, workspace: Path,
) -> None:
    """``append_all`` with a stale parent version writes nothing, not even the child's end."""
    (files / "parent.yaml").write_text(parent_yaml("sign.yaml"), encoding="utf-8")
    engine = make(open_engine, workspace)
    tid = engine.submit(load_workflow(files / "parent.yaml"), {"numbers": [1]})
    drain(engine)
    kid = engine.state(tid).children[0].task_id
    child_before, parent_before = engine.store.load(kid), engine.store.load(tid)
    assert child_before is not None and parent_before is not None
    child_req = AppendRequest(kid, child_before.version, {"event_id": f"{kid}:x", "type": "TaskCancelled",
                                                           "at_ms": 1}, {"status": "cancelled"}, [], terminal=True)
    stale = AppendRequest(tid, parent_before.version - 1, {"event_id": f"{tid}:x", "type": "ChildEnded",
                                                           "at_ms": 1}, {"status": "running"}, [])
    with pytest.raises(VersionConflictError):
        engine.store.append_all([child_req, stale])
    assert engine.store.load(kid) == child_before and engine.store.load(tid) == parent_before
    assert [e.event_id for e in engine.store.events(kid)][-1] != f"{kid}:x"


def test_a_map_over_an_unregistered_workflow_name_is_refused_at_submit(
    open_engine: Callable[..., Engine], files: Path, workspace: Path,
) -> None:
    (files / "parent.yaml").write_text(parent_yaml("nobody-knows"), encoding="utf-8")
    engine = make(open_engine, workspace)
    with pytest.raises(DefinitionError, match="no workflow named 'nobody-knows' is registered"):
        engine.submit(load_workflow(files / "parent.yaml"), {"numbers": [1]})
    assert engine.store.list_tasks() == []


def test_a_map_over_a_registered_name_runs_its_latest_version(
    open_engine: Callable[..., Engine], files: Path, workspace: Path,
) -> None:
    engine = make(open_engine, workspace)
    engine.register(load_workflow(files / "child.yaml"))
    (files / "parent.yaml").write_text(parent_yaml("square-one"), encoding="utf-8")
    tid = engine.submit(load_workflow(files / "parent.yaml"), {"numbers": [7]})
    drain(engine)
    assert engine.state(tid).results["each"]["results"][0]["square"]["square"] == 49


def test_run_task_works_a_parents_children_in_the_calling_thread(
    open_engine: Callable[..., Engine], files: Path, workspace: Path,
) -> None:
    """``run_task`` on a parent claims its live children's steps too, and returns the parent."""
    from statewright.runtime.run import run_task

    (files / "parent.yaml").write_text(parent_yaml(max_concurrency=2), encoding="utf-8")
    engine = make(open_engine, workspace)
    tid = engine.submit(load_workflow(files / "parent.yaml"), {"numbers": [1, 2, 3]})
    st = run_task(engine, tid)
    assert st.task_id == tid and st.status is TaskStatus.COMPLETED
    assert [r["square"]["square"] for r in st.results["each"]["results"]] == [1, 4, 9]


def test_a_parent_submitted_again_under_its_key_is_the_same_task(
    open_engine: Callable[..., Engine], files: Path, workspace: Path,
) -> None:
    """A key names one parent: the second submit starts no second set of children."""
    (files / "parent.yaml").write_text(parent_yaml(max_concurrency=2), encoding="utf-8")
    engine = make(open_engine, workspace)
    wf = load_workflow(files / "parent.yaml")
    tid = engine.submit(wf, {"numbers": [1, 2]}, key="batch-7")
    assert engine.submit(wf, {"numbers": [1, 2]}, key="batch-7") == tid
    assert len(engine.store.list_tasks()) == 3


def test_a_parent_moved_on_by_another_engine_is_read_again(
    open_engine: Callable[..., Engine], files: Path, workspace: Path,
) -> None:
    """An engine remembers the parent its last child's end left; when another engine has
    moved the parent on since, the commit is refused and retried from the stored parent."""
    (files / "parent.yaml").write_text(parent_yaml(max_concurrency=1), encoding="utf-8")
    first, second = make(open_engine, workspace), make(open_engine, workspace)
    ops = People(first).add("olga", "operator")
    tid = first.submit(load_workflow(files / "parent.yaml"), {"numbers": [1, 2, 3]})
    Worker(first).run(until=lambda: len(first.state(tid).children) == 2)  # one child ended: remembered
    second.add_evidence(tid, ops, {"ticket": "OPS-7"}, note="moved on elsewhere")
    drain(first)
    st = first.state(tid)
    assert st.status is TaskStatus.COMPLETED and [e.note for e in st.evidence] == ["moved on elsewhere"]
    assert verify_all(first)[1] == []
