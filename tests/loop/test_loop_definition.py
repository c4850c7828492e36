"""Loop files: what is accepted, and how refusals name the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statewright._errors import DefinitionError
from statewright.loop.definition import SourceKind, load_loop, parse_duration_seconds, parse_loop
from statewright.loop.errors import LoopDefinitionError

FULL = """\
loop: nightly-fixes
source: {jsonl: backlog.jsonl}
workflow: workflows/fix.yaml
check:
  - {name: suite, command: [python, checks/suite.py], timeout: 60s, assets: [checks/]}
gate: {role: maintainer, timeout: 2d}
goal:
  all_items_closed: true
  oracles:
    - {name: tests, command: [python, -m, pytest, -q], timeout: 10m}
    - {name: lint, command: [ruff, check, .]}
budgets: {passes: 30, tokens: 2000000, money_usd: 25, wall_time: 2h}
attempts_per_item: 4
stuck_after: 6
restart_limit: 1
kill_switch: {file: STOP}
"""


def _minimal(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "loop": "l",
        "source": {"jsonl": "b.jsonl"},
        "workflow": {"command": ["w"]},
        "check": [{"command": ["c"]}],
        "goal": {"oracles": [{"command": ["o"]}]},
        "budgets": {"passes": 3},
    }
    data.update(over)
    return data


FIX_WORKFLOW = """\
workflow: fix
steps:
  - {id: fix, kind: code, owner: ci, run: {command: [python, fix.py]}}
