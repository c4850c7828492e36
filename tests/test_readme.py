"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example completes its task after the approval and prints its history."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Python") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(code.group(1), "README.md", "exec"), {})
    out = capsys.readouterr().out.split()
    assert out[0] == "completed"
    assert out[1:] == ["TaskSubmitted", "AttemptReported", "ApprovalGranted", "AttemptReported"]
    assert (tmp_path / "published.txt").read_text() == "hello\n"
