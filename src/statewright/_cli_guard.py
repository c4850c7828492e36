"""The command line's one error guard: a statewright error is one line on stderr and a
non-zero exit, never a traceback. Every command group (cli.py, sfn, ...) uses it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, NoReturn, TypeVar

import click

from statewright._errors import DefinitionError, StatewrightError

F = TypeVar("F", bound=Callable[..., Any])


def fail(msg: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def guard(fn: F) -> F:
    """Turn statewright errors into one clear line and a non-zero exit (130 on Ctrl-C)."""

    @wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DefinitionError as exc:
            for p in exc.problems:
                click.echo(f"error: {exc.source}: {p}", err=True)
            sys.exit(1)
        except StatewrightError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            fail("interrupted", 130)

    return inner  # type: ignore[return-value]
