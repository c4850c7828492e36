"""Remote agents at the engine: park, claim, heartbeat, report, and the deadlines, on every
backend. A report or heartbeat whose token is not open changes nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from statewright._errors import InputError, PermissionDeniedError, TaskTokenError
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine

from .support import agents, attempts, event_count, good, people, remote_flow, settle


@pytest.fixture
def engine(open_engine: Callable[..., Engine]) -> Engine:
    return open_engine()


def test_an_attempt_parks_and_its_agent_reports_a_verdict(engine: Engine) -> None:
    """The worker runs nothing for the remote step: the attempt waits on its queue until an
    agent claims it; the agent's verdict is recorded as its own, and the task goes on."""
    who = people(engine)
    tid = engine.submit(remote_flow(), {"change": 7})
    settle(engine)
    assert engine.state(tid).current.step == "review"  # type: ignore[union-attr]
    assert [(r.queue, r.agent) for r in engine.store.remote_rows()] == [("builds", None)]
    assert engine.store.outbox(tid) == []
    assert agents(engine).claim("deploys", who.stranger) is None  # another queue holds nothing

    work = agents(engine).claim("builds", who.builder)
    assert work is not None and work.token.startswith("swq_")
    assert (work.task_id, work.step, work.attempt, work.heartbeat_seconds) == (tid, "review", 1, 30.0)
    assert work.brief["input"] == {"change": 7} and work.brief["instructions"] == "Review the change."
    assert work.output_schema is not None and work.deadline_at_ms is not None
    assert agents(engine).claim("builds", who.other) is None  # claimed once only
    assert work.token not in str(engine.store.remote_rows())  # only its sha256 is kept

    out = agents(engine).report(work.token, who.builder, verdict=good(), note="read every file")
    assert (out.status, out.repair, out.reason) == ("running", None, None)
    settle(engine)
    st = engine.state(tid)
    assert st.status.value == "completed"
    review = st.attempts_of("review")[-1]
    assert (review.actor, review.verdict, review.note) == ("remote:builder", good(), "read every file")
    assert engine.store.remote_rows() == [] and engine.store.timers(tid) == []


def test_a_failure_report_routes_like_any_failed_attempt(engine: Engine) -> None:
    """A failure (a reason code) fails the attempt: it loops back to prepare and parks again;
    a second one exhausts the loop and halts the task."""
    who = people(engine)
    tid = engine.submit(remote_flow())
    settle(engine)
    for n in (1, 2):
        work = agents(engine).claim("builds", who.builder)
        assert work is not None and work.attempt == n
        out = agents(engine).report(work.token, who.builder, error="exit_status", detail="the agent exited 3")
        assert out.reason == "exit_status"
        settle(engine)
    st = engine.state(tid)
    assert st.status.value == "halted" and st.halt is not None and st.halt.reason == "loop_budget_exhausted"
    assert [a[:4] for a in attempts(engine, tid)] == [
        ("prepare", 1, "passed", ""), ("review", 1, "failed", "exit_status"),
        ("prepare", 2, "passed", ""), ("review", 2, "failed", "exit_status"),
    ]


def test_a_bad_verdict_gets_one_repair_turn_then_fails(engine: Engine) -> None:
    """A verdict that breaks the schema goes back to the queue once, with the problem in the
    brief; a second bad one fails the attempt with invalid_verdict, as a local agent's does."""
    who = people(engine)
    tid = engine.submit(remote_flow())
    settle(engine)
    work = agents(engine).claim("builds", who.builder)
    assert work is not None
    out = agents(engine).report(work.token, who.builder, verdict={"approved": "yes"})
    assert out.repair is not None and "approved" in out.repair
    assert agents(engine).claim("builds", who.builder) is None  # the repair turn parks through a worker
    with pytest.raises(TaskTokenError):  # the first claim's token closed with its turn
        agents(engine).report(work.token, who.builder, verdict=good())
    settle(engine)
    again = agents(engine).claim("builds", who.other)
    assert again is not None and again.attempt == 1 and "repair" in again.brief
    agents(engine).report(again.token, who.other, verdict={"summary": "no approved field"})
    settle(engine)
    assert attempts(engine, tid)[1] == ("review", 1, "failed", "invalid_verdict", "remote:other-bot")
    assert engine.state(tid).current.step == "review"  # type: ignore[union-attr]  # looped back, parked again


def test_a_repaired_verdict_passes(engine: Engine) -> None:
    who = people(engine)
    tid = engine.submit(remote_flow())
    settle(engine)
    work = agents(engine).claim("builds", who.builder)
    assert work is not None
    agents(engine).report(work.token, who.builder, error="no_verdict", detail="wrote no verdict file")
    settle(engine)
    again = agents(engine).claim("builds", who.builder)
    assert again is not None
    agents(engine).report(again.token, who.builder, verdict=good())
    settle(engine)
    assert engine.state(tid).status.value == "completed"


