"""Labels as a projection of task state: every transition that changes what the task shows
leaves one SyncLabels command in the outbox, and the worker makes the issue's labels match
(stale ones removed, current ones added, a person's own labels left alone). Runs on every
store backend, against the fake GitHub."""

from __future__ import annotations

import pytest

from statewright.definition.model import Workflow
from statewright.machine.labels import labels_for
from statewright.machine.state import TaskStatus, new_task
from statewright.machine.task import transition
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.users import Principal

from .fake_github import FakeGitHub
from .support import REPO, drain, issue, pr


def _labels_added(github: FakeGitHub, number: int) -> list[str]:
    path = f"/repos/{REPO}/issues/{number}/labels"
    return [n for c in github.writes() if c.method == "POST" and c.path == path for n in c.body["labels"]]


def test_a_clean_review_waits_for_the_merge_decision_with_its_label_and_proposal(
    engine: Engine, github: FakeGitHub, review_workflow: Workflow,
) -> None:
    """validate -> generate -> review passes at once: the pull request the generator opened
    shows only the merge decision's label, with a comment naming the task and the proposal's
    hash in another; the issue keeps none of the pipeline's labels. Each SyncLabels reads the
    task as it is when performed, so the labels only move forward: one performed while review
    runs (the worker's executor may pick it up before the review step the commit held for it)
    shows needs-review, one performed after shows the merge decision; none ever writes a stage
    the task already left."""
    tid = engine.submit(review_workflow, issue(7))
    drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL
    assert github.labels(REPO, pr(7)) == {"awaiting-merge-decision"}
    assert github.labels(REPO, 7) == set()
    assert _labels_added(github, pr(7)) in (["awaiting-merge-decision"], ["needs-review", "awaiting-merge-decision"])
    assert st.current is not None
    link, note = github.comments_on(REPO, pr(7))
    assert f"statewright task `{tid}` (started for #7)" in link
    assert st.current.proposal_hash in note and "review-approved" in note
    assert github.comments_on(REPO, 7) == []


def test_the_labels_stay_on_the_issue_until_the_step_names_its_pull_request(
    engine: Engine, github: FakeGitHub, review_workflow: Workflow,
) -> None:
    """Before the generator's result names the pull request, the issue shows the stage; then
    the labels move, and the issue sheds them. (The task's log replayed up to generate's
    start, and synced as a worker would.)"""
    from statewright.integrations.github.client import GitHub
    from statewright.integrations.github.labels import sync

    tid = engine.submit(review_workflow, issue(15))
    drain(engine)
    state = new_task(tid, review_workflow)
    for event in engine.events(tid):
        state, _ = transition(state, event)
        if state.current is not None and state.current.step == "generate":
            break
    github.issue_labels.clear()
    with GitHub() as client:
        sync(lambda: state, client)
        assert github.labels(REPO, 15) == {"ready-for-dev"}
        assert github.labels(REPO, pr(15)) == set()
        final = engine.state(tid)
        sync(lambda: final, client)
    assert github.labels(REPO, 15) == set()
    assert github.labels(REPO, pr(15)) == {"awaiting-merge-decision"}


def test_changes_requested_show_the_fix_and_its_attempt_label(
    engine: Engine, github: FakeGitHub, review_workflow: Workflow,
) -> None:
    """What the task showed at each version (its log replayed through the reducer): each
    request for changes shows changes-requested with the next auto-fix-attempt label, and
    the task waits for the merge decision still showing how many fixes it took."""
    tid = engine.submit(review_workflow, issue(8, failing_reviews=2))
    drain(engine)
    shown: list[set[str]] = []
    state = new_task(tid, review_workflow)
    for event in engine.events(tid):
        state, commands = transition(state, event)
        if not shown or labels_for(state) != shown[-1]:
            shown.append(set(labels_for(state)))
            assert [c.type for c in commands if c.type == "SyncLabels"] == ["SyncLabels"]
    a1, a2 = "auto-fix-attempt-1", "auto-fix-attempt-2"
    assert shown == [
        {"triage"}, {"ready-for-dev"}, {"needs-review"}, {"changes-requested", a1}, {"needs-review", a1},
        {"changes-requested", a2}, {"needs-review", a2}, {"awaiting-merge-decision", a2},
    ]
    assert github.labels(REPO, pr(8)) == {"awaiting-merge-decision", "auto-fix-attempt-2"}


