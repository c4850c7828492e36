"""The task's state as a step's process reads it: a JSON file named by ``STATEWRIGHT_STATE``,
``{"input": ..., "results": {STEP: ...}}``, read-only, in a directory made for the one
process and removed after it (outside the workspace, so it never shows in a diff). Code
steps, command agents and command checks all get it from here; so do argv references
(``{input.x}``, ``{results.STEP.y}``), resolved against the same state."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..definition.references import has_references, resolve_argv
from ._spec import command_argv
from .base import ExecContext


@contextmanager
def state_exchange(ctx: ExecContext, prefix: str) -> Iterator[tuple[Path, dict[str, str]]]:
    """A private directory holding ``state.json`` and the environment that names it; the
    directory (and anything the process wrote there) is removed on exit."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        path = directory / "state.json"
        state = {"input": ctx.input, "results": ctx.results}
        path.write_text(json.dumps(state, default=dict, ensure_ascii=False), encoding="utf-8")
        path.chmod(0o400)
        yield directory, {"STATEWRIGHT_STATE": str(path)}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def resolved_argv(spec: Mapping[str, Any], ctx: ExecContext) -> list[str]:
    """The spec's command as argv with its references resolved against ``ctx``'s state,
    each still one argument. ValueError (one line naming the reference) when one cannot be."""
    argv = command_argv(spec)
    if not has_references(argv):
        return argv
    return resolve_argv(argv, ctx.input, ctx.results)
