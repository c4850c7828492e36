"""Whether what a workflow runs can be found here, before any task tries.

``statewright validate`` prints these as warnings: the definition is valid, but a worker
with this environment would fail the step (``not_found``). Nothing is imported or run: a
callable's module is looked up with the import system's finders (``find_spec`` on each
package's search path, so no package ``__init__`` executes), a command's program with
``shutil.which`` or, for a path, by checking that the file exists.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..definition.references import has_references
from ._spec import command_argv

if TYPE_CHECKING:
    from ..definition import Workflow


def unreachable_references(workflow: Workflow, base_dir: Path | None = None) -> list[str]:
    """One warning per module or program of ``workflow`` that cannot be found here, naming
    the steps that use it. ``base_dir`` (the definition's folder) is where a relative
    command path is also tried."""
    problems: dict[str, list[str]] = {}
    for step in workflow.steps:
        for spec in _specs(step.agent, step.run, step.check):
            if "callable" in spec:
                problem = _callable_problem(str(spec["callable"]), base_dir)
            else:
                problem = _command_problem(spec, base_dir)
            if problem is not None and step.id not in problems.setdefault(problem, []):
                problems[problem].append(step.id)
    out = []
    for problem, steps in problems.items():
        named = ", ".join(repr(s) for s in steps)
        out.append(f"{'steps' if len(steps) > 1 else 'step'} {named}: {problem}")
    return out


def _specs(*specs: Mapping[str, Any] | None) -> Iterator[Mapping[str, Any]]:
    for spec in specs:
        if spec is not None and ("callable" in spec or "command" in spec):
            yield spec


def _find_module(name: str) -> ModuleSpec | None:
    """The module's spec without importing it or its parent packages."""
    parts = name.split(".")
    if name in sys.modules:
        return importlib.util.find_spec(name)
    spec = importlib.util.find_spec(parts[0])  # a top-level name imports nothing
    for i in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            return None
        spec = PathFinder.find_spec(".".join(parts[: i + 1]), list(spec.submodule_search_locations))
    return spec


def _callable_problem(ref: str, base_dir: Path | None) -> str | None:
    module = ref.partition(":")[0]
    try:
        found = _find_module(module)
    except (ImportError, ValueError):
        found = None
    if found is not None:
        return None
    hint = "install it or put its folder on PYTHONPATH"
    if base_dir is not None:
        beside = base_dir / (module.replace(".", os.sep) + ".py")
        if beside.is_file():
            hint = f"it is next to the definition: run with PYTHONPATH={base_dir}"
    return (f"the callable's module {module!r} is not on this Python's path, so a worker "
            f"started like this would fail the step; {hint}")


def _command_problem(spec: Mapping[str, Any], base_dir: Path | None) -> str | None:
    try:
        argv = command_argv(spec)
    except (ValueError, TypeError):
        return None  # the shape checks already said what is wrong
    if not argv or has_references(argv[:1]):
        return None  # a program named by the task's state is known only when it runs
    program = argv[0]
    if os.sep in program:
        candidates = [Path(program)] if Path(program).is_absolute() else [Path.cwd() / program]
        if base_dir is not None and not Path(program).is_absolute():
            candidates.append(base_dir / program)
        if any(p.is_file() for p in candidates):
            return None
        return (f"command {program!r} is not a file here (relative paths run from the task's "
                "workspace; check it will be there)")
    if shutil.which(program) is not None:
        return None
    return f"command {program!r} is not on PATH; install it or give its full path"
