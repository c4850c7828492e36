"""``validate`` warns about a callable or a command that cannot be found here (the worker
would fail the step), without importing or running anything; warnings alone exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import sw

WORKFLOW = """\
workflow: tools
steps:
  - {{id: first, kind: code, owner: ci, run: {run_first}}}
  - {{id: second, kind: wait, owner: ci, check: {check}, every: 1m, max_checks: 2}}
"""


def validate(tmp_path: Path, run_first: str, check: str = "{command: [sh, -c, 'true']}") -> tuple[int, list[str]]:
    path = tmp_path / "tools.yaml"
    path.write_text(WORKFLOW.format(run_first=run_first, check=check), encoding="utf-8")
    result = sw("validate", path)
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{path}: OK")
    return result.exit_code, [line.removeprefix(f"{path}: ") for line in lines[1:]]


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable package whose ``__init__`` leaves a marker if it ever runs."""
    root = tmp_path / "site"
    pkg = root / "sw_probe_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n", encoding="utf-8")
    (pkg / "steps.py").write_text("def go(ctx):\n    return {}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(root))
    return tmp_path


def test_found_callables_and_commands_give_no_warning(tmp_path: Path) -> None:
    """A stdlib callable and a program on PATH: OK and nothing else."""
    assert validate(tmp_path, "{callable: 'json:loads'}") == (0, [])


def test_a_missing_module_is_a_warning_and_exit_0(tmp_path: Path) -> None:
    """An unknown module: one warning line saying what the worker would do, exit 0."""
    code, warnings = validate(tmp_path, "{callable: 'sw_no_such_module:go'}")
    assert code == 0
    assert warnings == [
        "warning: step 'first': the callable's module 'sw_no_such_module' is not on this Python's path, "
        "so a worker started like this would fail the step; install it or put its folder on PYTHONPATH"
    ]


def test_a_module_next_to_the_definition_gets_the_pythonpath_hint(tmp_path: Path) -> None:
    """A module file beside the definition: the warning names the PYTHONPATH to use."""
    (tmp_path / "sw_beside.py").write_text("def go(ctx):\n    return {}\n", encoding="utf-8")
    _, [warning] = validate(tmp_path, "{callable: 'sw_beside:go'}")
    assert warning.endswith(f"it is next to the definition: run with PYTHONPATH={tmp_path}")


def test_a_submodule_is_found_without_running_its_package(package: Path) -> None:
    """``pkg.steps`` is looked up on ``pkg``'s search path: ``pkg/__init__.py`` never runs."""
    assert validate(package, "{callable: 'sw_probe_pkg.steps:go'}") == (0, [])
    code, [warning] = validate(package, "{callable: 'sw_probe_pkg.nope:go'}")
    assert code == 0 and "'sw_probe_pkg.nope' is not on this Python's path" in warning
    assert not (package / "ran").exists()


@pytest.mark.parametrize(("run", "says"), [
    ("{command: [sw-no-such-program, --flag]}", "command 'sw-no-such-program' is not on PATH"),
    ("{command: 'sw-no-such-program --flag'}", "command 'sw-no-such-program' is not on PATH"),
    ("{command: [/nonexistent/bin/tool]}", "command '/nonexistent/bin/tool' is not a file here"),
    ("{command: [./scripts/build.sh]}", "command './scripts/build.sh' is not a file here"),
])
def test_a_missing_program_is_a_warning(run: str, says: str, tmp_path: Path) -> None:
    """A program not on PATH, or a path that is not a file: a warning, exit 0."""
    code, [warning] = validate(tmp_path, run)
    assert code == 0 and says in warning


def test_a_relative_program_next_to_the_definition_is_found(tmp_path: Path) -> None:
    """A relative program path is also tried from the definition's folder."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "build.sh").write_text("#!/bin/sh\n", encoding="utf-8")
    assert validate(tmp_path, "{command: [./scripts/build.sh]}") == (0, [])


def test_one_warning_names_every_step_that_needs_the_same_thing(tmp_path: Path) -> None:
    """Two steps needing one missing module: one warning naming both."""
    _, [warning] = validate(tmp_path, "{callable: 'sw_gone:a'}", check="{callable: 'sw_gone:b'}")
    assert warning.startswith("warning: steps 'first', 'second': the callable's module 'sw_gone'")


def test_errors_still_exit_1_and_print_no_warnings(tmp_path: Path) -> None:
    """An invalid file is its errors only, and exit 1."""
    path = tmp_path / "bad.yaml"
    path.write_text("workflow: w\nsteps:\n  - {id: a, kind: code, owner: o, run: {callable: 'sw_gone:a'}, "
                    "timeout: 0}\n", encoding="utf-8")
    result = sw("validate", path)
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{path}: step 'a' timeout: a timeout must be greater than zero (every attempt would time out)"
    ]


def test_a_map_over_a_workflow_name_is_a_warning_and_over_a_missing_file_an_error(tmp_path: Path) -> None:
    """A name is looked up at submit (warned); a file is read now (a missing one fails validate)."""
    by_name = tmp_path / "by-name.yaml"
    by_name.write_text("workflow: many\nsteps:\n  - {id: each, kind: map, owner: ci, workflow: review-one,"
                       " items: input.files}\n", encoding="utf-8")
    result = sw("validate", by_name)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[1] == (
        f"{by_name}: warning: step 'each' maps the workflow named 'review-one', which is looked up in the "
        "database when a task is submitted (name a file to check it now)")
    by_file = tmp_path / "by-file.yaml"
    by_file.write_text(by_name.read_text().replace("review-one,", "review-one.yaml,"), encoding="utf-8")
    result = sw("validate", by_file)
    assert result.exit_code == 1
    assert "step 'each': workflow file 'review-one.yaml' not found" in result.stdout