def test_duplicate_late_and_unknown_reports_conflict_and_change_nothing(engine: Engine) -> None:
    who = people(engine)
    tid = engine.submit(remote_flow())
    settle(engine)
    work = agents(engine).claim("builds", who.builder)
    assert work is not None
    agents(engine).report(work.token, who.builder, verdict=good())
    before = (event_count(engine, tid), engine.state(tid).version)
    for act in (
        lambda: agents(engine).report(work.token, who.builder, verdict=good()),  # a duplicate
        lambda: agents(engine).report(work.token, who.builder, error="timeout"),  # a late, different one
        lambda: agents(engine).heartbeat(work.token, who.builder),
        lambda: agents(engine).report("swq_" + "A" * 43, who.builder, verdict=good()),  # never given out
    ):
        with pytest.raises(TaskTokenError):
            act()
    assert (event_count(engine, tid), engine.state(tid).version) == before
    with pytest.raises(InputError, match="not a task token"):
        agents(engine).report("swt_not-a-task-token", who.builder, verdict=good())
    with pytest.raises(InputError, match="not a reason code"):
        agents(engine).report(work.token, who.builder, error="made_up")


def test_a_missed_heartbeat_fails_the_attempt_and_it_routes(engine: Engine, clock: FakeClock) -> None:
    """Heartbeats keep a claimed attempt open; when they stop, its deadline fails it with
    heartbeat_timeout, the task loops back, and the old token is refused."""
    who = people(engine)
    tid = engine.submit(remote_flow(heartbeat="30s"))
    settle(engine)
    work = agents(engine).claim("builds", who.builder)
    assert work is not None
    for _ in range(3):
        clock.advance(20)
        due = agents(engine).heartbeat(work.token, who.builder)
        assert due == clock.now_ms() + 30_000
        settle(engine)
    assert engine.state(tid).attempts_of("review") == []
    clock.advance(31)
    with pytest.raises(TaskTokenError, match="after its deadline"):
        agents(engine).heartbeat(work.token, who.builder)
    settle(engine)
    assert attempts(engine, tid)[1] == ("review", 1, "failed", "heartbeat_timeout", "timer:remote")
    before = event_count(engine, tid)
    with pytest.raises(TaskTokenError):
        agents(engine).report(work.token, who.builder, verdict=good())
    assert event_count(engine, tid) == before
    assert engine.state(tid).current.attempt == 2  # type: ignore[union-attr]  # parked again after prepare


def test_the_steps_timeout_fails_an_attempt_nobody_claimed(engine: Engine, clock: FakeClock) -> None:
    who = people(engine)
    tid = engine.submit(remote_flow(timeout="10m"))
    settle(engine)
    clock.advance(599)
    settle(engine)
    assert engine.state(tid).attempts_of("review") == []
    clock.advance(2)
    settle(engine)
    assert attempts(engine, tid)[1][:4] == ("review", 1, "failed", "timeout")
    work = agents(engine).claim("builds", who.builder)
    assert work is not None and work.attempt == 2  # the old row went with its attempt


@pytest.mark.parametrize("deadline", ["heartbeat", "timeout"])
def test_a_report_after_a_deadline_no_worker_has_fired_yet_is_late(
    engine: Engine, clock: FakeClock, deadline: str,
) -> None:
    """Past the heartbeat deadline (or the step's timeout) the attempt has failed, whether or
    not a worker has fired its timer yet: a report or a heartbeat then is refused as late and
    changes nothing, and the timer fails the attempt as it would have."""
    who = people(engine)
    tid = engine.submit(remote_flow(heartbeat="30s", timeout="2m"))
    settle(engine)
    work = agents(engine).claim("builds", who.builder)
    assert work is not None
    if deadline == "timeout":  # heartbeats keep it open until the step's timeout
        for _ in range(5):
            clock.advance(20)
            agents(engine).heartbeat(work.token, who.builder)
        clock.advance(21)  # 121 s after it parked; the heartbeat deadline is at 130 s
    else:
        clock.advance(31)
    before = (event_count(engine, tid), engine.state(tid).version)
    with pytest.raises(TaskTokenError, match="after its deadline"):
        agents(engine).report(work.token, who.builder, verdict=good())
    with pytest.raises(TaskTokenError, match="after its deadline"):
        agents(engine).heartbeat(work.token, who.builder)
    assert (event_count(engine, tid), engine.state(tid).version) == before
    settle(engine)
    reason = "heartbeat_timeout" if deadline == "heartbeat" else "timeout"
    assert attempts(engine, tid)[1][:4] == ("review", 1, "failed", reason)


