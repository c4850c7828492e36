"""The command line's one error guard: a statewright error is one line on stderr and a
non-zero exit, never a traceback. Every command group (cli.py, sfn, loop, ...) uses it.

Exit codes of every command: 0 done; 1 the command itself failed (bad input, a refused act,
an error reading a file or database; one line says why); 2 a usage mistake (click's: an
unknown option, a missing argument); 130 interrupted. ``run`` and ``loop run`` add the
outcome codes of their table (3 to 6, in README.md)."""

from __future__ import annotations

import sqlite3
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
        except (OSError, sqlite3.Error) as exc:
            fail(f"{type(exc).__name__}: {exc}")

    return inner  # type: ignore[return-value]


class OneLineUsageError(click.UsageError):
    """Click's usage errors, said in one line on stderr (exit status 2)."""

    def show(self, file: Any = None) -> None:
        where = self.ctx.command_path if self.ctx is not None else "statewright"
        click.echo(f"error: {self.format_message()} (see '{where} --help')", err=True)


class OneLineGroup(click.Group):
    """A command group whose usage mistakes are one line, also when it runs alone
    (``python -m statewright.loop``) rather than under ``statewright``'s main()."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OneLineUsageError:
            raise
        except click.UsageError as exc:
            raise OneLineUsageError(exc.format_message(), exc.ctx) from None
