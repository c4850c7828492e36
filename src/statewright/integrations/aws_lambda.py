"""statewright's steps as an AWS Lambda function, for a workflow exported as an Express
state machine (``statewright export FILE --format asl --express --function ARN``).

    handler(event, context) -> the answer                    # a step that passed, or one whose
                                                              # result is kept with its failure
                            raises an error named REASON      # a failed attempt: its reason code
                                                              # is the error Step Functions routes

The event is the message a Standard export sends to its queue (without a task token); the
answer is what the sfn worker would send with SendTaskSuccess, and an error's name (Lambda's
``errorType``) is the reason code it would send with SendTaskFailure (``transient`` for a
retryable one, which the state's Retry tries again). The same executors run the step.

Configured by the function's environment: ``STATEWRIGHT_WORKFLOWS`` (the workflow files the
state machines were exported from, separated by ``os.pathsep``), ``STATEWRIGHT_DB`` (when
set, each execution is recorded there as a task, as ``statewright sfn worker`` records it),
and ``STATEWRIGHT_WORKSPACE_ROOT`` (default ``/tmp/statewright``, Lambda's writable disk)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statewright._errors import InputError
from statewright.integrations.aws_sfn import SfnWorker

WORKFLOWS_ENV = "STATEWRIGHT_WORKFLOWS"
DB_ENV = "STATEWRIGHT_DB"
ROOT_ENV = "STATEWRIGHT_WORKSPACE_ROOT"
_workers: dict[tuple[str, str, str], SfnWorker] = {}  # one per configuration: kept across warm invocations


class StepFailed(Exception):
    """A failed attempt; each is raised as a subclass named by its reason code."""


def failure(reason: str, cause: str) -> StepFailed:
    """An exception whose class name (Lambda's ``errorType``) is ``reason``."""
    named: type[StepFailed] = type(reason[:256] or "failed", (StepFailed,), {"__module__": __name__})
    return named(cause)


def worker_from_env(env: Mapping[str, str] | None = None) -> SfnWorker:
    """The worker the function's environment describes (made once per configuration)."""
    env = os.environ if env is None else env
    files = env.get(WORKFLOWS_ENV, "")
    key = (files, env.get(DB_ENV, ""), env.get(ROOT_ENV, "/tmp/statewright"))
    if key not in _workers:
        from statewright.definition import load_workflow

        paths = [p for p in files.split(os.pathsep) if p]
        if not paths:
            raise InputError(f"{WORKFLOWS_ENV} names no workflow file; set it to the files the state machines "
                             "were exported from")
        recorder = None
        if key[1]:
            from statewright.integrations.sfn_record import Recorder
            from statewright.runtime.engine import Engine
            from statewright.store import open_store

            recorder = Recorder(Engine(open_store(key[1], create=True)))
        _workers[key] = SfnWorker([load_workflow(p) for p in paths], "", sqs=None, sfn=None,
                                  workspace_root=Path(key[2]), echo=lambda line: None, recorder=recorder)
    return _workers[key]


def handler(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Run the step ``event`` names; return its answer or raise its reason code."""
    if not isinstance(event, Mapping):
        raise failure("unknown_step", f"the event is not a statewright step message ({type(event).__name__})")
    answer = worker_from_env().answer(event)
    if answer.ok:
        return dict(answer.output)
    raise failure(answer.error, answer.cause or answer.error)
