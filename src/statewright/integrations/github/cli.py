"""``statewright github``: create a workflow's labels on a repository. Errors are one line."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from statewright._errors import DefinitionError, StatewrightError

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
