"""Malformed workflow files, loop files and task inputs, shared by the loader tests and the
command-line tests: each named case with the phrase its one error line must contain.

The named cases reproduce what was reported (an alias bomb, deep YAML, ``outcome: true``,
an unresolvable ``$ref``, infinite durations, a 24-digit version, a 5,000-digit integer, a
lone surrogate, a non-UTF-8 ``@file``, names with a newline) and their near relatives.
``generated_definitions()`` and ``generated_inputs()`` add deterministic mutations of the
examples for the reliability campaign.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HANG_SECONDS = 10.0  # a case slower than this is counted as a hang (a loaded CI machine stays well under)

OK_WORKFLOW = """\
workflow: ok
input_schema:
  type: object
  properties: {n: {type: integer}, s: {type: string}, x: {}}
steps:
  - {id: build, kind: code, owner: ci, run: {command: [sh, -c, "echo built"]}}
"""


def _step(extra: str) -> str:
    return f"workflow: w\nsteps:\n  - {{id: a, kind: code, owner: o, run: {{command: [sh]}}{extra}}}\n"


def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\nworkflow: w\ndescription: *a{levels - 1}\nsteps: []\n"


def _block_nesting(depth: int) -> str:
    return "workflow: w\ndescription:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(depth)) \
        + "  " * (depth + 1) + "leaf\n"


OUTCOME_SCHEMA = "output_schema: {type: object, properties: {outcome: %s}}, outcomes: {done: pass}"

# name -> (YAML text, phrase in the error line)
BAD_WORKFLOWS: dict[str, tuple[str, str]] = {
    "YAML alias bomb (9^9 expansions)": (_alias_bomb(), "once aliases are expanded"),
    "YAML alias bomb of long strings": (
        "s: &s " + "x" * 60_000 + "\nb: &b [" + ", ".join(["*s"] * 80) + "]\nworkflow: w\nsteps: *b\n",
        "characters of text once aliases are expanded",
    ),
    "recursive YAML alias": ("a: &a [1, *a]\nworkflow: w\nsteps: *a\n", "recursive YAML is not allowed"),
    "YAML nested 3,000 deep (flow)": ("workflow: w\ndescription: " + "[" * 3000 + "]" * 3000 + "\n", "nest"),
    "YAML nested 100 deep (flow)": ("workflow: w\ndescription: " + "[" * 100 + "]" * 100 + "\n",
                                    "nested deeper than 64 levels"),
    "YAML nested 100 deep (block)": (_block_nesting(100), "nested deeper than 64 levels"),
    "aliases nesting past the bound": (
        "d: &d " + "[" * 40 + "]" * 40 + "\nworkflow: w\ndescription: " + "[" * 30 + "*d" + "]" * 30 + "\n",
        "nested deeper than 64 levels",
    ),
    "outcome property false with outcomes": (_step(", " + OUTCOME_SCHEMA % "false"),
                                             "'outcome' property must be a schema"),
    "outcome property of type integer": (_step(", " + OUTCOME_SCHEMA % "{type: integer}"),
                                         "outcome names are strings"),
    "unresolvable $ref in input_schema": (
        "workflow: w\ninput_schema: {type: object, properties: {a: {$ref: '#/$defs/nope'}}}\n"
        "steps: [{id: a, kind: code, owner: o, run: {command: [sh]}}]\n",
        "does not resolve within the schema",
    ),
    "remote $ref in output_schema": (
        _step(", output_schema: {type: object, properties: {a: {$ref: 'https://example.com/s.json'}}}"),
        "does not resolve within the schema",
    ),
    "$ref cycle in input_schema": (
        "workflow: w\ninput_schema: {$defs: {a: {$ref: '#/$defs/a'}}, type: object, "
        "properties: {x: {$ref: '#/$defs/a'}}}\nsteps: [{id: a, kind: code, owner: o, run: {command: [sh]}}]\n",
        "leads back to itself",
    ),
    "expires_after: .inf": (
        "workflow: w\nsteps:\n  - {id: a, kind: human, owner: o, approvers: {role: r}, expires_after: .inf}\n",
        "at steps[0].expires_after: inf is not a finite number",
    ),
    "expires_after: 400d": (
        "workflow: w\nsteps:\n  - {id: a, kind: human, owner: o, approvers: {role: r}, expires_after: 400d}\n",
        "of at most 366d",
    ),
    "version: 1e23 written out (24 digits)": ("version: 100000000000000000000000\n" + _step(""),
                                               "at version: an integer of 24 digits"),
    "version: 1.0e+23 (a float)": ("version: 1.0e+23\n" + _step(""), "'version' must be a whole number"),
    "version: 2^31": ("version: 2147483648\n" + _step(""), "'version' must be a whole number from 1 to 2147483647"),
    "every: .inf": (
        "workflow: w\nsteps:\n  - {id: a, kind: wait, owner: o, check: {command: [sh]}, every: .inf, max_checks: 2}\n",
        "at steps[0].every: inf is not a finite number",
    ),
    "every: 1.0e+17": (
        "workflow: w\nsteps:\n  - {id: a, kind: wait, owner: o, check: {command: [sh]}, every: 1.0e+17, "
        "max_checks: 2}\n",
        "of at most 366d",
    ),
    "retry.initial_backoff: .inf": (_step(", retry: {initial_backoff: .inf}"),
                                    "retry.initial_backoff: inf is not a finite number"),
    "retry.multiplier: 1e308": (_step(", retry: {multiplier: 1.0e+308}"),
                                "retry.multiplier must be a number from 1 to 10"),
    "retry.max_attempts: 10^9": (_step(", retry: {max_attempts: 1000000000}"),
                                 "retry.max_attempts must be a whole number from 1 to 1000"),
    "retry.max_deliveries: 0": (_step(", retry: {max_deliveries: 0}"),
                                "retry.max_deliveries must be a whole number from 1 to 100"),
    "retry.max_deliveries: true": (_step(", retry: {max_deliveries: true}"),
                                   "retry.max_deliveries must be a whole number from 1 to 100"),
    "timeout: .nan": (_step(", timeout: .nan"), "at steps[0].timeout: nan is not a finite number"),
    "timeout: 0": (_step(", timeout: 0"), "a timeout must be greater than zero"),
    "max_checks: 10^12": (
        "workflow: w\nsteps:\n  - {id: a, kind: wait, owner: o, check: {command: [sh]}, every: 1m, "
        "max_checks: 1000000000000}\n",
        "max_checks must be a whole number from 1 to 100000",
    ),
    "5,000-digit integer in YAML": ("workflow: w\nversion: " + "9" * 5000 + "\nsteps: []\n",
                                    "an integer written with 5,000 characters"),
    "lone surrogate escape in YAML": (_step(', description: "\\ud800"'), "Unicode"),
    "NUL in a command": (
        'workflow: w\nsteps:\n  - {id: a, kind: code, owner: o, run: {command: ["sh\\0"]}}\n', "a NUL character",
    ),
    "step id with a trailing newline": (
        'workflow: w\nsteps:\n  - {id: "a\\n", kind: code, owner: o, run: {command: [sh]}}\n',
        "'id' must be a name of 1-64 letters",
    ),
    "workflow name with a trailing newline": ('workflow: "w\\n"\nsteps:\n  - {id: a, kind: code, owner: o, '
                                              'run: {command: [sh]}}\n', "'workflow' must be a name"),
    "owner with a trailing newline": ('workflow: w\nsteps:\n  - {id: a, kind: code, owner: "o\\n", '
                                      'run: {command: [sh]}}\n', "'owner' must be a team or person"),
    "approver role with a trailing newline": (
        'workflow: w\nsteps:\n  - {id: a, kind: human, owner: o, approvers: {role: "r\\n"}}\n',
        "approvers must be {role: ROLE",
    ),
    "outcome name with a newline": (
        _step(', output_schema: {type: object, properties: {outcome: {type: string}}}, outcomes: {"done\\n": pass}'),
        "outcome name 'done\\n' must be a name",
    ),
    "callable with a trailing newline": (
        'workflow: w\nsteps:\n  - {id: a, kind: code, owner: o, run: {callable: "mod:fn\\n"}}\n',
        "'callable' must look like 'package.module:function'",
    ),
    "api_key_env with a trailing newline": (
        'workflow: w\nsteps:\n  - {id: a, kind: ai, owner: o, agent: {type: openai, base_url: "http://127.0.0.1:1/v1", '
        'model: m, api_key_env: "KEY\\n"}}\n',
        "'api_key_env' must name an environment variable",
    ),
    "steps written twice": (_step("") + "steps: []\n", "the key 'steps' appears twice in one mapping"),
    "keys 1 and '1' in one mapping": ("workflow: w\n1: x\n'1': y\nsteps: []\n", "two keys read as the same name"),
    "step id of 65 characters": (_step("").replace("id: a,", "id: " + "a" * 65 + ","), "'id' must be a name"),
    "201 steps": ("workflow: w\nsteps:\n" + "".join(
        f"  - {{id: s{i}, kind: code, owner: o, run: {{command: [sh]}}}}\n" for i in range(201)),
        "201 steps; a workflow may have at most 200"),
    "a 100,001-character string": (_step(", description: " + "x" * 100_001), "a string of 100,001 characters"),
}

# Files that are not even text, or too big: name -> (bytes, phrase).
BAD_WORKFLOW_BYTES: dict[str, tuple[bytes, str]] = {
    "non-UTF-8 workflow file": (b"workflow: w\ndescription: caf\xe9\nsteps: []\n", "not UTF-8 text: byte 0xe9"),
    "workflow file over 512 KiB": (b"workflow: w\n#" + b"x" * 524_288 + b"\n", "the file is over 524,288 bytes"),
}

# Cases that used to crash and now load: name -> YAML text.
GOOD_WORKFLOWS: dict[str, str] = {
    "outcome property true with outcomes": _step(", " + OUTCOME_SCHEMA % "true"),
    "an agent spec reused through an alias": (
        "workflow: w\nsteps:\n  - {id: a, kind: code, owner: o, run: &r {command: [sh]}}\n"
        "  - {id: b, kind: code, owner: o, run: *r}\n"
    ),
}

LOOP = (EXAMPLES / "loops" / "fix-backlog" / "loop.yaml").read_text(encoding="utf-8")

BAD_LOOPS: dict[str, tuple[str, str]] = {
    "loop: alias bomb": (_alias_bomb().replace("steps: []\n", ""), "once aliases are expanded"),
    "loop: name with a trailing newline": (LOOP.replace("loop: fix-backlog", 'loop: "fix-backlog\\n"'),
                                           "expected a name"),
    "loop: wall_time .inf": (LOOP.replace("wall_time: 30m", "wall_time: .inf"), "inf is not a finite number"),
    "loop: passes 10^30": (LOOP.replace("passes: 10", "passes: 1000000000000000000000000000000"),
                           "an integer of 31 digits"),
    "loop: gate role with a newline": (LOOP + 'gate: {role: "maintainer\\n"}\n', "gate.role"),
    "loop: nested 3,000 deep": (LOOP + "extra: " + "[" * 3000 + "]" * 3000 + "\n", "nest"),
}

# --input values: name -> (argument, phrase). Arguments starting with @ name a file written
# from INPUT_FILES under the test's directory.
BAD_INPUTS: dict[str, tuple[str, str]] = {
    "input: 5,000-digit integer": ('{"n": ' + "1" * 5000 + "}", "an integer of 5,000 digits"),
    "input: 20-digit integer": ('{"n": 99999999999999999999}', "an integer of 20 digits"),
    "input: lone surrogate escape": ('{"s": "\\ud800"}', "a lone surrogate \\ud800"),
    "input: NaN": ('{"n": NaN}', "NaN, which is not JSON"),
    "input: Infinity": ('{"n": -Infinity}', "-Infinity, which is not JSON"),
    "input: 1e400": ('{"n": 1e400}', "too large for a float"),
    "input: nested 100 deep": ('{"x": ' + "[" * 100 + "]" * 100 + "}", "nested deeper than 64 levels"),
    "input: nested 100,000 deep": ('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 64 levels"),
    "input: top level is a list": ("[1, 2]", "must be a JSON object, got list"),
    "input: top level is null": ("null", "must be a JSON object, got NoneType"),
    "input: truncated": ('{"n": 1', "is not valid JSON"),
    "input: over 1 MiB": ('{"s": "' + "x" * 1_048_600 + '"}', "the most is 1,048,576"),
    "input: workspace with a NUL": ('{"workspace": "ws\\u0000x"}', "input 'workspace' must be a path"),
    "input: repo that is not text": ('{"repo": 5}', "input 'repo' must be a path"),
    "input: fails the input_schema": ('{"n": "one"}', "input does not match ok's input_schema"),
    "input file: non-UTF-8": ("@latin1.json", "is not UTF-8 text: byte 0xe9"),
    "input file: UTF-16": ("@utf16.json", "is not UTF-8 text"),
    "input file: lone surrogate escape": ("@surrogate.json", "a lone surrogate"),
    "input file: 5,000-digit integer": ("@digits.json", "an integer of 5,000 digits"),
    "input file: a directory": ("@folder", "the path names a directory; give a regular file"),
    "input file: missing": ("@missing.json", "cannot read the file"),
}

INPUT_FILES: dict[str, bytes] = {
    "latin1.json": '{"s": "café"}'.encode("latin-1"),
    "utf16.json": '{"n": 1}'.encode("utf-16"),
    "surrogate.json": b'{"s": "\\udfff"}',
    "digits.json": b'{"n": ' + b"7" * 5000 + b"}",
}


def write_input_files(directory: Path) -> None:
    for name, data in INPUT_FILES.items():
        (directory / name).write_bytes(data)
    (directory / "folder").mkdir(exist_ok=True)


# --- generated cases for the campaign ---------------------------------------------------

_ODD_VALUES: list[tuple[str, Any]] = [
    ("null", None), ("true", True), ("-1", -1), ("0", 0), ("10^30", 10**30), ("-10^30", -(10**30)),
    ("inf", float("inf")), ("nan", float("nan")), ("1e308", 1e308), ("empty string", ""),
    ("a list", [1, "two"]), ("a mapping", {"k": "v"}), ("a 200,000-char string", "x" * 200_000),
    ("a lone surrogate", "\udc80"), ("a NUL", "a\x00b"), ("a newline name", "name\n"),
    ("an RTL override", "abc\u202edef"), ("a zero-width space", "ab\u200bc"),
    ("an emoji", "\U0001f600"), ("nested 80 deep", None), ("a 5,000-digit number", None),
]
_NAME_FIELDS = ("id", "owner", "workflow", "role", "loop", "name")


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _odd(label: str, value: Any) -> Any:
    if label == "nested 80 deep":
        return _deep(80)
    if label == "a 5,000-digit number":
        return int("9" * 1000) ** 5  # built without parsing a string
    return copy.deepcopy(value)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield (*prefix, i)
            yield from _paths(child, (*prefix, i))


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def _drop(data: Any, path: tuple[Any, ...]) -> None:
    for part in path[:-1]:
        data = data[part]
    del data[path[-1]]


def _show(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _sources() -> list[tuple[str, str, Any]]:
    files = sorted(EXAMPLES.glob("*.yaml")) + sorted(EXAMPLES.glob("*/*.yaml"))
    out = []
    for p in files:
        text = p.read_text(encoding="utf-8")
        out.append((p.name, text, yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))))
    return out


def generated_definitions(count: int = 240, seed: int = 10) -> list[tuple[str, str, Any]]:
    """``count`` deterministic mutations of the example workflows: (case name, kind, payload)
    where kind is "dict" (a mapping for the Python loader) or "yaml" (text for the YAML one)."""
    rng = random.Random(seed)
    sources = _sources()
    out: list[tuple[str, str, Any]] = []
    text_ops = ("truncate", "tab indent", "unknown tag", "python tag", "duplicate key anchor",
                "binary scalar", "inject alias bomb", "inject deep flow", "swap colon", "bom and nul")
    while len(out) < count:
        name, text, data = sources[len(out) % len(sources)]
        paths = list(_paths(data))
        op = rng.random()
        if op < 0.25:
            path = rng.choice(paths)
            mutated = copy.deepcopy(data)
            _drop(mutated, path)
            out.append((f"{name}: drop {_show(path)}", "dict", mutated))
        elif op < 0.7:
            path = rng.choice(paths)
            label, value = rng.choice(_ODD_VALUES)
            mutated = copy.deepcopy(data)
            _set(mutated, path, _odd(label, value))
            out.append((f"{name}: {_show(path)} = {label}", "dict", mutated))
        elif op < 0.8:
            candidates = [p for p in paths if p[-1] in _NAME_FIELDS] or paths
            path = rng.choice(candidates)
            odd = rng.choice(["x\n", " x", "x y", "", "é", "a" * 65, "x\x00", "x\u200b", "-x", "x:y"])
            mutated = copy.deepcopy(data)
            _set(mutated, path, odd)
            out.append((f"{name}: name {_show(path)} = {odd!r}", "dict", mutated))
        else:
            which = rng.choice(text_ops)
            out.append((f"{name}: text {which}", "yaml", _text_mutation(text, which, rng)))
    return out


def _text_mutation(text: str, which: str, rng: random.Random) -> str:
    if which == "truncate":
        return text[: rng.randrange(1, len(text))]
    if which == "tab indent":
        return text.replace("\n  ", "\n\t", 1)
    if which == "unknown tag":
        return text.replace("steps:", "steps: !custom", 1)
    if which == "python tag":
        return text.replace("workflow:", "evil: !!python/object/apply:os.system [echo hi]\nworkflow:", 1)
    if which == "duplicate key anchor":
        return "x: &a 1\ny: &a 2\n" + text
    if which == "binary scalar":
        return text.replace("description:", "description: !!binary aGVsbG8=\nold_description:", 1)
    if which == "inject alias bomb":
        return _alias_bomb(rng.randrange(5, 12)).replace("workflow: w\n", "").replace("steps: []\n", "") + text
    if which == "inject deep flow":
        depth = rng.choice([65, 500, 5000])
        return text + "\nextra: " + "{a: " * depth + "1" + "}" * depth + "\n"
    if which == "swap colon":
        return text.replace(":", " =", 1)
    return "\ufeff" + text.replace("\n", "\n\x00", 1)


def generated_inputs(count: int = 80, seed: int = 11) -> list[tuple[str, str]]:
    """``count`` deterministic odd ``--input`` texts: (case name, text)."""
    rng = random.Random(seed)
    base = {"n": 1, "s": "text"}  # the odd value goes under "x", which the schema leaves open
    out: list[tuple[str, str]] = []
    numbers = ["1" + "0" * 18, "9" * 19, "-" + "9" * 19, "1" * 4301, "1e309", "-1e309", "1.5e-400",
               "0.1", "1E+2", "-0", "NaN", "Infinity", "1" * 30 + ".5"]
    strings = ['"\\ud800"', '"\\udfff\\ud800"', '"\\ud83d\\ude00"', '"\\u0000"', '"\\u202e"',
               '"' + "y" * 5000 + '"', '"tab\\tnewline\\n"', '"\\x41"', "'single'"]
    while len(out) < count:
        op = rng.random()
        if op < 0.3:
            num = rng.choice(numbers)
            shown = num if len(num) <= 24 else num[:21] + "..."
            out.append((f"input: number {shown}", json.dumps(base)[:-1] + f', "x": {num}}}'))
        elif op < 0.55:
            s = rng.choice(strings)
            out.append((f"input: string {s[:24]}", json.dumps(base)[:-1] + f', "x": {s}}}'))
        elif op < 0.7:
            depth = rng.choice([63, 64, 65, 200, 3000])
            opener, closer = rng.choice([("[", "]"), ('{"k":', "}")])
            out.append((f"input: nested {depth} deep with {opener}",
                        '{"x": ' + opener * depth + "1" + closer * depth + "}"))
        elif op < 0.85:
            text = json.dumps(base)
            cut = rng.randrange(0, len(text))
            out.append((f"input: truncated at {cut}", text[:cut]))
        else:
            top = rng.choice(['"just text"', "42", "true", "[]", "", " ", '{"a":1}{"b":2}', '{"a":1,}'])
            out.append((f"input: top level {top!r}", top))
    return out
