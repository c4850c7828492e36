"""moto's Step Functions interpreter (it runs the ASL) with SQS carrying the task tokens.

Two settings make it fast enough for a test suite, without changing what it executes: a
task waiting for its token checks for the answer every 5 ms instead of every 0.5 s, and a
definition's text is parsed once (moto parses it again for every execution; the parsed
program keeps no state of its own, an execution's state lives in its environment)."""

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
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    monkeypatch.setattr(callback, "_DELAY_SECONDS_SYNC_CONDITION_CHECK", 0.005)
    parse = functools.lru_cache(maxsize=64)(AmazonStateLanguageParser.parse)
    monkeypatch.setattr(AmazonStateLanguageParser, "parse", staticmethod(parse))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield StepFunctions()
