"""Notifications beside the other timers and outputs: a stuck timer while a wait step checks
on its own timers, a worker killed between sending and recording, a step's output in a Slack
message, and ``statewright show`` listing what was sent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from statewright import workflow_from_dict
from statewright.cli import cli
from statewright.machine.state import TaskStatus
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine

from .receivers import HttpReceiver
from .test_notify import BASE, SECRET, STEPS, drain, hook, sent


def test_a_wait_step_checking_on_its_own_timers_is_reported_stuck_once(
    open_engine: Callable[..., Engine], http: HttpReceiver, clock: FakeClock,
) -> None:
    """Checks every hour on their own timers; the stuck timer (90m) fires once between them,
    and the checks go on as before."""
    wf = workflow_from_dict({
        "workflow": "waits",
        "notify": {"stuck": [hook(http)]},
        "steps": [{"id": "ci", "kind": "wait", "owner": "ops", "check": {"callable": f"{STEPS}:never"},
                   "every": "1h", "max_checks": 5, "stuck_after": "90m"}],
    })
    engine = open_engine()
    tid = engine.submit(wf)
    for _ in range(4):
        drain(engine)
        clock.advance(3600)
    drain(engine)
    state = engine.state(tid)
    assert state.status is TaskStatus.HALTED and state.halt.reason == "wait_exhausted"
    assert [r.json()["event"] for r in http.requests] == ["stuck"]
    assert state.attempts[-1].checks == 5


def test_a_worker_killed_after_sending_leaves_a_repeat_under_the_same_key(
    open_engine: Callable[..., Engine], http: HttpReceiver, store_url: str, tmp_path: Path,
) -> None:
    """A real worker process sends the webhook and is SIGKILLed before recording it; the next
    worker, after the lease, sends it again: the same key and the same signed bytes, so the
    receiver can drop it; then it is recorded, and nothing is sent again."""
    wf = workflow_from_dict({
        "workflow": "gate",
        "steps": [{"id": "review", "kind": "human", "owner": "leads", "approvers": {"role": "lead"},
                   "notify": [hook(http)]}],
    })
    engine = open_engine()
    tid = engine.submit(wf)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    env.update(HOOK_SECRET=SECRET, STATEWRIGHT_PUBLIC_URL=BASE, STATEWRIGHT_CRASH_AT="after_notify")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "statewright", "worker", "--until-idle", "--quiet", "--lease", "1",
                           "--db", store_url], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    assert len(http.requests) == 1 and sent(engine, tid) == []
    later = FakeClock(int(time.time() * 1000) + 5_000)
    drain(open_engine(clock=later))
    drain(open_engine(clock=later))
    first, again = http.requests
    assert first.body == again.body
    assert first.headers["X-Statewright-Idempotency-Key"] == again.headers["X-Statewright-Idempotency-Key"]
    assert first.headers["X-Statewright-Signature"] == again.headers["X-Statewright-Signature"]
    [event] = sent(engine, tid)
    assert event["delivered"] is True
    assert time.monotonic() - started < 60


def test_a_steps_output_reaches_slack_as_text_not_markup(
    open_engine: Callable[..., Engine], http: HttpReceiver,
) -> None:
    wf = workflow_from_dict({
        "workflow": "loud",
        "notify": {"halted": [{"slack": http.url + "/services/T/B/X"}]},
        "steps": [{"id": "pay", "kind": "code", "owner": "bots", "run": {"callable": f"{STEPS}:fail_loudly"}}],
    })
    engine = open_engine()
    tid = engine.submit(wf)
    drain(engine)
    assert engine.state(tid).status is TaskStatus.HALTED
    [request] = http.requests
    text = request.json()["text"]
    assert "<!channel>" not in text and "<https://" not in text
    assert "&lt;!channel&gt;" in text and "&amp; now" in text


def test_show_lists_the_notifications_of_a_task(
    open_engine: Callable[..., Engine], http: HttpReceiver, store_url: str,
) -> None:
    http.answers.append(404)
    wf = workflow_from_dict({
        "workflow": "gate",
        "steps": [{"id": "review", "kind": "human", "owner": "leads", "approvers": {"role": "lead"},
                   "notify": [hook(http), {"slack": http.url + "/s"}]}],
    })
    engine = open_engine()
    tid = engine.submit(wf)
    drain(engine)
    result = CliRunner().invoke(cli, ["show", tid, "--db", store_url])
    assert result.exit_code == 0, result.output
    lines = result.output.split("notifications:\n", 1)[1].splitlines()[:2]
    host = http.url.removeprefix("http://")
    assert sorted(line.split(" at 20")[0].strip() for line in lines) == sorted([
        f"approval at review #1 -> webhook {host}: given up, refused (1 try): webhook {host} answered 404: ok",
        f"approval at review #1 -> slack {host}: delivered (1 try)",
    ])


def test_evidence_that_changes_a_waiting_proposal_notifies_again_with_the_new_hash(
    open_engine: Callable[..., Engine], http: HttpReceiver, clock: FakeClock,
) -> None:
    """The first notification fails; an operator's evidence builds the proposal again: its own
    notification carries the new hash, and the old one, when due again, is given up unsent."""
    from people.support import People
    from statewright.definition.model import RetryPolicy

    http.answers.append(500)
    wf = workflow_from_dict({
        "workflow": "gate",
        "steps": [{"id": "review", "kind": "human", "owner": "leads", "approvers": {"role": "lead"},
                   "notify": [hook(http)]}],
    })
    engine = open_engine()
    ops = People(engine).add("olga", "operator")
    tid = engine.submit(wf)
    retry = RetryPolicy(max_attempts=3, initial_backoff_seconds=10, jitter=False)
    drain(engine, retry=retry)
    old_hash = engine.state(tid).current.proposal_hash
    engine.add_evidence(tid, ops, {"callback": "confirmed by phone"}, note="the supplier called back")
    new_hash = engine.state(tid).current.proposal_hash
    assert new_hash != old_hash
    drain(engine, retry=retry)
    clock.advance(10)
    drain(engine, retry=retry)
    hashes = [r.json()["facts"]["proposal_hash"] for r in http.requests]
    assert hashes == [old_hash, new_hash]
    keys = [r.headers["X-Statewright-Idempotency-Key"] for r in http.requests]
    assert keys[1].startswith(f"{tid}/review/1/approval-1/webhook-")
    outcomes = sorted((e["idempotency_key"] == keys[1], e["delivered"], e["error"]) for e in sent(engine, tid))
    assert outcomes == [(False, False, "task_moved_on"), (True, True, None)]


def test_an_answer_that_is_not_http_is_tried_again(
    open_engine: Callable[..., Engine], http: HttpReceiver, clock: FakeClock,
) -> None:
    from statewright.definition.model import RetryPolicy

    from .receivers import GARBAGE

    http.answers.append(GARBAGE)
    wf = workflow_from_dict({
        "workflow": "gate",
        "steps": [{"id": "review", "kind": "human", "owner": "leads", "approvers": {"role": "lead"},
                   "notify": [hook(http)]}],
    })
    engine = open_engine()
    tid = engine.submit(wf)
    retry = RetryPolicy(max_attempts=2, initial_backoff_seconds=5, jitter=False)
    drain(engine, retry=retry)
    assert sent(engine, tid) == []
    clock.advance(5)
    drain(engine, retry=retry)
    [event] = sent(engine, tid)
    assert (event["delivered"], event["tries"]) == (True, 2)
