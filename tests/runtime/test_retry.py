"""Command retries are apart from step failures: a TransientError is retried with backoff
up to the step's retry.max_attempts, then becomes the step failure retries_exhausted and
is routed; a non-retryable class and a PermanentError fail at once. The clock is fake, so
backoff costs no time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.openai_server import FakeOpenAIServer, error_reply, tool_call_reply
from statewright.definition.model import Workflow
from statewright.machine.state import Attempt, Outcome, TaskState, TaskStatus
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker

from .support import code, lines, workflow

RETRY = {"max_attempts": 3, "initial_backoff": 1, "max_backoff": 10}


@pytest.fixture
def engine(open_engine: Callable[..., Engine], clock: FakeClock) -> Engine:
    return open_engine(clock=clock)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def run_through_backoff(engine: Engine, clock: FakeClock, tid: str) -> tuple[TaskState, int, list[int]]:
    """Work until the task ends, moving the fake clock to each backoff's end; returns the
    state, the retries the workers made and the backoffs they chose (ms)."""
    retries, backoffs = 0, []
    for _ in range(20):
        retries += Worker(engine).run(until_idle=True).retries
        st = engine.state(tid)
        if st.terminal:
            return st, retries, backoffs
        due = engine.store.next_due_ms()
        assert due is not None, f"task {tid} is {st.status.value} with nothing due"
        backoffs.append(due - clock.now_ms())
        clock.advance((due - clock.now_ms()) / 1000)
    raise AssertionError(f"task {tid} did not end")


def ai_step(server: FakeOpenAIServer, **extra: Any) -> dict[str, Any]:
    return {
        "id": "review", "kind": "ai", "owner": "reviewers", "output_schema": "review", "retry": RETRY,
        "agent": {"type": "openai", "base_url": server.base_url, "model": "m", "timeout": "10s"},
        **extra,
    }


def failed_once(st: TaskState, step: str) -> Attempt:
    [attempt] = st.attempts_of(step)
    assert attempt.outcome is Outcome.FAILED
    return attempt


def test_a_throttled_model_call_is_retried_with_backoff_and_then_succeeds(
    engine: Engine, clock: FakeClock, server: FakeOpenAIServer, workspace: Path,
) -> None:
    """429, then 503, then a verdict: one attempt, passed, after two retries whose
    backoffs grow (1 s then 2 s, each with jitter in [50 %, 100 %])."""
    server.script(error_reply(429, "slow down"), error_reply(503, "overloaded"), tool_call_reply({"approved": True}))
    tid = engine.submit(workflow("review", ai_step(server)), {"workspace": str(workspace)})

    st, retries, backoffs = run_through_backoff(engine, clock, tid)

    assert st.status is TaskStatus.COMPLETED
    assert [(a.step, a.outcome) for a in st.attempts] == [("review", Outcome.PASSED)]
    assert retries == 2 and len(server.requests) == 3
    assert 500 <= backoffs[0] <= 1000 and 1000 <= backoffs[1] <= 2000
    assert [e.type for e in engine.store.events(tid)] == ["TaskSubmitted", "AttemptReported"]


def test_a_model_call_that_stays_throttled_ends_as_retries_exhausted_and_is_routed(
    engine: Engine, clock: FakeClock, server: FakeOpenAIServer, workspace: Path,
) -> None:
    """retry.max_attempts tries, then the step failure retries_exhausted, which the step's
    on_failure route (continue) handles like any other failure."""
    server.script(*[error_reply(429, "slow down")] * 3)
    wf = workflow("review", ai_step(server, on_failure="continue"), code("after", "record"))
    tid = engine.submit(wf, {"workspace": str(workspace)})

    st, retries, _ = run_through_backoff(engine, clock, tid)

    review = failed_once(st, "review")
    assert (review.reason, review.route) == ("retries_exhausted", "continue (advisory)")
    assert "(after 3 tries)" in review.detail
    assert retries == 2 and len(server.requests) == 3
    assert st.status is TaskStatus.COMPLETED
    assert lines(workspace / "after.calls") == [f"{tid}/after/1"]


def test_a_transient_class_listed_as_non_retryable_fails_at_once(
    engine: Engine, clock: FakeClock, server: FakeOpenAIServer, workspace: Path,
) -> None:
    """retry.non_retryable names the error class: no retry, the step fails and halts."""
    server.script(error_reply(429, "slow down"))
    step = ai_step(server, retry={**RETRY, "non_retryable": ["TransientError"]})
    tid = engine.submit(workflow("review", step), {"workspace": str(workspace)})

    st, retries, _ = run_through_backoff(engine, clock, tid)

    assert retries == 0 and len(server.requests) == 1
    assert failed_once(st, "review").reason == "non_retryable"
    assert st.status is TaskStatus.HALTED


def test_a_permanent_error_fails_at_once(
    engine: Engine, clock: FakeClock, server: FakeOpenAIServer, workspace: Path,
) -> None:
    """HTTP 400 is a PermanentError: no retry, the step fails with the executor's reason."""
    server.script(error_reply(400, "unknown model"))
    tid = engine.submit(workflow("review", ai_step(server)), {"workspace": str(workspace)})

    st, retries, _ = run_through_backoff(engine, clock, tid)

    assert retries == 0 and len(server.requests) == 1
    attempt = failed_once(st, "review")
    assert attempt.reason == "http_status" and "unknown model" in attempt.detail
    assert st.status is TaskStatus.HALTED


