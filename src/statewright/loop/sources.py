"""Item sources: turn a JSONL file, a command or a directory into work items.

Each item is a JSON object with an ``id`` (a string or a whole number). A source
that cannot be read raises SourceError; the runner treats that as a crash (nothing
is written, the next start counts as a restart in FINDING).

* ``{jsonl: PATH}``: one JSON object per non-blank line.
* ``{command: [argv...]}``: stdout is a JSON list of objects, or one object per line.
  The command gets a minimal environment plus what it declares (``loop._isolation``).
* ``{directory: PATH}``: one file per item, in name order (hidden files skipped).
  ``.json``/``.yaml``/``.yml`` files hold an object (``id`` defaults to the file's
  stem); any other file becomes ``{"id": stem, "text": contents}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

import yaml

from statewright._errors import InputError, PermanentError
from statewright._json_limits import check_json_value, loads_json
from statewright._record import record
from statewright.definition._yaml import load_yaml, yaml_problem
from statewright.executors._process import run_process
from statewright.loop._isolation import command_env
from statewright.loop.definition import SourceKind, SourceSpec
from statewright.loop.errors import SourceError

MAX_SOURCE_OUTPUT_CHARS = 1_000_000


@record
class WorkItem:
    """One item of the backlog: its id, what the source said, and the run working it."""

    id: str
    data: Mapping[str, Any] = field(default_factory=dict)
    run_id: str = ""


def find_items(
    spec: SourceSpec,
    *,
    cwd: Path,
    environ: Mapping[str, str] | None = None,
    variables: Mapping[str, str] | None = None,
) -> tuple[WorkItem, ...]:
    """Read the source. Raise SourceError naming the source and what is wrong.

    A command source runs with the minimal base taken from ``environ`` (the runner's
    environment; default this process's), what it declares, and ``variables``."""
    if spec.kind is SourceKind.JSONL:
        return _from_jsonl(_need_path(spec))
    if spec.kind is SourceKind.DIRECTORY:
        return _from_directory(_need_path(spec))
    return _from_command(spec, cwd=cwd, environ=os.environ if environ is None else environ,
                         variables=variables or {})


def _need_path(spec: SourceSpec) -> Path:
    if spec.path is None:
        raise SourceError(f"source {spec.kind}: no path given")
    return spec.path


def _from_jsonl(path: Path) -> tuple[WorkItem, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"source jsonl {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
        raise SourceError(msg) from None
    items: list[WorkItem] = []
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceError(f"source jsonl {path} line {no}: not JSON ({exc.msg})") from None
        except (ValueError, RecursionError):  # a huge number, deep nesting: the bounded parser says which
            value = _bounded(line, f"source jsonl {path} line {no}")
        items.append(_item(value, f"source jsonl {path} line {no}"))
    return _unique(items, f"source jsonl {path}")


def _from_command(
    spec: SourceSpec, *, cwd: Path, environ: Mapping[str, str], variables: Mapping[str, str]
) -> tuple[WorkItem, ...]:
    command = spec.command
    if command is None:
        raise SourceError("source command: no command given")
    where = f"source command {' '.join(command.argv)}"
    try:
        env = command_env(command, environ, variables)
        done = run_process(command.argv, cwd=cwd, env=env, timeout_seconds=command.timeout_seconds,
                           output_limit_chars=MAX_SOURCE_OUTPUT_CHARS + 1)
    except PermanentError as exc:
        raise SourceError(f"{where}: {exc}") from None
    if done.timed_out or done.returncode != 0:
        why = f"timed out after {command.timeout_seconds:g}s" if done.timed_out else f"exit status {done.returncode}"
        tail = (done.stderr or done.stdout).strip()[-500:]
        raise SourceError(f"{where}: {why}" + (f": {tail}" if tail else ""))
    out = done.stdout.strip()
    if len(done.stdout) > MAX_SOURCE_OUTPUT_CHARS:
        raise SourceError(f"{where}: printed more than {MAX_SOURCE_OUTPUT_CHARS:,} characters; list fewer items")
    if not out:
        return ()
    try:
        whole = loads_json(out, f"{where}: stdout", max_bytes=len(out))
    except InputError:
        whole = None
    if isinstance(whole, list):
        return _unique([_item(v, f"{where} item {i}") for i, v in enumerate(whole)], where)
    items: list[WorkItem] = []
    for no, line in enumerate(out.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            msg = f"{where}: stdout line {no} is not JSON ({exc.msg}); print a JSON list or one object per line"
            raise SourceError(msg) from None
        except (ValueError, RecursionError):
            value = _bounded(line, f"{where}: stdout line {no}")
        items.append(_item(value, f"{where} line {no}"))
    return _unique(items, where)


def _from_directory(path: Path) -> tuple[WorkItem, ...]:
    where = f"source directory {path}"
    if not path.is_dir():
        raise SourceError(f"{where}: not a directory")
    items: list[WorkItem] = []
    for file in sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{where}: cannot read {file.name} ({exc})") from None
        suffix = file.suffix.lower()
        if suffix in (".json", ".yaml", ".yml"):
            try:
                value = loads_json(text, file.name) if suffix == ".json" else load_yaml(text)
            except InputError as exc:
                raise SourceError(f"{where}: {exc}") from None
            except yaml.YAMLError as exc:
                raise SourceError(f"{where}: {file.name} does not parse ({yaml_problem(exc)})") from None
            if isinstance(value, dict) and "id" not in value:
                value = {"id": file.stem, **value}
            items.append(_item(value, f"{where} file {file.name}"))
        else:
            items.append(WorkItem(file.stem, {"id": file.stem, "text": text}))
    return _unique(items, where)


def _bounded(text: str, where: str) -> Any:
    """The bounded parser's reading of a line plain ``json`` refused with a ValueError."""
    try:
        return loads_json(text, where)
    except InputError as exc:
        raise SourceError(str(exc)) from None


def _item(value: object, where: str) -> WorkItem:
    if not isinstance(value, dict):
        raise SourceError(f"{where}: expected a JSON object with an id, got {type(value).__name__}")
    problem = check_json_value(value)  # depth, NaN, huge numbers, lone surrogates: refused here
    if problem is not None:
        raise SourceError(f"{where}: {problem}")
    raw = value.get("id")
    if isinstance(raw, bool) or not isinstance(raw, str | int) or str(raw).strip() == "":
        raise SourceError(f"{where}: every item needs an 'id' (a string or number), got {raw!r}")
    item_id = str(raw).strip()
    return WorkItem(item_id, {**value, "id": item_id})


def _unique(items: list[WorkItem], where: str) -> tuple[WorkItem, ...]:
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise SourceError(f"{where}: the id {item.id!r} appears twice; ids must be unique")
        seen.add(item.id)
    return tuple(items)
