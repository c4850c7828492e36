"""``statewright github``: create a workflow's labels on a repository, and feed a webhook
payload through the receiver (for tests and debugging). Errors are one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from statewright._errors import DefinitionError, StatewrightError
from statewright.store import DEFAULT_DB

F = TypeVar("F", bound=Callable[..., Any])


def _one_line(fn: F) -> F:
    @wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DefinitionError as exc:
            raise click.ClickException("; ".join(f"{exc.source}: {p}" for p in exc.problems)) from None
        except StatewrightError as exc:
            raise click.ClickException(str(exc)) from None

    return inner  # type: ignore[return-value]


@click.group("github")
def github() -> None:
    """GitHub: labels that show a task's state, webhooks that drive it."""


@github.command("labels")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--repo", required=True, help="OWNER/NAME of the repository to create them in.")
@_one_line
def labels(file: str, repo: str) -> None:
    """Create (or recolor) the labels FILE's github key uses, with its colors, using
    GITHUB_TOKEN against GITHUB_API_URL."""
    from statewright.definition import load_workflow
    from statewright.integrations.github.client import GitHub
    from statewright.integrations.github.labels import label_plan

    wf = load_workflow(file)
    plan = label_plan(wf)
    if not plan:
        raise click.ClickException(f"{file}: the workflow has no github key with labels")
    if "/" not in repo or repo.count("/") != 1 or not all(repo.split("/")):
        raise click.ClickException(f"--repo must be OWNER/NAME, got {repo!r}")
    with GitHub() as client:
        for name, color in plan:
            done = client.ensure_label(repo, name, color, f"statewright: {wf.name}")
            click.echo(f"{done} {name} #{color}")


@github.command("replay")
@click.argument("payload", type=click.Path(dir_okay=False))
@click.option("--event", "event_type", required=True, help="The X-GitHub-Event type (issues, pull_request, ...).")
@click.option("--config", "configs", multiple=True, type=click.Path(dir_okay=False),
              help="A workflow file with a github key (repeatable; default: none, so every event is unknown).")
@click.option("--delivery", default=None, help="The X-GitHub-Delivery id (default: a new one).")
@click.option("--db", envvar="STATEWRIGHT_DB", default=DEFAULT_DB, show_default=True,
              help="SQLite path or postgresql:// URL (env STATEWRIGHT_DB).")
@_one_line
def replay(payload: str, event_type: str, configs: tuple[str, ...], delivery: str | None, db: str) -> None:
    """Feed a webhook payload through the receiver as GitHub would send it (signed with
    STATEWRIGHT_GITHUB_WEBHOOK_SECRET); prints the status and the answer."""
    import uuid

    from statewright.integrations.github.webhook import WebhookConfig, handle_event, sign
    from statewright.runtime.engine import Engine
    from statewright.store import open_store

    try:
        body = Path(payload).read_bytes()
    except OSError as exc:
        raise click.ClickException(f"{payload}: cannot read the payload ({exc.strerror or exc})") from None
    config = WebhookConfig.load(configs)
    headers = {
        "X-GitHub-Event": event_type, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(config.secret, body), "Content-Type": "application/json",
    }
    engine = Engine(open_store(db, create=True))
    try:
        status, answer = handle_event(engine, config, headers, body)
    finally:
        engine.close()
    click.echo(f"{status} {json.dumps(answer, sort_keys=True)}")
    if status >= 400:
        raise SystemExit(1)
