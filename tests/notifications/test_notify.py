"""Notifications are outbox commands: a human step that waits, a task that halts, and a task
stuck at a step each tell their targets (a signed webhook, email over SMTP, a Slack-compatible
webhook), with a link to the review; a failing notification is retried with backoff, then
given up, and never blocks or fails the task."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from people.support import People
from statewright import workflow_from_dict
from statewright.definition.model import RetryPolicy, Workflow
from statewright.machine.state import TaskStatus
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.notify import Notifier
from statewright.runtime.verify import verify_task
from statewright.runtime.worker import Worker, WorkerStats

from .receivers import HANG, HttpReceiver, SmtpReceiver

SECRET = "s3cr3t-signing-key-for-tests"
STEPS = "notifications.steps"
BASE = "https://statewright.example.com"
FIVE_TRIES = RetryPolicy(max_attempts=5, initial_backoff_seconds=10, max_backoff_seconds=600, jitter=False)


def approval_flow(*targets: Mapping[str, str], stuck_after: str | None = None,
                  stuck: list[Mapping[str, str]] | None = None) -> Workflow:
    review: dict[str, Any] = {"id": "review", "kind": "human", "owner": "leads", "approvers": {"role": "lead"},
                              "notify": [dict(t) for t in targets]}
    if stuck_after:
        review["stuck_after"] = stuck_after
    return workflow_from_dict({
        "workflow": "notified",
        **({"notify": {"stuck": stuck}} if stuck else {}),
        "steps": [
            {"id": "draft", "kind": "code", "owner": "bots", "run": {"callable": f"{STEPS}:ok"}},
            review,
            {"id": "publish", "kind": "code", "owner": "bots", "run": {"callable": f"{STEPS}:ok"}},
        ],
    })


def halting_flow(*targets: Mapping[str, str]) -> Workflow:
    return workflow_from_dict({
        "workflow": "halting",
        "notify": {"halted": [dict(t) for t in targets]},
        "steps": [{"id": "charge", "kind": "code", "owner": "bots", "run": {"callable": f"{STEPS}:fail"}}],
    })


def drain(engine: Engine, **notifier: Any) -> WorkerStats:
    """One worker until nothing is due now (the fake clock moves only when a test moves it)."""
    env = notifier.pop("env", {"HOOK_SECRET": SECRET, "STATEWRIGHT_PUBLIC_URL": BASE})
    return Worker(engine, notifier=Notifier(env=env, **notifier)).run(until_idle=True)


def sent(engine: Engine, tid: str) -> list[dict[str, Any]]:
    return [dict(e.body) for e in engine.store.events(tid) if e.type == "NotificationSent"]


def hook(receiver: HttpReceiver, path: str = "/hook") -> dict[str, str]:
    return {"webhook": receiver.url + path, "secret_env": "HOOK_SECRET"}


def test_a_waiting_approval_posts_a_signed_webhook_with_the_review_link_once(
    open_engine: Callable[..., Engine], http: HttpReceiver,
) -> None:
    """The body is JSON signed with HMAC-SHA256 of its bytes; it names the task, the step, the
    proposal hash and the review link; the delivery is an event; draining again sends nothing."""
    engine = open_engine()
    tid = engine.submit(approval_flow(hook(http)))
    drain(engine)
    state = engine.state(tid)
    assert state.status is TaskStatus.AWAITING_APPROVAL
    [request] = http.requests
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Statewright-Signature"] == f"sha256={expected}"
    body = request.json()
    key = request.headers["X-Statewright-Idempotency-Key"]
    assert key == body["idempotency_key"] and key.startswith(f"{tid}/review/1/approval/webhook-")
    assert (body["event"], body["task_id"], body["step"], body["workflow"]) == ("approval", tid, "review", "notified")
    assert body["facts"]["proposal_hash"] == state.current.proposal_hash
    assert body["review_url"] == f"{BASE}/tasks/{tid}"
    assert f"{BASE}/tasks/{tid}" in body["text"] and "lead" in body["text"]
    [event] = sent(engine, tid)
    assert (event["delivered"], event["error"], event["tries"], event["idempotency_key"]) == (True, None, 1, key)
    assert event["target"] == f"webhook {http.url.removeprefix('http://')}"

    drain(engine)
    assert len(http.requests) == 1
    assert verify_task(engine, tid) == []


def test_email_and_slack_say_how_to_review_from_the_cli_without_a_public_url(
    open_engine: Callable[..., Engine], http: HttpReceiver, smtp: SmtpReceiver,
) -> None:
    """An email goes to the SMTP server from the worker's environment, its Message-ID made from
    the idempotency key; a Slack target gets {"text": ...}; with no STATEWRIGHT_PUBLIC_URL both
    name the review command."""
    engine = open_engine()
    tid = engine.submit(approval_flow({"email": "leads@example.com"}, {"slack": http.url + "/services/T/B/X"}))
    drain(engine, env={"STATEWRIGHT_SMTP_HOST": "127.0.0.1", "STATEWRIGHT_SMTP_PORT": str(smtp.port),
                       "STATEWRIGHT_SMTP_FROM": "statewright@example.com"})
    [mail] = smtp.messages
    assert (mail["To"], mail["From"]) == ("leads@example.com", "statewright@example.com")
    assert mail["Subject"].strip() == f"[statewright] task {tid} waits for your approval at review"
    text = mail.get_content()
    assert f"statewright review {tid}" in text and "STATEWRIGHT_PUBLIC_URL" in text
    assert engine.state(tid).current.proposal_hash in text
    key = mail["X-Statewright-Idempotency-Key"].strip()
    assert mail["Message-ID"] == f"<{hashlib.sha256(key.encode()).hexdigest()[:32]}@statewright>"
    [slack] = http.requests
    assert slack.path == "/services/T/B/X"
    assert list(slack.json()) == ["text"] and f"statewright review {tid}" in slack.json()["text"]
    assert "X-Statewright-Signature" not in slack.headers
    assert sorted((e["target"], e["delivered"]) for e in sent(engine, tid)) == [
        ("email leads@example.com", True), (f"slack {http.url.removeprefix('http://')}", True)]


def test_500s_are_retried_with_backoff_then_delivered(
    open_engine: Callable[..., Engine], http: HttpReceiver, clock: FakeClock,
) -> None:
    """Each 500 gives the command back for a growing backoff (10 s, then 20 s); nothing is sent
    before it is due; the third try is delivered and recorded as such, once."""
    http.answers.extend([500, 503])
    engine = open_engine()
    tid = engine.submit(approval_flow(hook(http)))
    drain(engine, retry=FIVE_TRIES)
    assert len(http.requests) == 1 and sent(engine, tid) == []
    clock.advance(9)
    drain(engine, retry=FIVE_TRIES)
    assert len(http.requests) == 1  # not due yet
    clock.advance(1)
    drain(engine, retry=FIVE_TRIES)
    assert len(http.requests) == 2
    clock.advance(19)
    drain(engine, retry=FIVE_TRIES)
    assert len(http.requests) == 2
    clock.advance(1)
    drain(engine, retry=FIVE_TRIES)
    assert len(http.requests) == 3
    assert len({r.headers["X-Statewright-Idempotency-Key"] for r in http.requests}) == 1  # one notification
    [event] = sent(engine, tid)
    assert (event["delivered"], event["tries"]) == (True, 3)
    assert engine.state(tid).status is TaskStatus.AWAITING_APPROVAL


def test_a_notification_given_up_after_n_tries_neither_blocks_nor_fails_the_task(
    open_engine: Callable[..., Engine], http: HttpReceiver, clock: FakeClock,
) -> None:
    """Three 500s with three tries allowed: given up (retries_exhausted) as an event; the task
    still waits, and its approval completes it."""
    http.answers.extend([500, 500, 500, 500])
    engine = open_engine()
    people = People(engine)
    lead = people.add("lena", "lead")
    tid = engine.submit(approval_flow(hook(http)))
    three = RetryPolicy(max_attempts=3, initial_backoff_seconds=10, jitter=False)
    for _ in range(4):
        drain(engine, retry=three)
        clock.advance(60)
    assert len(http.requests) == 3
    [event] = sent(engine, tid)
    assert (event["delivered"], event["error"], event["tries"]) == (False, "retries_exhausted", 3)
    assert "answered 500" in event["detail"]
    state = engine.state(tid)
    assert state.status is TaskStatus.AWAITING_APPROVAL
    engine.approve(tid, lead, proposal_hash=state.current.proposal_hash)
    drain(engine, retry=three)
    assert engine.state(tid).status is TaskStatus.COMPLETED


def test_a_receiver_that_hangs_costs_one_try_not_the_worker(
    open_engine: Callable[..., Engine], http: HttpReceiver,
) -> None:
    """The receiver reads the request and never answers: the try times out (here after 0.3 s),
    the notification is given up with that reason, and the worker goes on to finish its work."""
    http.answers.append(HANG)
    engine = open_engine()
    tid = engine.submit(approval_flow(hook(http)))
    started = time.monotonic()
    drain(engine, timeout_seconds=0.3, retry=RetryPolicy(max_attempts=1))
    assert time.monotonic() - started < 10
    [event] = sent(engine, tid)
    assert (event["delivered"], event["error"]) == (False, "retries_exhausted")
    assert "did not answer within 0.3 s" in event["detail"]
    assert engine.state(tid).status is TaskStatus.AWAITING_APPROVAL


def test_a_notification_redelivered_after_its_worker_died_is_sent_once(
    open_engine: Callable[..., Engine], http: HttpReceiver, clock: FakeClock,
) -> None:
    """A worker claims the Notify command and dies before sending; after its lease the command
    is delivered again and sent once; later workers (on another engine too) send nothing."""
    engine = open_engine()
    tid = engine.submit(approval_flow(hook(http)))
    Worker(engine).run(until=lambda: engine.state(tid).status is TaskStatus.AWAITING_APPROVAL)
    [claim] = [c for c in engine.store.claim("dead-worker", clock.now_ms(), 30_000, 10) if c.type == "Notify"]
    drain(engine)
    assert http.requests == []  # still leased by the dead worker
    clock.advance(31)
    drain(engine)
    drain(open_engine())
    assert len(http.requests) == 1
    [event] = sent(engine, tid)
    assert event["command_id"] == claim.command_id and event["delivered"] is True


def test_a_task_stuck_past_stuck_after_tells_notify_stuck_once(
    open_engine: Callable[..., Engine], http: HttpReceiver, clock: FakeClock,
) -> None:
    """The stuck timer is a durable row: it does not fire at 1h59m, fires at 2h with one stuck
    notification, and never again; the task still waits with the same proposal."""
    engine = open_engine()
    tid = engine.submit(approval_flow(stuck_after="2h", stuck=[hook(http, "/stuck")]))
    drain(engine)
    timers = engine.store.timers(tid)
    assert [t["purpose"] for t in timers] == ["stuck"]
    proposal = engine.state(tid).current.proposal_hash
    clock.advance(2 * 3600 - 61)
    drain(engine)
    assert http.requests == []
    clock.advance(61)
    drain(engine)
    [request] = http.requests
    body = request.json()
    assert (body["event"], body["step"], body["facts"]["stuck_after_seconds"]) == ("stuck", "review", 7200)
    assert "more than 2h 0m" not in body["text"] and "more than 2h" in body["text"]
    clock.advance(10 * 3600)
    drain(engine)
    assert len(http.requests) == 1
    assert engine.store.timers(tid) == []
    state = engine.state(tid)
    assert (state.status, state.current.proposal_hash) == (TaskStatus.AWAITING_APPROVAL, proposal)
    assert verify_task(engine, tid) == []


def test_a_step_that_moves_on_in_time_is_never_reported_stuck(
    open_engine: Callable[..., Engine], http: HttpReceiver, clock: FakeClock,
) -> None:
    engine = open_engine()
    lead = People(engine).add("lena", "lead")
    tid = engine.submit(approval_flow(stuck_after="2h", stuck=[hook(http)]))
    drain(engine)
    engine.approve(tid, lead, proposal_hash=engine.state(tid).current.proposal_hash)
    drain(engine)
    clock.advance(3 * 3600)
    drain(engine)
    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert http.requests == []


def test_a_halted_task_tells_notify_halted_once_per_halt(
    open_engine: Callable[..., Engine], http: HttpReceiver,
) -> None:
    """The halt's reason is in the message; an operator's retry that halts again is a new
    event with a key of its own."""
    engine = open_engine()
    ops = People(engine).add("olga", "operator")
    tid = engine.submit(halting_flow(hook(http)))
    drain(engine)
    assert engine.state(tid).status is TaskStatus.HALTED
    [first] = http.requests
    body = first.json()
    assert (body["event"], body["step"], body["facts"]["reason"]) == ("halted", "charge", "failed")
    assert body["review_url"] == f"{BASE}/tasks/{tid}" and "halted at step 'charge'" in body["text"]
    engine.retry(tid, ops, "the card processor is back")
    drain(engine)
    drain(engine)
    keys = [r.headers["X-Statewright-Idempotency-Key"] for r in http.requests]
    assert len(keys) == 2 and keys[0] != keys[1]
    assert [k.split("/")[1] for k in keys] == ["halted-0", "halted-1"]
    assert [e["delivered"] for e in sent(engine, tid)] == [True, True]


def test_a_notification_for_a_task_that_moved_on_is_given_up_unsent(
    open_engine: Callable[..., Engine], http: HttpReceiver, clock: FakeClock,
) -> None:
    """The first try fails; the task is approved and completes before the next: the approval
    notification is recorded as given up (task_moved_on) and not sent again."""
    http.answers.append(500)
    engine = open_engine()
    lead = People(engine).add("lena", "lead")
    tid = engine.submit(approval_flow(hook(http)))
    drain(engine, retry=FIVE_TRIES)
    engine.approve(tid, lead, proposal_hash=engine.state(tid).current.proposal_hash)
    clock.advance(60)
    drain(engine, retry=FIVE_TRIES)
    assert engine.state(tid).status is TaskStatus.COMPLETED
    assert len(http.requests) == 1
    [event] = sent(engine, tid)
    assert (event["delivered"], event["error"]) == (False, "task_moved_on")


def test_the_signing_secret_is_never_stored(
    open_engine: Callable[..., Engine], http: HttpReceiver, store_url: str,
) -> None:
    """Only the variable's name is in the definition, the outbox and the log; a missing secret
    gives the notification up (secret_missing), never sends it unsigned."""
    engine = open_engine()
    tid = engine.submit(approval_flow(hook(http)))
    drain(engine, env={})
    assert http.requests == []
    [event] = sent(engine, tid)
    assert (event["delivered"], event["error"]) == (False, "secret_missing")
    tid2 = engine.submit(approval_flow(hook(http)))
    drain(engine)
    assert len(http.requests) == 1
    dumped = json.dumps([dict(e.body) for t in (tid, tid2) for e in engine.store.events(t)])
    dumped += json.dumps([dict(r.state) for r in engine.store.load_many([tid, tid2]).values()])
    assert "HOOK_SECRET" in dumped and SECRET not in dumped


@pytest.mark.parametrize(("target", "line"), [
    ({"webhook": "ftp://example.com/x", "secret_env": "S"},
     "step 'review' notify[0]: webhook: 'ftp://example.com/x': the scheme must be http or https, not 'ftp'"),
    ({"webhook": "https://example.com/x"},
     "step 'review' notify[0]: a webhook needs secret_env, the name of the worker's variable that holds its "
     "signing secret"),
    ({"webhook": "https://example.com/x", "secret_env": "hook-secret"},
     "step 'review' notify[0]: secret_env: 'hook-secret' is not a variable name (upper-case letters, digits and "
     "_, not first a digit)"),
    ({"email": "leads at example.com"},
     "step 'review' notify[0]: email: 'leads at example.com' is not an email address (one name@domain.example)"),
    ({"slack": "https://user:pw@hooks.example.com/x"},
     "step 'review' notify[0]: slack: hooks.example.com: a URL with a user name or password; a webhook's secret "
     "goes in secret_env"),
    ({"sms": "+15550100"},
     "step 'review' notify[0]: a target must be exactly one of {webhook: URL, secret_env: NAME}, {email: ADDRESS} "
     "or {slack: URL}; got the keys ['sms']"),
])
def test_a_bad_target_is_refused_at_load_time_in_one_line(target: dict[str, str], line: str) -> None:
    from statewright import DefinitionError

    with pytest.raises(DefinitionError) as info:
        approval_flow(target)
    assert info.value.problems == [line]


def test_stuck_after_without_notify_stuck_is_refused_in_one_line() -> None:
    from statewright import DefinitionError

    with pytest.raises(DefinitionError) as info:
        approval_flow(stuck_after="2h")
    assert info.value.problems == [
        "step 'review': stuck_after needs someone to tell: add notify: {stuck: [TARGET...]} to the workflow"]
