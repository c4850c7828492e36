"""The webhook receiver: deliveries verified, deduplicated and mapped to inputs the engine
accepts or refuses, on every store backend, against the fake GitHub. The seed's failure
modes are reproduced and shown harmless: racing label events start no second fix, and a
review-approved applied by hand before the fixes ran out is refused, removed and explained."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from people.support import snapshot
from statewright.definition.model import Workflow
from statewright.integrations.github.webhook import WebhookConfig, handle_event, task_key
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.users import Principal
from store.backends import SQL_BACKENDS

from . import payloads as p
from .fake_github import FakeGitHub
from .support import REPO, drain, pr


@pytest.fixture
def config(review_workflow: Workflow) -> WebhookConfig:
    return WebhookConfig.build([review_workflow], secret=p.SECRET)


def send(engine: Engine, config: WebhookConfig, event: str, payload: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    headers, body = p.delivery(event, payload, **kwargs)
    return handle_event(engine, config, headers, body)


def _task(engine: Engine, number: int) -> str:
    tid = engine.store.task_by_key(task_key(REPO, number))
    assert tid is not None
    return tid


def test_from_the_issue_to_the_merge_decision(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    """issues.opened starts the task; the auto-fix loop runs twice; a maintainer's
    review-approved label is her approval of the proposal the issue shows."""
    status, answer = send(engine, config, "issues", p.issue_opened(21, body="Add a flag; needs 2 fixes"))
    assert status == 200
    tid = answer["task_id"]
    drain(engine)
    assert engine.state(tid).status is TaskStatus.AWAITING_APPROVAL
    assert github.labels(REPO, pr(21)) == {"awaiting-merge-decision", "auto-fix-attempt-2"}
    assert len(engine.state(tid).attempts_of("generate")) == 3

    github.label_by_hand(REPO, pr(21), "review-approved")  # on the pull request the generator opened
    status, answer = send(engine, config, "pull_request", p.labeled(pr(21), "review-approved", "octocat",
                                                                     item="pull_request"))
    assert (status, answer["approved_by"], answer["task_id"]) == (200, "alice", tid)
    drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED
    assert st.approvals[-1].actor == "alice"
    assert github.labels(REPO, pr(21)) == {"merge-approved", "auto-fix-attempt-2", "review-approved"}
    assert github.labels(REPO, 21) == set()


def test_three_fixes_then_escalation(engine: Engine, config: WebhookConfig, github: FakeGitHub) -> None:
    _, answer = send(engine, config, "issues", p.issue_opened(22, body="needs 4 fixes"))
    drain(engine)
    st = engine.state(answer["task_id"])
    assert st.status is TaskStatus.HALTED and st.halt is not None and st.halt.reason == "loop_budget_exhausted"
    assert len(st.attempts_of("generate")) == 4
    assert github.labels(REPO, pr(22)) == {"escalated", "auto-fix-attempt-3"}


def test_a_manual_review_approved_before_the_fixes_ran_out_is_refused_and_removed(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    """The seed's escalation bypass: the label is an approval attempt, and the task is not
    waiting for one. It is refused, removed again with a comment saying why, and the loop
    guard runs its course."""
    _, answer = send(engine, config, "issues", p.issue_opened(23, body="needs 4 fixes"))
    tid = answer["task_id"]
    before = engine.state(tid)
    github.label_by_hand(REPO, 23, "review-approved")
    status, answer = send(engine, config, "issues", p.labeled(23, "review-approved", "octocat"))
    assert status == 409
    assert answer["refused"] == "the task is not waiting for an approval (it is running at step 'validate')"
    assert engine.state(tid).version == before.version
    assert "review-approved" not in github.labels(REPO, 23)
    (comment,) = github.comments_on(REPO, 23)
    assert "statewright removed the label `review-approved` @octocat applied: the task is not waiting" in comment
    drain(engine)
    assert engine.state(tid).status is TaskStatus.HALTED  # escalated after three fixes all the same


@pytest.mark.parametrize(("login", "why"), [
    ("hubot-dev", "'bob' lacks the role 'maintainer'"),
    ("mallory", "@mallory is not mapped to an active statewright user"),
])
def test_an_approval_label_from_someone_who_may_not_approve_is_refused(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal], login: str, why: str,
) -> None:
    _, answer = send(engine, config, "issues", p.issue_opened(24))
    tid = answer["task_id"]
    drain(engine)
    waiting = engine.state(tid)
    assert waiting.status is TaskStatus.AWAITING_APPROVAL
    status, answer = send(engine, config, "pull_request", p.labeled(pr(24), "review-approved", login,
                                                                     item="pull_request"))
    assert status == 409 and why in answer["refused"]
    assert engine.state(tid).version == waiting.version
    assert any(why in c for c in github.comments_on(REPO, pr(24)))


def test_an_approval_label_binds_to_the_proposal_the_pull_request_shows(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    """Evidence added while the task waits builds a new proposal. Until a worker shows it on
    the pull request, a label approves what the pull request shows, the old one, and is
    refused; once it is shown, the same label approves the new one."""
    _, answer = send(engine, config, "issues", p.issue_opened(36))
    tid = answer["task_id"]
    drain(engine)
    old = engine.state(tid).current
    engine.add_evidence(tid, people["olga"], {"benchmark": "2% faster"}, note="measured after the review")
    new = engine.state(tid).current
    assert old is not None and new is not None and new.proposal_hash != old.proposal_hash
    label = p.labeled(pr(36), "review-approved", "octocat", item="pull_request")
    status, answer = send(engine, config, "pull_request", label)
    assert (status, answer["refused"]) == (409, "the proposal changed since the pull request showed it; review "
                                                "the new one")
    drain(engine)  # the worker shows the new proposal
    assert new.proposal_hash in github.comments_on(REPO, pr(36))[-1]
    status, _ = send(engine, config, "pull_request", label)
    assert status == 200
    assert engine.state(tid).approvals[-1].proposal_hash == new.proposal_hash


def test_racing_label_events_start_no_second_fix(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    """The seed's concurrent triggers: changes-requested applied by hand, many deliveries at
    once, while the task is in its fix loop. None is an input that starts a fix (each is
    refused and removed), so the task does exactly the fixes its own reviews asked for."""
    _, answer = send(engine, config, "issues", p.issue_opened(25, body="needs 1 fix"))
    tid = answer["task_id"]
    results: list[int] = []

    def fire() -> None:
        results.append(send(engine, config, "issues", p.labeled(25, "changes-requested", "octocat"))[0])

    threads = [threading.Thread(target=fire) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [409] * 6
    drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL
    assert len(st.attempts_of("generate")) == 2  # the first generation and the one fix asked for
    assert github.labels(REPO, pr(25)) == {"awaiting-merge-decision", "auto-fix-attempt-1"}


def test_racing_opened_events_start_one_task(engine: Engine, config: WebhookConfig, github: FakeGitHub) -> None:
    answers: list[tuple[int, dict[str, Any]]] = []

    def fire() -> None:
        answers.append(send(engine, config, "issues", p.issue_opened(26)))

    threads = [threading.Thread(target=fire) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {status for status, _ in answers} == {200}
    assert len({a["task_id"] for _, a in answers}) == 1


def test_racing_approvals_grant_once(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal],
) -> None:
    _, answer = send(engine, config, "issues", p.issue_opened(27))
    tid = answer["task_id"]
    drain(engine)
    github.label_by_hand(REPO, pr(27), "review-approved")
    statuses: list[int] = []

    def fire() -> None:
        label = p.labeled(pr(27), "review-approved", "octocat", item="pull_request")
        statuses.append(send(engine, config, "pull_request", label)[0])

    threads = [threading.Thread(target=fire) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200] * 4  # one approval; the others find it hers already
    assert len(engine.state(tid).approvals) == 1
    assert "review-approved" in github.labels(REPO, pr(27))  # her label stays
    assert github.comments_on(REPO, pr(27))[2:] == []  # only the link and the proposal


def test_the_tasks_own_labels_and_bots_are_ignored(
    engine: Engine, config: WebhookConfig, github: FakeGitHub,
) -> None:
    _, answer = send(engine, config, "issues", p.issue_opened(28))
    drain(engine)
    version = engine.state(answer["task_id"]).version
    assert send(engine, config, "issues", p.labeled(28, "awaiting-merge-decision", "statewright-bot"))[0] == 202
    assert send(engine, config, "issues", p.labeled(28, "needs-review", "ci", kind="Bot"))[0] == 202
    assert send(engine, config, "pull_request", p.labeled(28, "bug", "octocat", item="pull_request"))[0] == 202
    assert engine.state(answer["task_id"]).version == version


def test_a_pull_request_starts_its_own_task_once(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, review_workflow: Workflow,
) -> None:
    """The example starts on issues only (its pull requests are its generate step's); a
    workflow that starts on pull_request.opened starts one task per pull request."""
    from statewright.definition.loader import workflow_from_dict

    assert send(engine, config, "pull_request", p.pull_request_opened(29))[0] == 202
    raw = dict(review_workflow.raw)
    raw["github"] = {**raw["github"], "start_on": ["issues.opened", "pull_request.opened"]}
    config = WebhookConfig.build([workflow_from_dict(raw, "<prs>")], secret=p.SECRET)
    status, answer = send(engine, config, "pull_request", p.pull_request_opened(29), delivery_id="d-29")
    assert status == 200
    assert engine.state(answer["task_id"]).input["author"] == "dave"
    again = send(engine, config, "pull_request", p.pull_request_opened(29))
    assert again == (200, {"task_id": answer["task_id"], "duplicate": True})


def test_check_suite_and_review_make_a_wait_step_check_now(
    engine: Engine, github: FakeGitHub, tmp_path: Any,
) -> None:
    """A wait step's next check is an hour away; a completed check suite (or a submitted
    review) on its pull request makes it check now. The check decides, not the event."""
    from statewright.definition.loader import workflow_from_dict

    flag = tmp_path / "ci-green"
    wf = workflow_from_dict({
        "workflow": "wait-ci", "input_schema": {"type": "object", "properties": {
            "repo": {"type": "string"}, "number": {"type": "integer"}}},
        "github": {"repo": REPO, "labels": {"ci": "waiting-for-ci"}},
        "steps": [{"id": "ci", "kind": "wait", "owner": "ci", "check": {"command": ["test", "-f", str(flag)]},
                   "every": "1h", "max_checks": 5}],
    }, "<wait-ci>")
    config = WebhookConfig.build([wf], secret=p.SECRET)
    _, answer = send(engine, config, "pull_request", p.pull_request_opened(30))
    tid = answer["task_id"]
    drain(engine)
    assert engine.state(tid).status is TaskStatus.WAITING
    status, _ = send(engine, config, "check_suite", p.check_suite_completed([30]))
    assert status == 200
    drain(engine)
    assert engine.state(tid).status is TaskStatus.WAITING  # checked now: still red
    flag.write_text("green")
    assert send(engine, config, "pull_request_review", p.review_submitted(30))[0] == 200
    drain(engine)
    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert engine.state(tid).attempts[-1].checks == 3  # the first check, then one per event
    assert send(engine, config, "check_suite", p.check_suite_completed([30]))[0] == 202  # nothing waits now


BAD: list[tuple[str, dict[str, Any], int]] = [
    ("no signature", {"sign": False}, 401),
    ("another secret", {"secret": "guess"}, 401),
    ("unknown event", {"event": "deployment"}, 422),
    ("unknown repository", {"payload": p.issue_opened(31, repo="octo-org/elsewhere")}, 404),
    ("not JSON", {"raw": b"{not json"}, 400),
    ("a JSON list", {"raw": b"[1, 2]"}, 400),
    ("no number", {"payload": {**p.issue_opened(31), "issue": {"title": "x"}}}, 400),
    ("a number as text", {"payload": {**p.issue_opened(31), "issue": {"number": "31"}}}, 400),
    ("no repository", {"payload": {"action": "opened", "issue": {"number": 31}}}, 400),
    ("no delivery id", {"delivery": ""}, 400),
    ("too large", {"raw": b" " * 1_000_001}, 413),
]


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # compares database snapshots taken with SQL
def test_bad_deliveries_get_their_status_and_change_nothing(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, store_url: str,
) -> None:
    """Each of BAD, one after the other on one store: its status, one error, no row changed
    and no call to GitHub."""
    before = snapshot(store_url)
    for case, change, status in BAD:
        headers, body = p.delivery(change.get("event", "issues"), change.get("payload", p.issue_opened(31)),
                                   secret=change.get("secret", p.SECRET), raw=change.get("raw"))
        if change.get("sign") is False:
            del headers["X-Hub-Signature-256"]
        if "delivery" in change:
            headers["X-GitHub-Delivery"] = change["delivery"]
        got, answer = handle_event(engine, config, headers, body)
        assert (case, got) == (case, status), answer
        assert list(answer) == ["error"] and answer["error"], case
        assert snapshot(store_url) == before, case
    assert github.calls == []


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # compares database snapshots taken with SQL
def test_a_tampered_body_is_refused(engine: Engine, config: WebhookConfig, store_url: str) -> None:
    headers, _ = p.delivery("issues", p.issue_opened(32))
    _, other = p.delivery("issues", p.issue_opened(33))
    before = snapshot(store_url)
    assert handle_event(engine, config, headers, other)[0] == 401
    assert snapshot(store_url) == before


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # compares database snapshots taken with SQL
def test_a_replayed_delivery_changes_nothing(
    engine: Engine, config: WebhookConfig, github: FakeGitHub, people: dict[str, Principal], store_url: str,
) -> None:
    """The same delivery again (GitHub's redelivery, or an attacker's replay of a signed
    body): a submit finds its task by key, an approval finds its event by id."""
    _, answer = send(engine, config, "issues", p.issue_opened(34), delivery_id="d-open")
    tid = answer["task_id"]
    drain(engine)
    github.label_by_hand(REPO, pr(34), "review-approved")
    label = p.labeled(pr(34), "review-approved", "octocat", item="pull_request")
    assert send(engine, config, "pull_request", label, delivery_id="d-lab")[0] == 200
    drain(engine)
    before = snapshot(store_url)
    writes = len(github.writes())
    assert send(engine, config, "issues", p.issue_opened(34), delivery_id="d-open") == (
        200, {"task_id": tid, "duplicate": True})
    assert send(engine, config, "pull_request", label, delivery_id="d-lab") == (
        200, {"task_id": tid, "duplicate": True})
    assert snapshot(store_url) == before
    assert len(github.writes()) == writes  # a read finds the pull request's task; nothing is written


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # compares database snapshots taken with SQL
def test_ping_and_unmapped_actions(engine: Engine, config: WebhookConfig, store_url: str) -> None:
    before = snapshot(store_url)
    assert send(engine, config, "ping", {"zen": "Keep it logically awesome.", "hook_id": 1}) == (200, {"ok": "pong"})
    edited = {**p.issue_opened(35), "action": "edited"}
    assert send(engine, config, "issues", edited)[0] == 202
    assert snapshot(store_url) == before