def test_a_fourth_request_for_changes_escalates_after_three_fixes(
    engine: Engine, github: FakeGitHub, review_workflow: Workflow,
) -> None:
    """The loop guard is the task's own budget: the fourth review failure halts it, and the
    issue shows escalated with auto-fix-attempt-3, nothing else of the pipeline's."""
    tid = engine.submit(review_workflow, issue(9, failing_reviews=4))
    drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED and st.halt is not None
    assert st.halt.reason == "loop_budget_exhausted"
    assert len(st.attempts_of("generate")) == 4  # the first generation and three fixes
    assert github.labels(REPO, pr(9)) == {"escalated", "auto-fix-attempt-3"}


def test_an_approved_merge_decision_ends_showing_merge_approved(
    engine: Engine, github: FakeGitHub, review_workflow: Workflow, people: dict[str, Principal],
) -> None:
    tid = engine.submit(review_workflow, issue(10))
    drain(engine)
    cur = engine.state(tid).current
    assert cur is not None
    engine.approve(tid, people["alice"], proposal_hash=cur.proposal_hash)
    drain(engine)
    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert github.labels(REPO, pr(10)) == {"merge-approved"}


def test_stale_stage_labels_go_and_a_persons_own_labels_stay(
    engine: Engine, github: FakeGitHub, review_workflow: Workflow,
) -> None:
    """A stage label someone added by hand is not the task's state: the next sync removes
    it. Labels the projection does not manage (bug) are never touched."""
    for number in (11, pr(11)):
        github.label_by_hand(REPO, number, "bug")
        github.label_by_hand(REPO, number, "needs-review")
        github.label_by_hand(REPO, number, "auto-fix-attempt-2")
    engine.submit(review_workflow, issue(11))
    drain(engine)
    assert github.labels(REPO, pr(11)) == {"bug", "awaiting-merge-decision"}
    assert github.labels(REPO, 11) == {"bug"}


def test_a_failing_github_is_retried_and_the_labels_arrive(
    engine: Engine, github: FakeGitHub, review_workflow: Workflow, clock: FakeClock,
) -> None:
    """A 502 is worth another try: the command is given back for a backoff (on the
    injected clock), and the labels arrive; the task never waited for them."""
    github.fail(3, 502)
    tid = engine.submit(review_workflow, issue(12))
    for _ in range(20):
        drain(engine)
        if github.labels(REPO, pr(12)) == {"awaiting-merge-decision"}:
            break
        clock.advance(60)
    assert engine.state(tid).status is TaskStatus.AWAITING_APPROVAL
    assert github.labels(REPO, pr(12)) == {"awaiting-merge-decision"}


@pytest.mark.parametrize("token", ["", "wrong"])
def test_without_a_good_token_the_task_still_runs(
    engine: Engine, github: FakeGitHub, review_workflow: Workflow, monkeypatch: pytest.MonkeyPatch, token: str,
) -> None:
    """Labels are a projection: a missing or refused token is logged, never a task failure."""
    monkeypatch.setenv("GITHUB_TOKEN", token)
    tid = engine.submit(review_workflow, issue(13))
    drain(engine)
    assert engine.state(tid).status is TaskStatus.AWAITING_APPROVAL
    assert github.labels(REPO, 13) == github.labels(REPO, pr(13)) == set()
    assert engine.store.claim("probe", engine.clock.now_ms(), 1000, 10) == []  # nothing left behind


def test_a_step_never_sees_the_workers_github_token(engine: Engine, github: FakeGitHub) -> None:
    """The worker calls GitHub with its own GITHUB_TOKEN; a step's process does not get it
    (the step below fails if it can read the variable)."""
    from statewright.definition.loader import workflow_from_dict

    wf = workflow_from_dict({
        "workflow": "no-token", "input_schema": {"type": "object", "properties": {
            "repo": {"type": "string"}, "number": {"type": "integer"}}},
        "github": {"repo": REPO, "terminal": {"completed": "done", "halted": "failed"}},
        "steps": [{"id": "peek", "kind": "code", "owner": "ci",
                   "run": {"command": ["sh", "-c", 'test -z "$GITHUB_TOKEN$GITHUB_API_URL"']}}],
    }, "<no-token>")
    tid = engine.submit(wf, {"repo": REPO, "number": 14})
    drain(engine)
    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert github.labels(REPO, 14) == {"done"}
