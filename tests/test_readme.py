"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example completes its task after the approval and prints its history. Its YAML
    block is the workflow file and its first Python block the module of steps, each written
    where its first line says; the second Python block is the script."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Python") : text.index("## Reliability")]
    [workflow] = re.findall(r"```yaml\n(.*?)```", section, re.S)
    steps, script, in_process = re.findall(r"```python\n(.*?)```", section, re.S)
    for block in (workflow, steps):
        name = block.splitlines()[0].removeprefix("# ").strip()
        (tmp_path / name).write_text(block, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    exec(compile(script, "README.md", "exec"), {})
    out = capsys.readouterr().out.split()
    assert out[0] == "completed"
    assert out[1:] == ["TaskSubmitted", "AttemptReported", "ApprovalGranted", "AttemptReported"]
    assert (tmp_path / "published.txt").read_text() == "Release 1.4 ships on Friday.\n"

    exec(compile(in_process, "README.md", "exec"), {})  # the task run where it is submitted
    assert capsys.readouterr().out.split() == ["completed", "awaiting_approval"]


def test_the_exit_status_table_is_the_one_run_uses() -> None:
    """Each outcome's row in the README's table of `run`'s exit statuses is the code `run` exits with."""
    from statewright.cli import RUN_EXIT

    text = README.read_text(encoding="utf-8")
    table = text[text.index("`run` exits with the task's outcome"):].split("\n\n")[1]
    rows = {code: re.split(r" \(|;", what)[0] for code, what in re.findall(r"^\| (\d) \| (.+) \|$", table, re.M)}
    words = {"completed": "completed", "completed_early": "completed early", "awaiting_approval": "waits for a person",
             "halted": "halted", "cancelled": "cancelled"}
    assert {status: rows[str(code)] for status, code in RUN_EXIT.items()} == words
    assert rows["1"] == "the command itself failed"


def test_loop_run_speaks_the_same_exit_table() -> None:
    """The README's table of `loop run` names only codes of the one table, each meaning the
    same there as for a task: 4 a person decides next, 5 ended short."""
    from statewright._exit import Exit

    text = README.read_text(encoding="utf-8")
    table = text[text.index("`loop run` exits with where the run stands"):].split("\n\n")[1]
    codes = {int(code) for code in re.findall(r"^\| (\d) \|", table, re.M)}
    assert codes == {Exit.OK, Exit.WAITING, Exit.ENDED_SHORT, Exit.FAILED}
    assert "a person decides next" in table.split("| 4 |")[1].split("\n")[0]
