"""Through the Python loader: every reported crash of a malformed definition is now one
DefinitionError line naming the file and the bound, raised fast (the alias bomb well
under a second), and the cases that used to crash but are valid now load."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from malformed_cases import BAD_LOOPS, BAD_WORKFLOW_BYTES, BAD_WORKFLOWS, GOOD_WORKFLOWS, HANG_SECONDS
from statewright import DefinitionError, load_workflow, workflow_from_dict, workflow_from_yaml
from statewright._json_limits import check_json_value
from statewright.definition.durations import parse_duration_seconds
from statewright.definition.limits import MAX_DURATION_SECONDS
from statewright.definition.model import RetryPolicy
from statewright.loop.definition import load_loop, parse_loop
from statewright.loop.errors import LoopDefinitionError


def _refused(fn: Callable[..., object], *args: object) -> tuple[list[str], float]:
    """The problems of the DefinitionError ``fn(*args)`` raises, and how long it took."""
    start = time.monotonic()
    with pytest.raises(DefinitionError) as info:
        fn(*args)
    return info.value.problems, time.monotonic() - start


@pytest.mark.parametrize("case", sorted(BAD_WORKFLOWS))
def test_a_malformed_workflow_is_one_problem_raised_fast(case: str, tmp_path: Path) -> None:
    """From a file: one problem line with the expected words, in well under the hang bound."""
    text, phrase = BAD_WORKFLOWS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")

    problems, seconds = _refused(load_workflow, path)

    assert len(problems) == 1, problems
    assert phrase in problems[0]
    assert seconds < HANG_SECONDS
    with pytest.raises(DefinitionError, match=f"^{path}: "):
        load_workflow(path)


@pytest.mark.parametrize("case", sorted(BAD_WORKFLOW_BYTES))
def test_a_file_that_is_not_utf8_or_too_big_is_refused_unread(case: str, tmp_path: Path) -> None:
    """Bytes that are not UTF-8, or more than the size bound: one line, no YAML parsed."""
    data, phrase = BAD_WORKFLOW_BYTES[case]
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)

    problems, _ = _refused(load_workflow, path)

    assert problems == [problems[0]] and phrase in problems[0]


def test_the_alias_bomb_is_refused_in_well_under_a_second() -> None:
    """The 9^9 alias bomb that hung validate for 30 s is counted and refused while composing."""
    text, _ = BAD_WORKFLOWS["YAML alias bomb (9^9 expansions)"]
    _, seconds = _refused(workflow_from_yaml, text)
    assert seconds < 1.0


@pytest.mark.parametrize("case", sorted(GOOD_WORKFLOWS))
def test_what_used_to_crash_and_is_valid_loads(case: str) -> None:
    """``outcome: true`` with outcomes loads with the outcome names pinned; aliases still work."""
    wf = workflow_from_yaml(GOOD_WORKFLOWS[case])
    for step in wf.steps:
        if step.outcomes:
            assert step.output_schema is not None
            assert step.output_schema["properties"]["outcome"] == {"enum": ["done"]}


@pytest.mark.parametrize("case", sorted(BAD_LOOPS))
def test_a_malformed_loop_file_is_refused_the_same_way(case: str, tmp_path: Path) -> None:
    """Loop files go through the same bounded loader and the same limits."""
    text, phrase = BAD_LOOPS[case]
    path = tmp_path / "loop.yaml"
    path.write_text(text, encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(LoopDefinitionError) as info:
        load_loop(path)
    assert time.monotonic() - start < HANG_SECONDS
    assert any(phrase in p for p in info.value.problems), info.value.problems


def test_a_python_dict_that_contains_itself_is_refused() -> None:
    """The builder's path: a mapping that contains itself is a depth problem, not a RecursionError."""
    data: dict[str, object] = {"workflow": "w", "steps": []}
    data["description"] = data
    problems, _ = _refused(workflow_from_dict, data)
    [problem] = problems
    assert problem.startswith("at description.description.")
    assert problem.endswith(": nested deeper than 64 levels (or a mapping that contains itself)")
    loop: dict[str, object] = {"loop": "x"}
    loop["source"] = loop
    with pytest.raises(LoopDefinitionError, match="nested deeper than 64 levels"):
        parse_loop(loop)


def test_a_shared_python_value_is_counted_as_often_as_it_appears() -> None:
    """A dict aliased 10 times per level, 6 levels deep, is a million values: refused by count."""
    value: object = "x"
    for _ in range(6):
        value = [value] * 10
    problems, seconds = _refused(workflow_from_dict, {"workflow": "w", "description": value, "steps": []})
    assert problems == ["more than 100,000 values in all; the most is 100,000"]
    assert seconds < HANG_SECONDS


