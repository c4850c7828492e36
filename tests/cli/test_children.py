"""The command line with child tasks, on every backend: ``run`` works a map step's children,
``show`` of a parent lists their progress and a child names its parent, ``cancel`` of a
parent cancels its live children, and a map over an unknown workflow is one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .support import ended, ok, person, refusal, sw, sw_worker

CHILD = """\
workflow: sign-one
steps:
  - {id: sign, kind: human, owner: leads, approvers: {role: maintainer}}
"""
QUICK = """\
workflow: echo-one
steps:
  - {id: say, kind: code, owner: ci, run: {command: [sh, -c, 'echo "$1"', sh, "{input.item}"]}}
"""


def parent(child: str, concurrency: int = 2) -> str:
    return f"""\
workflow: many
input_schema:
  type: object
  properties: {{items: {{type: array}}}}
steps:
  - {{id: each, kind: map, owner: ci, workflow: {child}, items: input.items, max_concurrency: {concurrency}}}
"""


@pytest.fixture
def maps(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, text in {"sign-one": CHILD, "echo-one": QUICK, "signs": parent("sign-one.yaml"),
                       "echoes": parent("echo-one.yaml"), "unknown": parent("nobody")}.items():
        out[name] = tmp_path / f"{name}.yaml"
        out[name].write_text(text, encoding="utf-8")
    return out


def test_run_works_the_children_and_show_lists_them(maps: dict[str, Path], db: Path) -> None:
    out = ended(sw("run", maps["echoes"], "--input", '{"items": ["a", "b", "c"]}', "--db", db), "completed")
    tid = re.search(r"task (t-[0-9a-f]+)", out).group(1)  # type: ignore[union-attr]
    assert "children of each #1: 3 of 3 started ended (3 completed)" in out
    assert f"[2] {tid}.each.1.2  completed" in out
    child = ok(sw("show", f"{tid}.each.1.1", "--db", db))
    assert f"child of {tid} (step each #1, item 1)" in child


def test_show_lists_running_children_and_cancel_cascades(maps: dict[str, Path], db: Path) -> None:
    tid = ok(sw("submit", maps["signs"], "--input", '{"items": [1, 2, 3]}', "--db", db)).strip()
    assert sw_worker("--until-done", db=db).returncode == 0  # the children wait for people: nothing to do
    shown = ok(sw("show", tid, "--db", db))
    assert "children of each #1: 0 of 2 started ended (2 running)" in shown
    assert f"[0] {tid}.each.1.0  awaiting_approval at sign" in shown
    ops = person(db, "ops", "operator")
    assert ok(sw("cancel", tid, "--as", "ops", "--reason", "wrong batch", "--token-file", ops,
                 "--db", db)).strip() == f"cancelled; task {tid} is cancelled"
    shown = ok(sw("show", tid, "--db", db))
    assert "children of each #1: 2 of 2 started ended (2 cancelled)" in shown
    child = ok(sw("show", f"{tid}.each.1.0", "--db", db))
    assert "status cancelled" in child and "cancelled by ops" in child and "wrong batch" in child
    assert ok(sw("verify", "--db", db)).startswith("verified 3 tasks")


def test_a_map_over_an_unknown_workflow_is_one_line_and_changes_nothing(maps: dict[str, Path], db: Path) -> None:
    line = refusal(sw("submit", maps["unknown"], "--input", '{"items": [1]}', "--db", db))
    assert "map step 'each'" in line and "no workflow named 'nobody' is registered" in line
    assert ok(sw("tasks", "--db", db)).strip().splitlines()[1:] == []