"""


def test_a_workflow_the_loop_names_must_exist_and_load(tmp_path: Path) -> None:
    """``workflow: PATH`` names a workflow file that loads; a missing or broken one is refused
    naming the field and the file."""
    path = tmp_path / "loop.yaml"
    path.write_text(FULL, encoding="utf-8")
    with pytest.raises(LoopDefinitionError, match=r"workflow: workflows/fix.yaml: .*file not found"):
        load_loop(path)
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "fix.yaml").write_text("workflow: fix\nsteps: []\n", encoding="utf-8")
    with pytest.raises(LoopDefinitionError, match=r"workflow: workflows/fix.yaml: "):
        load_loop(path)


def test_full_file_parses_with_paths_relative_to_it(tmp_path: Path) -> None:
    """Every field of the document's loop file, resolved against the file's directory."""
    path = tmp_path / "loop.yaml"
    path.write_text(FULL, encoding="utf-8")
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "fix.yaml").write_text(FIX_WORKFLOW, encoding="utf-8")
    d = load_loop(path)
    assert d.name == "nightly-fixes"
    assert d.source.kind is SourceKind.JSONL and d.source.path == tmp_path / "backlog.jsonl"
    assert d.worker.workflow_path == tmp_path / "workflows/fix.yaml"
    assert d.checks[0].timeout_seconds == 60 and d.checks[0].assets == (tmp_path / "checks",)
    assert d.gate is not None and d.gate.timeout_seconds == 2 * 86400
    assert [o.name for o in d.goal.oracles] == ["tests", "lint"]
    assert d.goal.oracles[1].timeout_seconds == 300  # the default
    assert (d.budgets.passes, d.budgets.tokens, d.budgets.money_usd) == (30, 2_000_000, 25.0)
    assert d.budgets.wall_time_seconds == 7200
    assert (d.attempts_per_item, d.stuck_after, d.restart_limit) == (4, 6, 1)
    assert d.kill_switch_file == tmp_path / "STOP"
    assert len(d.sha256) == 64
    cfg = d.config()
    assert cfg.gate_timeout_ms == 172_800_000 and cfg.wall_time_ms == 7_200_000


def test_defaults() -> None:
    """attempts 3, stuck after 5, restart limit 2, no gate, no kill switch."""
    d = parse_loop(_minimal(), base_dir=Path("/x"))
    assert (d.attempts_per_item, d.stuck_after, d.restart_limit) == (3, 5, 2)
    assert d.gate is None and d.kill_switch_file is None
    assert d.checks[0].name == "check1" and d.goal.oracles[0].name == "oracle1"
    assert d.goal.all_items_closed is True


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"colour": "blue"}, "colour", "unknown field"),
        ({"loop": 7}, "loop", "expected a name"),
        ({"source": {"jsonl": "a", "directory": "b"}}, "source", "exactly one of"),
        ({"source": "backlog.jsonl"}, "source", "expected a mapping"),
        ({"workflow": {"cmd": ["w"]}}, "workflow.cmd", "unknown field"),
        ({"check": []}, "check", "non-empty list"),
        ({"check": [{"command": "pytest -q"}]}, "check[0].command", "list of strings"),
        ({"check": [{"command": ["c"], "timeout": "soon"}]}, "check[0].timeout", "90s, 10m"),
        ({"check": [{"command": ["a"]}, {"name": "check1", "command": ["b"]}]}, "check", "twice"),
        ({"goal": {"oracles": []}}, "goal.oracles", "non-empty list"),
        (
            {"goal": {"all_items_closed": "yes", "oracles": [{"command": ["o"]}]}},
            "goal.all_items_closed",
            "true or false",
        ),
        ({"budgets": {"tokens": 5}}, "budgets.passes", "required"),
        ({"budgets": {"passes": True}}, "budgets.passes", "whole number"),
        ({"budgets": {"passes": 0}}, "budgets.passes", "at least 1"),
        ({"budgets": {"passes": 2, "money_usd": "ten"}}, "budgets.money_usd", "positive number"),
        ({"budgets": {"passes": 2, "wall_time": "2 weeks"}}, "budgets.wall_time", "duration"),
        ({"attempts_per_item": 2.5}, "attempts_per_item", "whole number"),
        ({"restart_limit": -1}, "restart_limit", "at least 0"),
        ({"gate": {"role": ""}}, "gate.role", "role"),
        ({"kill_switch": {"path": "STOP"}}, "kill_switch.path", "unknown field"),
    ],
)
def test_each_problem_names_the_file_and_field(change: dict[str, Any], field: str, says: str) -> None:
    """Refusals are LoopDefinitionErrors whose message starts 'file: field:'."""
    with pytest.raises(LoopDefinitionError) as info:
        parse_loop(_minimal(**change), source="loops/nightly.yaml")
    text = str(info.value)
    assert f"loops/nightly.yaml: {field}: " in text
    assert says in text
    assert isinstance(info.value, DefinitionError) and isinstance(info.value, ValueError)


def test_missing_required_fields_are_all_reported() -> None:
    """All problems at once, one per line."""
    with pytest.raises(LoopDefinitionError) as info:
        parse_loop({"loop": "x"}, source="f.yaml")
    assert info.value.problems == [
        "source: required field is missing",
        "workflow: required field is missing",
        "check: required field is missing",
        "goal: required field is missing",
        "budgets: required field is missing",
    ]


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    """A missing file or broken YAML is a definition error naming the file (and the line)."""
    with pytest.raises(LoopDefinitionError, match="cannot read the loop file"):
        load_loop(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("loop: x\nsource: [\n", encoding="utf-8")
    with pytest.raises(LoopDefinitionError, match=r"bad\.yaml: not valid YAML at line"):
        load_loop(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n", encoding="utf-8")
    with pytest.raises(LoopDefinitionError, match=r"\(top level\): expected a mapping"):
        load_loop(top)


def test_command_and_directory_sources() -> None:
    """A command source takes argv and a timeout; a directory source a path."""
    d = parse_loop(_minimal(source={"command": ["gh", "issue", "list"], "timeout": "30s"}))
    assert d.source.kind is SourceKind.COMMAND and d.source.command is not None
    assert d.source.command.argv == ("gh", "issue", "list")
    assert d.source.command.timeout_seconds == 30
    d = parse_loop(_minimal(source={"directory": "items"}), base_dir=Path("/b"))
    assert d.source.path == Path("/b/items")
    with pytest.raises(LoopDefinitionError, match="only a command source takes a timeout"):
        parse_loop(_minimal(source={"jsonl": "a", "timeout": "1s"}))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("2h", 7200), ("2d", 172800), ("500ms", 0.5), (30, 30)],
)
def test_durations(text: object, seconds: float) -> None:
    """Durations take a unit (a bare number is seconds)."""
    assert parse_duration_seconds(text) == seconds


@pytest.mark.parametrize("bad", ["2 weeks", "h", "-1s", True, None, -3])
def test_bad_durations(bad: object) -> None:
    """A duration that is not one shows the accepted forms and the value with its type."""
    with pytest.raises(ValueError, match="like 90s, 10m, 2h or 2d"):
        parse_duration_seconds(bad)
