"""What a command run by the loop sees of the runner, and what the loop keeps out of its record.

    env = command_env(spec, environ, {"STATEWRIGHT_RUN_ID": ...})   # minimal + declared + ours
    require_secrets(definition, environ)                             # before a run opens
    redactor = loop_redactor(definition, environ, store_path)        # every event, item, error

The loop runs commands of three kinds: the pass worker (the agent itself), checks and goal
oracles (the operator's, but they run what the worker wrote: a test suite imports its
code), and a command source. None of them inherits the runner's environment: each gets
what a task step gets (``executors.base.step_base_env``: PATH, LANG, LC_ALL, TZ; a private
HOME and TMPDIR from ``executors._process.run_process``), the variables its entry in the
loop file declares (``env:`` values, ``secrets:`` names), and the STATEWRIGHT_* variables
the loop sets for it. So no command finds the runner's database, token or keys.

Known secrets (what ``executors._isolation.secrets_in`` finds in the runner's environment,
the store's path or URL, and the values of every declared secret) are redacted from what
the loop stores and prints, exactly as the task layer does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from statewright._errors import InputError
from statewright.executors._isolation import Redactor, secrets_in, step_env
from statewright.executors.base import step_base_env
from statewright.loop.definition import CommandSpec, LoopDefinition


def command_env(
    spec: CommandSpec, environ: Mapping[str, str], variables: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The whole environment of one command: the minimal base taken from ``environ``, what
    ``spec`` declares, then the loop's ``variables``. A declared secret ``environ`` lacks
    raises PermanentError (reason ``missing_credential``)."""
    env = step_base_env(environ)
    env.update(step_env(spec.env, spec.secrets, environ, step=spec.name))
    env.update(variables or {})
    return env


def missing_secrets(definition: LoopDefinition, environ: Mapping[str, str]) -> list[str]:
    """One problem per declared secret ``environ`` does not have, naming the command."""
    d = definition
    labelled = [
        *(("source", c) for c in (d.source.command,) if c is not None),
        *(("workflow", c) for c in (d.worker.command,) if c is not None),
        *((f"check {c.name!r}", c) for c in d.checks),
        *((f"goal oracle {c.name!r}", c) for c in d.goal.oracles),
    ]
    return [
        f"{where} declares secret {name}, which this process's environment lacks;"
        " export it and run again"
        for where, spec in labelled
        for name in spec.secrets
        if name not in environ
    ]


def require_secrets(definition: LoopDefinition, environ: Mapping[str, str]) -> None:
    """Raise InputError (one line) when ``environ`` lacks a secret the loop file declares."""
    missing = missing_secrets(definition, environ)
    if missing:
        raise InputError(f"{definition.path}: {'; '.join(missing)}")


def loop_redactor(definition: LoopDefinition, environ: Mapping[str, str], extra: Iterable[str] = ()) -> Redactor:
    """A redactor knowing every secret the runner holds and every declared secret's value."""
    declared = [environ[n] for spec in definition.commands() for n in spec.secrets if n in environ]
    return Redactor(secrets_in(environ, extra)).add(declared)

