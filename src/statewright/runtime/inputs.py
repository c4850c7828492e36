"""A task's input, checked before anything is stored: plain JSON within the bounds of
``statewright._json_limits``, the inputs the worker makes into paths (``workspace``,
``repo``, or ``checkout`` in a github workflow) text a path can hold, a github workflow's
``repo`` its GitHub repository, and the workflow's ``input_schema``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright._errors import InputError
from statewright._json_limits import check_json_value
from statewright.definition.model import Workflow
from statewright.machine.task import verdict_error
from statewright.runtime.workspaces import repo_key


def task_input(wf: Workflow, input: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``input`` fit to start a task of ``wf``, or InputError with one line: plain
    JSON within the bounds of ``statewright._json_limits``, path inputs a path can hold, and
    the workflow's ``input_schema``. Needs no store: the CLI checks before it opens one."""
    data = dict(input or {})
    problem = check_json_value(data)  # depth, size, numbers, Unicode: before the schema
    if problem is not None:
        raise InputError(f"input refused: {problem}")
    for key in ("workspace", repo_key(wf)):  # input keys the worker turns into directories
        value = data.get(key)
        if key in data and (not isinstance(value, str) or not value.strip() or "\x00" in value):
            raise InputError(f"input {key!r} must be a path (non-empty text without NUL), got {value!r:.60}")
    if wf.github is not None and "repo" in data and data["repo"] != wf.github.repo:
        msg = (f"input 'repo' is {data['repo']!r:.60}, but {wf.name} serves the GitHub repository "
               f"{wf.github.repo!r} (a local git repository is input 'checkout' in a github workflow)")
        raise InputError(msg)
    if wf.input_schema is not None:
        try:
            err = verdict_error(wf.input_schema, data)
        except RecursionError:  # the loader refuses schemas that recurse in place
            err = "the schema recurses too deeply for this input"
        if err is not None:
            raise InputError(f"input does not match {wf.name}'s input_schema: {err}")
    return data
