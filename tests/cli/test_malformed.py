"""Malformed definitions and inputs through ``validate``, ``submit``, ``run`` and ``loop run``:
one clean error line, no traceback, fast (a subprocess timeout guards the real processes
against a hang), and nothing written to the database, on SQLite and PostgreSQL. Each case
is tallied for the reliability report."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from malformed_cases import (
    BAD_INPUTS,
    BAD_LOOPS,
    BAD_WORKFLOW_BYTES,
    BAD_WORKFLOWS,
    HANG_SECONDS,
    OK_WORKFLOW,
    write_input_files,
)
from statewright import Engine, InputError, workflow_from_yaml
from statewright.store import open_store
from tally import tally

from .support import ok, refusal, snapshot, sw, sw_process

ALL_WORKFLOWS = sorted(BAD_WORKFLOWS) + sorted(BAD_WORKFLOW_BYTES)


def write_case(directory: Path, case: str) -> Path:
    path = directory / "case.yaml"
    if case in BAD_WORKFLOWS:
        path.write_text(BAD_WORKFLOWS[case][0], encoding="utf-8")
    else:
        path.write_bytes(BAD_WORKFLOW_BYTES[case][0])
    return path


def phrase_of(case: str) -> str:
    table: dict[str, tuple[Any, str]] = {**BAD_WORKFLOWS, **BAD_WORKFLOW_BYTES, **BAD_INPUTS, **BAD_LOOPS}
    return table[case][1]


@dataclass(frozen=True)
class Seeded:
    """A database holding one finished task, and a folder of input files."""

    db: Path
    ok_file: Path
    dir: Path


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    """Shared by the module's tests: every one of them checks it leaves the rows unchanged."""
    tmp_path = tmp_path_factory.mktemp("seeded")
    ok_file = tmp_path / "ok.yaml"
    ok_file.write_text(OK_WORKFLOW, encoding="utf-8")
    db = tmp_path / "state.db"
    ok(sw("run", ok_file, "--input", '{"n": 1}', "--db", db))
    write_input_files(tmp_path)
    return Seeded(db, ok_file, tmp_path)


def timed(*args: str | Path) -> tuple[Result, float]:
    start = time.monotonic()
    result = sw(*args)
    return result, time.monotonic() - start


@pytest.mark.parametrize("case", ALL_WORKFLOWS)
def test_validate_prints_one_line_per_listed_case(case: str, tmp_path: Path) -> None:
    """``validate`` exits 1 with one ``FILE: problem`` line, fast."""
    path = write_case(tmp_path, case)

    result, seconds = timed("validate", path)

    clean = result.exception is None or isinstance(result.exception, SystemExit)
    tally("malformed", f"validate: {case}", result="hang" if seconds > HANG_SECONDS else
          "clean_error" if clean and result.exit_code == 1 else "traceback")
    assert clean, repr(result.exception)
    assert result.exit_code == 1
    [line] = result.stdout.splitlines()
    assert line.startswith(f"{path}: ") and phrase_of(case) in line
    assert result.stderr == ""
    assert seconds < HANG_SECONDS


@pytest.mark.parametrize("command", ["submit", "run"])
@pytest.mark.parametrize("case", ALL_WORKFLOWS)
def test_submit_and_run_refuse_a_listed_definition_and_write_nothing(case: str, command: str, seeded: Seeded) -> None:
    """``submit``/``run`` of a malformed file: one ``error:`` line; every row unchanged."""
    path = write_case(seeded.dir, case)
    rows = snapshot(seeded.db)

    result, seconds = timed(command, path, "--input", '{"n": 2}', "--db", seeded.db)

    line = refusal(result)
    tally("malformed", f"{command}: {case}", result="hang" if seconds > HANG_SECONDS else "clean_error")
    assert phrase_of(case) in line
    assert seconds < HANG_SECONDS
    assert snapshot(seeded.db) == rows


@pytest.mark.parametrize("command", ["submit", "run"])
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_submit_and_run_refuse_a_listed_input_and_write_nothing(case: str, command: str, seeded: Seeded) -> None:
    """A malformed ``--input`` (inline or ``@file``): one ``error:`` line; rows unchanged."""
    arg = BAD_INPUTS[case][0]
    arg = f"@{seeded.dir / arg[1:]}" if arg.startswith("@") else arg
    rows = snapshot(seeded.db)

    result, seconds = timed(command, seeded.ok_file, "--input", arg, "--db", seeded.db)

    line = refusal(result)
    tally("malformed", f"{command}: {case}", result="hang" if seconds > HANG_SECONDS else "clean_error")
    assert line.startswith(("error: --input", "error: input")) and phrase_of(case) in line
    assert seconds < HANG_SECONDS
    assert snapshot(seeded.db) == rows


@pytest.mark.parametrize("case", ["input: NaN", "input: workspace with a NUL", "input: fails the input_schema"])
def test_a_refused_input_creates_no_database(case: str, seeded: Seeded, tmp_path: Path) -> None:
    """The input is checked against the workflow before a database is opened or created."""
    fresh = tmp_path / "fresh.db"
    refusal(sw("submit", seeded.ok_file, "--input", BAD_INPUTS[case][0], "--db", fresh))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", sorted(BAD_LOOPS))