@pytest.mark.parametrize("name", ["w\n", "w ", "\nw", "w\r", "w\t", "w\x00", "wé", "", "w:x", "-w"])
def test_names_are_matched_whole(name: str) -> None:
    """A trailing newline (which ``$`` lets through) or any other odd character is refused
    in workflow names, step ids, owners, roles and outcome names alike."""
    step = {"id": "a", "kind": "human", "owner": "o", "approvers": {"role": "r"}}
    outcome = {"id": "b", "kind": "code", "owner": "o", "run": {"command": ["sh"]},
               "output_schema": {"type": "object", "properties": {"outcome": {"type": "string"}}},
               "outcomes": {name: "pass"}}
    for says, data in {
        "'workflow' must be a name": {"workflow": name, "steps": [step]},
        "'id' must be a name": {"workflow": "w", "steps": [{**step, "id": name}]},
        "'owner'": {"workflow": "w", "steps": [{**step, "owner": name or "\n"}]},
        "approvers must be {role: ROLE": {"workflow": "w", "steps": [{**step, "approvers": {"role": name}}]},
        "outcome name": {"workflow": "w", "steps": [step, outcome]},
    }.items():
        with pytest.raises(DefinitionError, match=re.escape("a NUL character" if "\x00" in name else says)):
            workflow_from_dict(data)


def test_durations_are_finite_and_at_most_366_days() -> None:
    """Every duration form is bounded: numbers, unit strings, huge integers and NaN."""
    assert parse_duration_seconds("366d") == MAX_DURATION_SECONDS
    for bad in ("367d", "8785h", 10**400, float("inf"), float("nan"), "9" * 400 + "s", -1, True):
        with pytest.raises(ValueError, match="duration"):
            parse_duration_seconds(bad)


def test_backoff_never_overflows() -> None:
    """The largest retry policy the loader allows computes its backoff without OverflowError."""
    policy = RetryPolicy(max_attempts=1000, initial_backoff_seconds=1.0, max_backoff_seconds=60.0, multiplier=10.0)
    assert policy.backoff_seconds(999, 0.0) == 30.0
    assert math.isfinite(policy.backoff_seconds(1000, 0.99))


@pytest.mark.parametrize(("value", "phrase"), [
    ({"a": float("nan")}, "at a: nan is not a finite number"),
    ({"a": ["x", "\ud800"]}, "at a[1]: a lone surrogate \\ud800"),
    ({"\udfff": 1}, "at $: a key holds a lone surrogate"),
    ({"a": 2**63}, "at a: an integer of 19 digits"),
    ({"a": {1, 2}}, "at a: a set, which is not a JSON value"),
    ({1: "a"}, "at $: a key of type int"),
])
def test_check_json_value_names_the_place_and_the_problem(value: object, phrase: str) -> None:
    """The shared checker (``statewright._json_limits``) says where and what, iteratively."""
    problem = check_json_value(value)
    assert problem is not None and phrase in problem


def test_check_json_value_passes_plain_json() -> None:
    """Plain JSON at the depth bound, with the largest integer, passes."""
    nested: object = 1
    for _ in range(60):
        nested = [nested]
    assert check_json_value({"a": [1, 2.5, "x", None, True, {"b": nested}]} | {"n": -(2**63 - 1)}) is None


def test_the_readme_states_the_bounds_the_code_enforces() -> None:
    """Each named bound appears, with its value, in the README's Limits section."""
    from statewright._json_limits import MAX_INPUT_BYTES, MAX_JSON_INT
    from statewright.definition import limits

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Limits"):readme.index("## Command line")]
    assert f"{limits.MAX_DEFINITION_BYTES // 1024} KiB" in section
    assert f"{MAX_INPUT_BYTES // 1_048_576} MiB" in section
    for value in (limits.MAX_YAML_NODES, limits.MAX_YAML_EXPANDED_CHARS, limits.MAX_DEFINITION_STRING_CHARS,
                  limits.MAX_VERSION, limits.MAX_ATTEMPTS, limits.MAX_CHECKS, MAX_JSON_INT):
        assert f"{value:,}" in section
    for value in (limits.MAX_DEFINITION_DEPTH, limits.MAX_STEPS, limits.MAX_SCHEMA_REF_CHAIN,
                  limits.MAX_DURATION_SECONDS // 86_400, int(limits.MAX_RETRY_MULTIPLIER)):
        assert f" {value} " in section or f" {value}:" in section or f"{value} levels" in section


def test_the_pure_python_loader_keeps_the_same_bounds(tmp_path: Path) -> None:
    """Without libyaml (forced in a fresh process) the counting composer refuses the same files."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BAD_WORKFLOWS["YAML alias bomb (9^9 expansions)"][0], encoding="utf-8")
    deep = tmp_path / "deep.yaml"
    deep.write_text(BAD_WORKFLOWS["YAML nested 100 deep (block)"][0], encoding="utf-8")
    code = (
        "import sys; sys.modules['yaml._yaml'] = None\n"
        "from statewright import DefinitionError, load_workflow\n"
        "from statewright.definition._yaml import _Loader\n"
        "assert 'CParser' not in [c.__name__ for c in _Loader.__mro__]\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        load_workflow(path)\n"
        "    except DefinitionError as exc:\n"
        "        print(exc.problems[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(bomb), str(deep)], capture_output=True, text=True,
                          timeout=60, check=True)
    bomb_line, deep_line = done.stdout.splitlines()
    assert "once aliases are expanded" in bomb_line
    assert "nested deeper than 64 levels" in deep_line