# --- python-callable code steps: the error classes a callable raises reach the policy ----


def callable_workflow(fn: str, **retry: Any) -> Workflow:
    return workflow("pay", code("pay", fn, retry={**RETRY, **retry}, on_failure="continue"), code("after", "record"))


def test_a_callable_throttled_twice_completes_with_retries(
    engine: Engine, clock: FakeClock, workspace: Path,
) -> None:
    """The callable raises TransientError twice, then succeeds: one passed attempt."""
    tid = engine.submit(callable_workflow("flaky"), {"workspace": str(workspace)})
    st, retries, _ = run_through_backoff(engine, clock, tid)
    assert retries == 2
    assert lines(workspace / "pay.calls") == [f"{tid}/pay/1"] * 3
    assert [(a.step, a.outcome) for a in st.attempts] == [("pay", Outcome.PASSED), ("after", Outcome.PASSED)]


def test_a_callable_that_stays_throttled_ends_as_retries_exhausted(
    engine: Engine, clock: FakeClock, workspace: Path,
) -> None:
    """Three TransientErrors: the step fails retries_exhausted, and on_failure routes it."""
    tid = engine.submit(callable_workflow("always_throttled"), {"workspace": str(workspace)})
    st, retries, _ = run_through_backoff(engine, clock, tid)
    assert retries == 2 and len(lines(workspace / "pay.calls")) == 3
    assert failed_once(st, "pay").reason == "retries_exhausted"
    assert st.status is TaskStatus.COMPLETED  # routed by on_failure: continue


def test_a_callable_error_class_listed_as_non_retryable_fails_at_once(
    engine: Engine, clock: FakeClock, workspace: Path,
) -> None:
    """QuotaExceeded is a TransientError, but the step's policy lists it: one call only."""
    tid = engine.submit(callable_workflow("over_quota", non_retryable=["QuotaExceeded"]), {"workspace": str(workspace)})
    st, retries, _ = run_through_backoff(engine, clock, tid)
    assert retries == 0 and len(lines(workspace / "pay.calls")) == 1
    assert failed_once(st, "pay").reason == "non_retryable"


def test_a_callable_permanent_error_fails_at_once(
    engine: Engine, clock: FakeClock, workspace: Path,
) -> None:
    """A PermanentError is never retried; its reason code becomes the failure reason."""
    tid = engine.submit(callable_workflow("refused"), {"workspace": str(workspace)})
    st, retries, _ = run_through_backoff(engine, clock, tid)
    assert retries == 0 and len(lines(workspace / "pay.calls")) == 1
    assert failed_once(st, "pay").reason == "refused"