def test_loop_run_refuses_a_listed_loop_file_and_creates_nothing(case: str, tmp_path: Path) -> None:
    """``loop run`` of a malformed loop file: one ``error:`` line, no database created."""
    path = tmp_path / "loop.yaml"
    path.write_text(BAD_LOOPS[case][0], encoding="utf-8")
    db = tmp_path / "loop.db"

    result, seconds = timed("loop", "run", path, "--db", db)

    line = refusal(result)
    tally("malformed", f"loop run: {case}", result="hang" if seconds > HANG_SECONDS else "clean_error")
    assert phrase_of(case) in line
    assert seconds < HANG_SECONDS
    assert not db.exists()


# (arguments with {dir}, {ok}, {db} filled in, the case whose phrase the line must hold)
PROCESS_CASES: dict[str, tuple[list[str], str]] = {
    "validate: YAML alias bomb (9^9 expansions)": (["validate", "{dir}/bomb.yaml"], "YAML alias bomb (9^9 expansions)"),
    "submit: YAML nested 3,000 deep (flow)": (["submit", "{dir}/deep.yaml", "--db", "{db}"],
                                              "YAML nested 3,000 deep (flow)"),
    "run: input: 5,000-digit integer": (["run", "{ok}", "--input", BAD_INPUTS["input: 5,000-digit integer"][0],
                                         "--db", "{db}"], "input: 5,000-digit integer"),
    "submit: input: lone surrogate escape": (["submit", "{ok}", "--input", '{"s": "\\ud800"}', "--db", "{db}"],
                                             "input: lone surrogate escape"),
    "submit: input file: non-UTF-8": (["submit", "{ok}", "--input", "@{dir}/latin1.json", "--db", "{db}"],
                                      "input file: non-UTF-8"),
}


@pytest.mark.parametrize("case", sorted(PROCESS_CASES))
def test_a_real_process_refuses_without_a_traceback_or_a_hang(case: str, seeded: Seeded) -> None:
    """As a real process: exit 1, one stderr (or validate's stdout) line, no traceback; the
    subprocess timeout is the hang guard."""
    (seeded.dir / "bomb.yaml").write_text(BAD_WORKFLOWS["YAML alias bomb (9^9 expansions)"][0], encoding="utf-8")
    (seeded.dir / "deep.yaml").write_text(BAD_WORKFLOWS["YAML nested 3,000 deep (flow)"][0], encoding="utf-8")
    args, listed = PROCESS_CASES[case]
    filled = [a.replace("{dir}", str(seeded.dir)).replace("{ok}", str(seeded.ok_file)).replace("{db}", str(seeded.db))
              for a in args]
    rows = snapshot(seeded.db)

    result = sw_process(*filled)

    out = result.stdout if args[0] == "validate" else result.stderr
    clean = result.returncode == 1 and "Traceback" not in result.stderr + result.stdout
    tally("malformed", f"process {case}", result="clean_error" if clean else "traceback")
    assert result.returncode == 1
    [line] = out.splitlines()
    assert phrase_of(listed) in line and "Traceback" not in result.stderr
    assert snapshot(seeded.db) == rows


BAD_PY_INPUTS: dict[str, tuple[dict[str, Any], str]] = {
    "engine input: NaN": ({"n": math.nan}, "nan is not a finite number"),
    "engine input: lone surrogate": ({"s": "\udc80"}, "a lone surrogate"),
    "engine input: 2^64": ({"n": 2**64}, "an integer of 20 digits"),
    "engine input: a set": ({"x": {1}}, "a set, which is not a JSON value"),
    "engine input: bytes": ({"x": b"raw"}, "a bytes, which is not a JSON value"),
}


def _self_containing() -> dict[str, Any]:
    data: dict[str, Any] = {}
    data["x"] = data
    return data


def _rows(url: str) -> int:
    store = open_store(url)
    try:
        return len(store.list_tasks())
    finally:
        store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "backend.db")
        return
    from store.backends import fresh_pg_schema

    with fresh_pg_schema("swin") as (url, _):
        yield url


def test_every_listed_case_writes_nothing_on_either_backend(store_url: str, seeded: Seeded) -> None:
    """Against a live store of each backend: every listed bad file and input is refused by
    ``submit``, and by the Python API, and the store still holds exactly the one task."""
    engine = Engine(open_store(store_url, create=True))
    try:
        engine.submit(workflow_from_yaml(OK_WORKFLOW), {"n": 1})
        wf = workflow_from_yaml(OK_WORKFLOW)
        cases = {**BAD_PY_INPUTS, "engine input: contains itself": (_self_containing(), "nested deeper than 64")}
        for case, (value, phrase) in cases.items():
            with pytest.raises(InputError, match=phrase):
                engine.submit(wf, value)
            tally("malformed", f"{case} ({store_url.split(':')[0]})", result="clean_error")
        with pytest.raises(InputError, match="input must be a mapping"):
            engine.submit(wf, [("n", 1)])  # type: ignore[arg-type]
    finally:
        engine.close()
    for case in ALL_WORKFLOWS:
        refusal(sw("submit", write_case(seeded.dir, case), "--db", store_url))
    for arg, _ in BAD_INPUTS.values():
        arg = f"@{seeded.dir / arg[1:]}" if arg.startswith("@") else arg
        refusal(sw("submit", seeded.ok_file, "--input", arg, "--db", store_url))
    assert _rows(store_url) == 1
