"""moto's Step Functions interpreter (it runs the ASL) with SQS carrying the task tokens.

Two settings make it fast enough for a test suite, without changing what it executes: a
task waiting for its token checks for the answer every 5 ms instead of every 0.5 s, and a
definition's text is parsed once (moto parses it again for every execution; the parsed
program keeps no state of its own, an execution's state lives in its environment).

One repair: moto sends a task's message before it sets up the task's heartbeat wait, so an
answer that comes in between (a fast worker, or a Map run's threads on a busy machine) set
no heartbeat, and the task waited out its whole HeartbeatSeconds. A heartbeat wait set up
after its answer starts already woken, as in Step Functions, where the answer ends the task."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from .sfn_harness import StepFunctions


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[StepFunctions]:
    from moto import mock_aws
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_callback as callback,
    )
    from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    monkeypatch.setattr(callback, "_DELAY_SECONDS_SYNC_CONDITION_CHECK", 0.005)
    setup = CallbackEndpoint.setup_heartbeat_endpoint

    def setup_after_answer(self: CallbackEndpoint, heartbeat_seconds: int) -> object:
        endpoint = setup(self, heartbeat_seconds)
        if self.get_outcome() is not None:
            endpoint.notify()
        return endpoint

    monkeypatch.setattr(CallbackEndpoint, "setup_heartbeat_endpoint", setup_after_answer)
    parse = functools.lru_cache(maxsize=64)(AmazonStateLanguageParser.parse)
    monkeypatch.setattr(AmazonStateLanguageParser, "parse", staticmethod(parse))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield StepFunctions()
