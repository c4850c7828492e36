"""Fixtures for the command-line tests: a clean environment, a database path, and the
workflow files the tests submit."""

from __future__ import annotations

from pathlib import Path

import pytest

BUILD = """\
workflow: build
input_schema:
  type: object
  properties: {n: {type: integer}, workspace: {type: string}}
  required: [n]
steps:
  - {id: build, kind: code, owner: ci, run: {command: [sh, -c, "echo built"]}}
  - {id: ship, kind: code, owner: ci, run: {command: [sh, -c, "echo shipped"]}}
"""

GATE = """\
workflow: gate
steps:
  - {id: build, kind: code, owner: ci, run: {command: [sh, -c, "echo built"]}}
  - id: approve
    kind: human
    owner: leads
    approvers: {role: maintainer}
    expires_after: 1d
  - {id: ship, kind: code, owner: ci, run: {command: [sh, -c, "echo shipped"]}, on_success: complete}
"""

DUTY = """\
workflow: duty
steps:
  - {id: propose, kind: human, owner: authors, approvers: {role: author}}
  - id: sign-off
    kind: human
    owner: leads
    approvers: {role: maintainer}
    separate_from: [propose]
"""

FLAG = """\
workflow: flag
steps:
  - {id: check-flag, kind: code, owner: ops, run: {command: [sh, -c, "test -f fixed"]}}
"""

BROKEN = """\
workflow: broken
steps:
  - {id: test, kind: code, owner: ci, run: {command: [pytest]}, on_failure: {loop_back: deploy, max_attempts: 2}}
  - {id: deploy, kind: code, owner: ci, run: {command: [make, deploy]}, colour: blue}
"""


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, text in {"build": BUILD, "gate": GATE, "duty": DUTY, "flag": FLAG, "broken": BROKEN}.items():
        out[name] = tmp_path / f"{name}.yaml"
        out[name].write_text(text, encoding="utf-8")
    return out
