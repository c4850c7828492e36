"""A loop worker's result file is read like any input from outside: a regular file, bounded,
through the bounded JSON loader. Whatever a hostile worker leaves there becomes a "no
result" pass with the reason as its cause, never an exception in the loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from statewright.loop.definition import CommandSpec
from statewright.loop.passes import CommandPassRunner, PassResult, PassStatus
from statewright.loop.sources import WorkItem

DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE: dict[str, tuple[str | bytes | None, str, str]] = {
    # case: (file content, or None for the shell command alone; shell command; phrase of the cause)
    "nested 100,000 deep": (DEEP, "", "nested deeper than 64 levels"),
    "NaN tokens": ('{"tokens": NaN}', "", "NaN, which is not JSON"),
    "2 MB of JSON": ('{"note": "' + "x" * 2_000_000 + '"}', "", "the most is 1,048,576"),
    "not an object": ("[1, 2]", "", "must be a JSON object, got list"),
    "a 5,000-digit integer": ('{"tokens": ' + "9" * 5000 + "}", "", "an integer of 5,000 digits"),
    "not UTF-8": (b'{"tokens": "\xff"}', "", "is not UTF-8 text"),
    "artifacts a number": ('{"artifacts": 5}', "", "artifacts must be a list of texts, got 5"),
    "receipts of objects": ('{"receipts": [{"a": 1}]}', "", "receipts must be a list of texts"),
    "negative tokens": ('{"tokens": -500}', "", "tokens must be a number from 0 up, got -500"),
    "money a string": ('{"money_usd": "free"}', "", 'money_usd must be a number from 0 up, got "free"'),
    "a FIFO": (None, 'mkfifo "$STATEWRIGHT_RESULT_FILE"', "the path names a FIFO"),
    "a link to /dev/zero": (None, 'ln -s /dev/zero "$STATEWRIGHT_RESULT_FILE"', "it is a symbolic link"),
    "a directory": (None, 'mkdir "$STATEWRIGHT_RESULT_FILE"', "the path names a directory"),
}


def run_pass(tmp_path: Path, command: str) -> PassResult:
    spec = CommandSpec("worker", ("sh", "-c", command), timeout_seconds=30)
    runner = CommandPassRunner(spec, cwd=tmp_path, state_dir=tmp_path / "state")
    return runner.run_pass(WorkItem("i1", {}, "r1"), "brief", 1)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_result_file_is_a_pass_with_no_result(case: str, tmp_path: Path) -> None:
    """Each hostile result file: the pass returns "no result" with one line saying why."""
    content, command, phrase = HOSTILE[case]
    if content is not None:
        source = tmp_path / "result.src"
        data = content.encode() if isinstance(content, str) else content
        source.write_bytes(data)
        command = f'cp "{source}" "$STATEWRIGHT_RESULT_FILE"'

    result = run_pass(tmp_path, command + "; echo done")

    assert result.status is PassStatus.NO_RESULT
    cause = result.cause
    assert cause.startswith("the pass's result file ($STATEWRIGHT_RESULT_FILE)")
    assert phrase in cause and "\n" not in cause
    assert result.note == "done"


def test_a_plain_result_file_gives_the_costs_and_artifacts(tmp_path: Path) -> None:
    """The ordinary case still works: costs and artifacts are taken from the file; no file
    at all is a returned pass with no costs."""
    result = run_pass(tmp_path, """printf '{"tokens": 7, "money_usd": 0.5, "artifacts": ["a.diff"]}' \
        > "$STATEWRIGHT_RESULT_FILE"; echo done""")
    assert (result.status, result.cost_tokens, result.cost_usd, result.artifacts) == (
        PassStatus.RETURNED, 7, 0.5, ("a.diff",))
    bare = run_pass(tmp_path, "echo done")
    assert (bare.status, bare.cost_tokens, bare.artifacts) == (PassStatus.RETURNED, 0, ())
