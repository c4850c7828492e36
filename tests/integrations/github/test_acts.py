"""A person's acts on GitHub as inputs the reducer accepts or refuses, on every store backend,
against the fake GitHub: a rejection label, a merge, a close, a label removed or re-applied,
on the pull request the generate step opened (found by the comment statewright wrote there,
believed only when the task's state names that pull request)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from statewright._errors import InputError
from statewright.definition.model import Workflow
from statewright.integrations.github.labels import LINK_MARK
from statewright.integrations.github.webhook import WebhookConfig, handle_event
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.users import Principal

from . import payloads as p
from .fake_github import FakeGitHub
from .support import REPO, drain, issue, pr


@pytest.fixture
def config(review_workflow: Workflow) -> WebhookConfig:
    return WebhookConfig.build([review_workflow], secret=p.SECRET)


def send(engine: Engine, config: WebhookConfig, event: str, payload: Any) -> tuple[int, dict[str, Any]]:
    headers, body = p.delivery(event, payload)
    return handle_event(engine, config, headers, body)


def _pr_label(number: int, label: str, by: str) -> dict[str, Any]:
    return p.labeled(number, label, by, item="pull_request")


def _waiting(engine: Engine, config: WebhookConfig, number: int) -> str:
    """A task of the example, at its merge decision."""
    status, answer = send(engine, config, "issues", p.issue_opened(number))
    assert status == 200
    drain(engine)
    assert engine.state(answer["task_id"]).status is TaskStatus.AWAITING_APPROVAL
    return str(answer["task_id"])


def test_a_rejection_label_is_the_maintainers_rejection_and_sends_the_pull_request_back(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    tid = _waiting(engine, config, 41)
    github.label_by_hand(REPO, pr(41), "needs-rework")
    status, answer = send(engine, config, "pull_request", _pr_label(pr(41), "needs-rework", "octocat"))
    assert status == 200, answer
    assert (answer["rejected_by"], answer["reason_code"]) == ("alice", "needs_changes")
    drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL  # generated and reviewed again, waiting again
    assert len(st.attempts_of("generate")) == 2
    assert github.labels(REPO, pr(41)) == {"awaiting-merge-decision", "auto-fix-attempt-1", "needs-rework"}


def test_a_rejection_label_while_nothing_waits_is_refused_and_removed(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    _, answer = send(engine, config, "issues", p.issue_opened(42, body="needs 1 fix"))
    tid = answer["task_id"]
    version = engine.state(tid).version
    github.label_by_hand(REPO, 42, "needs-rework")
    status, answer = send(engine, config, "issues", p.labeled(42, "needs-rework", "octocat", item="issue"))
    assert (status, answer["refused"]) == (409, "the task is not waiting for a rejection (it is running at step "
                                                "'validate')")
    assert engine.state(tid).version == version
    assert "needs-rework" not in github.labels(REPO, 42)


def test_a_merge_while_the_decision_waits_is_the_mergers_approval(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    tid = _waiting(engine, config, 43)
    status, answer = send(engine, config, "pull_request", p.closed(pr(43), "octocat", merged=True))
    assert (status, answer["approved_by"]) == (200, "alice")
    drain(engine)
    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert github.labels(REPO, pr(43)) == {"merge-approved"}


def test_a_merge_of_an_escalated_pull_request_is_recorded_as_no_approval(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    """The seed's escalation bypass, by merging: a merge cannot be undone, but the task's
    record has no approval, and the pull request says so."""
    _, answer = send(engine, config, "issues", p.issue_opened(44, body="needs 4 fixes"))
    tid = answer["task_id"]
    drain(engine)
    assert engine.state(tid).status is TaskStatus.HALTED
    version = engine.state(tid).version
    status, answer = send(engine, config, "pull_request", p.closed(pr(44), "octocat", merged=True))
    assert (status, answer["refused"]) == (409, "the task is not waiting for an approval (it is halted)")
    assert engine.state(tid).version == version
    assert "statewright records no approval for the merge by @octocat" in github.comments_on(REPO, pr(44))[-1]
    assert github.labels(REPO, pr(44)) == {"escalated", "auto-fix-attempt-3"}


def test_closing_by_an_operator_cancels_and_by_anyone_else_is_reopened(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    tid = _waiting(engine, config, 45)
    github.closed.add((REPO, pr(45)))
    status, answer = send(engine, config, "pull_request", p.closed(pr(45), "hubot-dev"))
    assert (status, answer["refused"]) == (409, "'bob' lacks the role 'operator' needed to cancel the task")
    assert (REPO, pr(45)) not in github.closed  # reopened
    assert "statewright reopened #1045, which @hubot-dev closed" in github.comments_on(REPO, pr(45))[-1]
    assert engine.state(tid).status is TaskStatus.AWAITING_APPROVAL

    status, answer = send(engine, config, "pull_request", p.closed(pr(45), "octo-ops"))
    assert (status, answer["cancelled_by"]) == (200, "olga")
    drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.CANCELLED and st.operator_actions[-1].actor == "olga"
    assert github.labels(REPO, pr(45)) == {"abandoned"}
    assert send(engine, config, "issues", p.closed(45, "octo-ops", item="issue"))[0] == 202  # ended already


def test_a_label_the_task_shows_removed_by_hand_is_put_back(
    engine: Engine, config: WebhookConfig, github: FakeGitHub,
) -> None:
    _waiting(engine, config, 46)
    github.issue_labels[(REPO, pr(46))].remove("awaiting-merge-decision")
    status, answer = send(engine, config, "pull_request", p.unlabeled(pr(46), "awaiting-merge-decision", "octocat"))
    assert (status, answer["restored"]) == (200, "awaiting-merge-decision")
    assert github.labels(REPO, pr(46)) == {"awaiting-merge-decision"}
    assert send(engine, config, "pull_request", p.unlabeled(pr(46), "bug", "octocat"))[0] == 202


def test_a_stage_label_set_by_hand_is_refused_and_the_tasks_own_set_back(
    engine: Engine, config: WebhookConfig, github: FakeGitHub,
) -> None:
    """Someone swaps awaiting-merge-decision for needs-review by hand: the swap is refused,
    needs-review removed, and the label the task shows is there again."""
    tid = _waiting(engine, config, 47)
    version = engine.state(tid).version
    github.issue_labels[(REPO, pr(47))] = ["needs-review"]
    status, _ = send(engine, config, "pull_request", _pr_label(pr(47), "needs-review", "octocat"))
    assert status == 409
    assert github.labels(REPO, pr(47)) == {"awaiting-merge-decision"}
    assert engine.state(tid).version == version


def test_a_re_applied_label_needs_no_event(engine: Engine, config: WebhookConfig, github: FakeGitHub) -> None:
    """The seed re-pulses changes-requested because a label already there emits no event.
    Here no event is needed: two review rounds run with no delivery at all, and a label the
    task shows, applied again by hand, is ignored."""
    _, answer = send(engine, config, "issues", p.issue_opened(48, body="needs 2 fixes"))
    tid = answer["task_id"]
    drain(engine)
    st = engine.state(tid)
    assert len(st.attempts_of("generate")) == 3 and st.status is TaskStatus.AWAITING_APPROVAL
    version = st.version
    again = send(engine, config, "pull_request", _pr_label(pr(48), "auto-fix-attempt-2", "octocat"))
    assert again[0] == 202 and "the task's own label" in again[1]["ignored"]
    assert engine.state(tid).version == version


def test_a_forged_link_comment_finds_no_task(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    """A comment naming a task on a pull request that task's state does not name is not
    believed: an approval label there changes nothing."""
    tid = _waiting(engine, config, 49)
    github.comments[(REPO, 9049)] = [f"{LINK_MARK} {tid} -->\nforged"]
    version = engine.state(tid).version
    status, answer = send(engine, config, "pull_request", _pr_label(9049, "review-approved", "octocat"))
    assert (status, answer) == (202, {"ignored": f"no task for {REPO}#9049"})
    assert engine.state(tid).version == version


def test_a_github_workflows_repo_input_is_its_repository_and_checkout_its_local_repository(
    engine: Engine, github: FakeGitHub, review_workflow: Workflow, tmp_path: Path,
) -> None:
    """In a workflow with a github key, input repo is OWNER/NAME (never made a path) and must
    be the key's; the local git repository is input checkout, pinned at submit."""
    with pytest.raises(InputError, match="input 'repo' is 'octo-org/other', but github-review serves"):
        engine.submit(review_workflow, {**issue(50), "repo": "octo-org/other"})
    git = tmp_path / "checkout"
    git.mkdir()
    for argv in (["init", "-q", "-b", "main"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                                                "--allow-empty", "-m", "start"]):
        subprocess.run(["git", *argv], cwd=git, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=git, check=True, capture_output=True,
                          text=True).stdout.strip()
    raw = dict(review_workflow.raw)
    raw["input_schema"] = {**raw["input_schema"], "properties": {**raw["input_schema"]["properties"],
                                                                  "checkout": {"type": "string"},
                                                                  "base_commit": {"type": "string"}}}
    from statewright.definition.loader import workflow_from_dict

    wf = workflow_from_dict(raw, "<with-checkout>")
    tid = engine.submit(wf, {**issue(50), "checkout": str(git)})
    assert engine.state(tid).input["base_commit"] == head
    assert engine.state(tid).input["repo"] == REPO