def test_who_may_claim_heartbeat_and_report(engine: Engine) -> None:
    """Only an agent identity for the queue claims; only the claiming agent heartbeats or
    reports; an agent identity never approves."""
    who = people(engine)
    engine.submit(remote_flow())
    settle(engine)
    for bad in (who.nobody, who.stranger, who.admin):
        with pytest.raises(PermissionDeniedError, match="agent"):
            agents(engine).claim("builds", bad)
    with pytest.raises(InputError, match="queue name"):
        agents(engine).claim("Not A Queue", who.builder)
    work = agents(engine).claim("builds", who.builder)
    assert work is not None
    with pytest.raises(PermissionDeniedError, match="did not claim"):
        agents(engine).report(work.token, who.other, verdict=good())
    with pytest.raises(PermissionDeniedError, match="did not claim"):
        agents(engine).heartbeat(work.token, who.other)
    gate = engine.submit(_approval_flow())
    settle(engine)
    with pytest.raises(PermissionDeniedError, match="agent identity"):
        engine.approve(gate, who.builder, proposal_hash=engine.state(gate).current.proposal_hash)  # type: ignore[union-attr]


def test_a_cancelled_task_closes_its_parked_attempt(engine: Engine) -> None:
    who = people(engine)
    engine.users.add(who.admin, "ada", ["operator"])
    tid = engine.submit(remote_flow())
    settle(engine)
    work = agents(engine).claim("builds", who.builder)
    assert work is not None
    engine.cancel(tid, engine.users.authenticate(who.admin.token), "not needed")
    assert engine.store.remote_rows() == [] and engine.store.timers(tid) == []
    with pytest.raises(TaskTokenError):
        agents(engine).report(work.token, who.builder, verdict=good())


def test_claimers_racing_never_take_the_same_attempt(open_engine: Callable[..., Engine]) -> None:
    """Two agents on two connections claim at once, over and over: every parked attempt is
    claimed exactly once."""
    engine = open_engine()
    who = people(engine)
    wf = remote_flow()
    tids = {engine.submit(wf) for _ in range(12)}
    settle(engine)
    engines = [open_engine(), open_engine()]
    got: list[list[str]] = [[], []]
    start = threading.Barrier(2)

    def claimer(i: int) -> None:
        principal = who.builder if i == 0 else who.other
        start.wait()
        while (work := agents(engines[i]).claim("builds", principal)) is not None:
            got[i].append(work.task_id)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = got[0] + got[1]
    assert sorted(claimed) == sorted(tids)  # each once: no double claim, none left behind


def _approval_flow():  # type: ignore[no-untyped-def]
    from statewright.definition.loader import workflow_from_dict

    return workflow_from_dict({"workflow": "gate", "steps": [
        {"id": "sign", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"}},
    ]}, "<gate>")


def test_show_says_who_holds_a_parked_attempt(engine: Engine, store_url: str) -> None:
    from click.testing import CliRunner

    from statewright.cli import cli

    who = people(engine)
    tid = engine.submit(remote_flow())
    settle(engine)
    out = CliRunner().invoke(cli, ["show", tid, "--db", store_url])
    assert "review #1 waits for a remote agent on queue 'builds' since " in out.output
    agents(engine).claim("builds", who.builder)
    out = CliRunner().invoke(cli, ["show", tid, "--db", store_url])
    assert "review #1 is with remote agent 'builder' (claimed from 'builds' at " in out.output


def test_a_remote_code_steps_report_is_its_output(engine: Engine) -> None:
    """A code step worked remotely: the report is the step's output (results[step]), held to
    its output_schema as a local code step's is."""
    from statewright.definition.loader import workflow_from_dict

    wf = workflow_from_dict({"workflow": "count", "steps": [
        {"id": "count", "kind": "code", "owner": "ci", "agent": {"type": "remote", "queue": "builds"},
         "output_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
         "on_failure": "continue"},
        {"id": "again", "kind": "code", "owner": "ci", "agent": {"type": "remote", "queue": "builds"}},
    ]}, "<count>")
    who = people(engine)
    tid = engine.submit(wf, {"files": 3})
    settle(engine)
    work = agents(engine).claim("builds", who.builder)
    assert work is not None and work.brief["input"] == {"files": 3}
    agents(engine).report(work.token, who.builder, verdict={"n": 3})
    settle(engine)
    assert engine.state(tid).results["count"] == {"n": 3}
    second = agents(engine).claim("builds", who.builder)
    assert second is not None and second.brief["results"]["count"] == {"n": 3}
    out = agents(engine).report(second.token, who.builder, error="exit_status", detail="exit 1")
    assert out.reason == "exit_status" and engine.state(tid).status.value == "halted"
