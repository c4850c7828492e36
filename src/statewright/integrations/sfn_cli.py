"""``statewright sfn ...``: the worker that answers an exported state machine's task tokens,
and a person's answer to a human step (boto3 from the ``[aws]`` extra)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from statewright._cli_guard import guard as _guard
from statewright.store import DEFAULT_DB


@click.group()
def sfn() -> None:
    """Run exported workflows on AWS Step Functions (export --format asl)."""


@sfn.command()
@click.option("--queue", "queue_url", required=True, help="The SQS queue URL the state machine sends tasks to.")
@click.option("--workflow", "files", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="A workflow file the state machine was exported from (repeatable).")
@click.option("--once", is_flag=True, help="Answer the messages of one receive, then stop.")
@click.option("--region", default=None, help="The AWS region (default: the AWS configuration's).")
@click.option("--workspace-root", default=".statewright/sfn", show_default=True, type=click.Path(file_okay=False),
              help="Where tasks without a workspace get their own directory.")
@click.option("--heartbeat-seconds", default=60.0, show_default=True, type=click.FloatRange(min=1),
              help="How often a running step's heartbeat is sent (keep it inside the export's).")
@click.option("--db", envvar="STATEWRIGHT_DB", default=DEFAULT_DB, show_default=True,
              help="The store each execution is recorded in as a task (SQLite path or postgresql:// URL; "
                   "env STATEWRIGHT_DB): statewright log, show and verify read it.")
@click.option("--no-record", is_flag=True, help="Record nothing in a store (Step Functions' history only).")
@_guard
def worker(queue_url: str, files: tuple[str, ...], once: bool, region: str | None, workspace_root: str,
           heartbeat_seconds: float, db: str, no_record: bool) -> None:
    """Take task tokens from the queue, run each step, answer Step Functions; record each
    execution as a task in the store."""
    from statewright.definition import load_workflow
    from statewright.integrations.aws_sfn import SfnWorker, clients

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    workflows = [load_workflow(f) for f in files]
    sqs, sfn_client = clients(region)
    engine = None
    recorder = None
    if not no_record:
        from statewright.integrations.sfn_record import Recorder
        from statewright.runtime.engine import Engine
        from statewright.store import open_store

        engine = Engine(open_store(db, create=True))
        recorder = Recorder(engine, echo=click.echo)
    w = SfnWorker(workflows, queue_url, sqs=sqs, sfn=sfn_client, workspace_root=Path(workspace_root),
                  heartbeat_seconds=heartbeat_seconds, wait_seconds=1 if once else 20, echo=click.echo,
                  recorder=recorder)
    try:
        handled = w.run(once=once)
    except KeyboardInterrupt:
        handled = w.handled
    finally:
        if engine is not None:
            engine.close()
    click.echo(f"{handled} messages handled", err=True)


@sfn.command()
@click.option("--token", required=True, help="The task token of the human step's message.")
@click.option("--actor", required=True, help="Who answers (a person's name).")
@click.option("--approve", "approved", flag_value=True, default=None, help="Approve the proposal.")
@click.option("--reject", "reason_code", default=None, help="Reject it with this reason code.")
@click.option("--region", default=None, help="The AWS region (default: the AWS configuration's).")
@_guard
def answer(token: str, actor: str, approved: bool | None, reason_code: str | None, region: str | None) -> None:
    """Answer a human step: --approve, or --reject REASON_CODE."""
    from statewright._errors import InputError
    from statewright.integrations.aws_sfn import clients, decision

    if bool(approved) == bool(reason_code):
        raise InputError("give one of --approve or --reject REASON_CODE")
    out = decision(actor, approved=bool(approved), reason_code=reason_code or "")
    _, sfn_client = clients(region)
    try:
        sfn_client.send_task_success(taskToken=token, output=json.dumps(out))
    except Exception as exc:  # botocore's errors: an unknown or answered token, no credentials
        raise InputError(f"Step Functions refused the answer: {exc}") from None
    click.echo("approved" if approved else f"rejected ({reason_code})")
