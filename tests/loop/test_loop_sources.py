"""Item sources: JSONL, a command, a directory; and what a broken source says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statewright.loop.definition import CommandSpec, SourceKind, SourceSpec
from statewright.loop.errors import SourceError
from statewright.loop.oracles import run_check
from statewright.loop.sources import MAX_SOURCE_OUTPUT_CHARS, find_items
from statewright.machine.loop.model import CheckOutcome, CheckResult

from .helpers import PY, clean_env


def _ids(spec: SourceSpec, cwd: Path) -> list[str]:
    return [i.id for i in find_items(spec, cwd=cwd, environ=clean_env())]


def test_jsonl(tmp_path: Path) -> None:
    """One object per line; numeric ids become strings; blank lines are skipped."""
    f = tmp_path / "b.jsonl"
    f.write_text('{"id": 88, "title": "x"}\n\n{"id": "a-1"}\n', encoding="utf-8")
    items = find_items(SourceSpec(SourceKind.JSONL, path=f), cwd=tmp_path)
    assert [(i.id, i.data["id"]) for i in items] == [("88", "88"), ("a-1", "a-1")]
    assert items[0].data["title"] == "x"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"id": 1}\nnot json\n', "line 2: not JSON"),
        ('{"title": "no id"}\n', "needs an 'id'"),
        ("[1, 2]\n", "expected a JSON object"),
        ('{"id": 1}\n{"id": "1"}\n', "appears twice"),
        ('{"id": 1, "n": NaN}\n', "at n: nan is not a finite number"),
        ('{"id": 1, "n": ' + "7" * 5000 + "}\n", "an integer of 5,000 digits"),
        ('{"id": 1, "x": ' + "[" * 5000 + "]" * 5000 + "}\n", "nested deeper than 64 levels"),
        ('{"id": 1, "s": "\\ud800"}\n', "a lone surrogate"),
    ],
)
def test_jsonl_problems(tmp_path: Path, text: str, says: str) -> None:
    """A malformed backlog is a SourceError naming the file and line."""
    f = tmp_path / "b.jsonl"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(SourceError, match=says):
        find_items(SourceSpec(SourceKind.JSONL, path=f), cwd=tmp_path)


def test_an_alias_bomb_in_a_directory_item_is_refused_fast(tmp_path: Path) -> None:
    """A YAML item goes through the bounded loader: a 9^9 alias bomb is a SourceError."""
    d = tmp_path / "items"
    d.mkdir()
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    (d / "one.yaml").write_text("\n".join(bomb) + "\n", encoding="utf-8")
    with pytest.raises(SourceError, match="once aliases are expanded"):
        find_items(SourceSpec(SourceKind.DIRECTORY, path=d), cwd=tmp_path)


def test_command_list_and_lines(tmp_path: Path) -> None:
    """A command may print a JSON list or one object per line."""
    listing = json.dumps([{"id": 1}, {"id": 2}])
    spec = SourceSpec(SourceKind.COMMAND, command=CommandSpec("s", (PY, "-c", f"print({listing!r})"), 30))
    assert _ids(spec, tmp_path) == ["1", "2"]
    code = 'print(\'{"id": "x"}\'); print(\'{"id": "y"}\')'
    spec = SourceSpec(SourceKind.COMMAND, command=CommandSpec("s", (PY, "-c", code), 30))
    assert _ids(spec, tmp_path) == ["x", "y"]


def test_command_that_fails(tmp_path: Path) -> None:
    """A non-zero exit is a source that is down, with its stderr."""
    code = "import sys; sys.stderr.write('rate limited'); sys.exit(4)"
    spec = SourceSpec(SourceKind.COMMAND, command=CommandSpec("s", (PY, "-c", code), 30))
    with pytest.raises(SourceError, match="exit status 4: rate limited"):
        find_items(spec, cwd=tmp_path, environ=clean_env())


def test_directory(tmp_path: Path) -> None:
    """One file per item in name order: JSON/YAML objects, other files as text."""
    d = tmp_path / "items"
    d.mkdir()
    (d / "b.json").write_text('{"title": "b"}', encoding="utf-8")
    (d / "a.yaml").write_text("id: first\ntitle: a\n", encoding="utf-8")
    (d / "c.md").write_text("# fix the export\n", encoding="utf-8")
    (d / ".hidden").write_text("x", encoding="utf-8")
    items = find_items(SourceSpec(SourceKind.DIRECTORY, path=d), cwd=tmp_path)
    assert [i.id for i in items] == ["first", "b", "c"]
    assert items[2].data["text"] == "# fix the export\n"
    with pytest.raises(SourceError, match="not a directory"):
        find_items(SourceSpec(SourceKind.DIRECTORY, path=tmp_path / "none"), cwd=tmp_path)


def test_a_source_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    """A source command that outlives its timeout is killed with its process group and the
    source is down (no waiting: the command blocks forever and the timeout is zero)."""
    code = "import select; select.select([], [], [])"
    spec = SourceSpec(SourceKind.COMMAND, command=CommandSpec("s", (PY, "-c", code), 0))
    with pytest.raises(SourceError, match="timed out after 0s"):
        find_items(spec, cwd=tmp_path, environ=clean_env())


def test_a_source_printing_too_much_is_down(tmp_path: Path) -> None:
    """A listing longer than the source limit is refused whole, never parsed cut."""
    code = f"print('[' + ' ' * {MAX_SOURCE_OUTPUT_CHARS} + ']')"
    spec = SourceSpec(SourceKind.COMMAND, command=CommandSpec("s", (PY, "-c", code), 30))
    with pytest.raises(SourceError, match="printed more than 1,000,000 characters"):
        find_items(spec, cwd=tmp_path, environ=clean_env())


def test_check_outcomes(tmp_path: Path) -> None:
    """exit 0 passes; non-zero fails; cannot start errors; past the timeout times out."""
    env = clean_env()

    def check(argv: tuple[str, ...], timeout: float = 30) -> CheckResult:
        return run_check(CommandSpec("c", argv, timeout), cwd=tmp_path, environ=env)

    assert check((PY, "-c", "print('ok')")).outcome is CheckOutcome.PASS
    failed = check((PY, "-c", "print('1 failed'); raise SystemExit(1)"))
    assert failed.outcome is CheckOutcome.FAIL and failed.output == "1 failed\n[exit status 1]"
    assert check(("/no/such/checker",)).outcome is CheckOutcome.ERROR
    blocked = check((PY, "-c", "import select; select.select([], [], [])"), timeout=0)
    assert blocked.outcome is CheckOutcome.TIMEOUT and not blocked.passed
