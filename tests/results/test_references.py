"""References in a command's argv: how they are written, resolved and refused.

Resolution is pure (``resolve_argv``): table tests name the value each reference gives or
the one line that says why it gives none. Load-time refusal is one line per reference that
can never resolve, from ``workflow_from_dict`` and from ``statewright validate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from statewright._errors import DefinitionError
from statewright.cli import cli
from statewright.definition.loader import workflow_from_dict
from statewright.definition.references import Reference, parse_item, resolve_argv

INPUT = {"branch": "fix/bom", "n": 3, "flags": {"dry": True}, "files": ["a.py", "b.py"], "name": "Ann"}
RESULTS = {"analyse": {"iban": "DE89", "risk": None, "hits": [{"id": "E1"}, {"id": "E2"}]}}


@pytest.mark.parametrize(("item", "expected"), [
    ("{input.branch}", "fix/bom"),
    ("--branch={input.branch}", "--branch=fix/bom"),
    ("{input.n}", "3"),
    ("{input.flags}", '{"dry":true}'),
    ("{input.flags.dry}", "true"),
    ("{results.analyse.risk}", "null"),
    ("{input.files.1}", "b.py"),
    ("{results.analyse.hits.0.id}", "E1"),
    ("{results.analyse.hits}", '[{"id":"E1"},{"id":"E2"}]'),
    ("{input.branch}:{results.analyse.iban}", "fix/bom:DE89"),
    ("{{input.branch}", "{input.branch}"),
    ("{{{input.branch}", "{fix/bom"),
    ("{input.branch}}", "fix/bom}"),
    ('{"a": {"b": 1}}', '{"a": {"b": 1}}'),
    ("{}", "{}"),
    ("{x}", "{x}"),
    ("no braces", "no braces"),
], ids=lambda v: str(v))
def test_a_reference_resolves_to_one_argument(item: str, expected: str) -> None:
    """Each item stays one argument: a string value as it is, any other as compact JSON."""
    assert resolve_argv(["cmd", item], INPUT, RESULTS) == ["cmd", expected]


@pytest.mark.parametrize(("item", "why"), [
    ("{results.review.approved}", "{results.review.approved}: step 'review' has no result (not run yet"),
    ("{results.analyse.account}", "{results.analyse.account}: results.analyse has no field 'account'"),
    ("{input.missing}", "{input.missing}: input has no field 'missing'"),
    ("{input.name.first}", "{input.name.first}: input.name is a string, which has no field 'first'"),
    ("{input.n.x}", "{input.n.x}: input.n is a number, which has no field 'x'"),
    ("{input.files.2}", "{input.files.2}: input.files is a list of 2; it has no item '2'"),
    ("{input.files.first}", "{input.files.first}: input.files is a list of 2; it has no item 'first'"),
    ("{results.analyse.risk.level}", "{results.analyse.risk.level}: results.analyse.risk is null"),
    ("{bogus.x}", "{bogus.x}: unknown root 'bogus'"),
], ids=lambda v: str(v))
def test_a_reference_that_names_nothing_says_which_part_is_missing(item: str, why: str) -> None:
    with pytest.raises(ValueError, match="^" + __import__("re").escape(why)):
        resolve_argv(["cmd", f"x{item}"], INPUT, RESULTS)


def test_a_value_no_argument_can_carry_is_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        resolve_argv(["{input.bad}"], {"bad": "a\0b"}, {})
    with pytest.raises(ValueError, match="more than 131,071 bytes"):
        resolve_argv(["{input.big}"], {"big": "x" * 200_000}, {})


def test_parse_item_reads_references_and_escapes() -> None:
    assert parse_item("a{input.x.0}b{{c}") == ["a", Reference("input", ("x", "0"), "{input.x.0}"), "b{c}"]
    assert parse_item("{results}") == [Reference("results", (), "{results}")]


# --- load time ---------------------------------------------------------------------------

ANALYSE = {"id": "analyse", "kind": "code", "owner": "t", "run": {"command": ["true"]},
           "output_schema": {"type": "object",
                             "properties": {"iban": {"type": "string"},
                                            "hits": {"type": "array", "items": {"type": "object"}}}}}
INPUT_SCHEMA = {"type": "object", "properties": {"branch": {"type": "string"}}}


def _definition(*argv: str, kind: str = "code", before: tuple[dict[str, Any], ...] = (ANALYSE,),
                after: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    use: dict[str, Any] = {"id": "use", "kind": kind, "owner": "t"}
    if kind == "code":
        use["run"] = {"command": ["echo", *argv]}
    elif kind == "wait":
        use.update(check={"command": ["echo", *argv]}, every="1m", max_checks=2)
    else:
        use["agent"] = {"type": "command", "command": ["echo", *argv]}
    return {"workflow": "refs", "input_schema": INPUT_SCHEMA, "steps": [*before, use, *after]}


LATER = {"id": "later", "kind": "code", "owner": "t", "run": {"command": ["true"]}}
HUMAN = {"id": "approve", "kind": "human", "owner": "t", "approvers": {"role": "maintainer"}}
TALKER = {"id": "talk", "kind": "ai", "owner": "t", "agent": {"type": "command", "command": ["true"]}}
WAIT = {"id": "ci", "kind": "wait", "owner": "t", "check": {"command": ["true"]}, "every": "1m", "max_checks": 1}


@pytest.mark.parametrize(("definition", "line"), [
    (_definition("{results.nope.x}"), "step 'use': run command item 1 {results.nope.x}: 'nope' is not a step"),
    (_definition("{results.use.x}"), "step 'use': run command item 1 {results.use.x}: 'use' is this step"),
    (_definition("{results.later.x}", after=(LATER,)),
     "step 'use': run command item 1 {results.later.x}: step 'later' comes after this one"),
    (_definition("a", "--x={results.analyse.account}"),
     "step 'use': run command item 2 {results.analyse.account}: the output_schema of step 'analyse' "
     "allows no field 'account' in results.analyse (fields: hits, iban)"),
    (_definition("{results.analyse.iban.x}"),
     "step 'use': run command item 1 {results.analyse.iban.x}: the output_schema of step 'analyse' "
     "makes results.analyse.iban a string, which has no field 'x'"),
    (_definition("{results.analyse.hits.first}"),
     "step 'use': run command item 1 {results.analyse.hits.first}: the output_schema of step 'analyse' "
     "makes results.analyse.hits a list; index it with a number"),
    (_definition("{input.brunch}"),
     "step 'use': run command item 1 {input.brunch}: the workflow's input_schema allows no field 'brunch'"),
    (_definition("{env.HOME}"), "step 'use': run command item 1 {env.HOME}: unknown root 'env'"),
    (_definition("{results.approve.ok}", before=(HUMAN,)),
     "step 'use': run command item 1 {results.approve.ok}: step 'approve' is a human step"),
    (_definition("{results.ci.status}", before=(WAIT,)),
     "step 'use': run command item 1 {results.ci.status}: a wait step's result allows no field 'status'"),
    (_definition("{results.nope.x}", kind="wait"), "step 'use': check command item 1 {results.nope.x}:"),
    (_definition("{results.nope.x}", kind="ai"), "step 'use': agent command item 1 {results.nope.x}:"),
    ({"workflow": "sh", "steps": [{"id": "s", "kind": "code", "owner": "t",
                                   "run": {"command": ["bash", "-c", "echo {input.x}"]}}]},
     "step 's': run command item 2: a reference inside an inline script would be read as code"),
    ({"workflow": "py", "steps": [{"id": "s", "kind": "code", "owner": "t",
                                   "run": {"command": ["/usr/bin/python3", "-c", "print('{input.x}')"]}}]},
     "step 's': run command item 2: a reference inside an inline script would be read as code"),
    ({"workflow": "node", "steps": [{"id": "s", "kind": "wait", "owner": "t", "every": "1m", "max_checks": 1,
                                     "check": {"command": ["node", "-e", "{input.code}"]}}]},
     "step 's': check command item 2: a reference inside an inline script would be read as code"),
    ({"workflow": "str", "steps": [{"id": "s", "kind": "code", "owner": "t",
                                    "run": {"command": "echo {results.s.x}"}}]},
     "step 's': run command item 1 {results.s.x}: 's' is this step"),
    ({"workflow": "p", "steps": [ANALYSE, {**HUMAN, "proposal": ["results.analyse.account"]}]},
     "step 'approve': proposal results.analyse.account: the output_schema of step 'analyse' allows no field 'account'"),
    ({"workflow": "p", "input_schema": INPUT_SCHEMA, "steps": [{**HUMAN, "proposal": ["input.brunch"]}]},
     "step 'approve': proposal input.brunch: the workflow's input_schema allows no field 'brunch'"),
    ({"workflow": "p", "steps": [{**HUMAN, "proposal": ["results.later.x"]}, LATER]},
     "step 'approve': proposal results.later.x: step 'later' comes after this one"),
    ({"workflow": "p", "steps": [{**HUMAN, "proposal": ["results.approve.x"]}]},
     "step 'approve': proposal results.approve.x: 'approve' is this step"),
    ({"workflow": "p", "steps": [{**HUMAN, "approvers": {"role": "finance", "scope": {"region": "results.nope.r"}}}]},
     "step 'approve': approvers scope region results.nope.r: 'nope' is not a step of this workflow"),
    ({"workflow": "size", "steps": [{**LATER, "result_limit": "64 kilobytes"}]},
     "step 'later': result_limit: a size must be a whole number of bytes or text like 64KiB"),
    ({"workflow": "size", "steps": [{**LATER, "result_limit": 2_000_000}]},
     "step 'later': result_limit: a size must be from 1 byte to 1,000,000 bytes"),
    ({"workflow": "size", "steps": [{**HUMAN, "result_limit": "1KiB"}]},
     "step 'approve': unknown field 'result_limit' for a human step"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_reference_that_can_never_resolve_is_refused_with_one_line(definition: dict[str, Any], line: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        workflow_from_dict(definition, "refs.yaml")
    assert len(caught.value.problems) == 1, caught.value.problems
    assert caught.value.problems[0].startswith(line), caught.value.problems[0]


def test_references_that_may_resolve_load() -> None:
    wf = workflow_from_dict({
        "workflow": "fine", "input_schema": INPUT_SCHEMA,
        "steps": [ANALYSE, WAIT, {**LATER, "result_limit": "64KiB", "run": {"command": [
            "echo", "{input.branch}", "{results.analyse.iban}", "{results.analyse.hits.0.id}",
            "{results.ci.detail}", "{results.ci.body.state}", "{{literal}", "{input}", "{results}",
            "sh", "-c", 'echo "$1"']}},
                  {**LATER, "id": "inline", "run": {"command": ["bash", "-c", 'echo "$1"', "bash", "{input.branch}"]}}],
    })
    assert wf.steps[2].result_limit_bytes == 64 * 1024
    assert wf.steps[0].result_limit_bytes == 256 * 1024


def test_a_reference_to_an_ai_step_without_an_output_schema_loads() -> None:
    """Such a step's verdict, when its agent gives one, is its result: what it holds is
    known only at run time."""
    wf = workflow_from_dict({"workflow": "talk", "steps": [
        TALKER, {**LATER, "run": {"command": ["echo", "{results.talk.x}"]}},
        {**HUMAN, "proposal": ["results.talk.x"]}]})
    assert [s.id for s in wf.steps] == ["talk", "later", "approve"]


def test_validate_prints_one_line_per_refused_reference(tmp_path: Path) -> None:
    path = tmp_path / "refs.yaml"
    path.write_text(yaml.safe_dump(_definition("{results.nope.x}", "{input.branch}")), encoding="utf-8")
    out = CliRunner().invoke(cli, ["validate", str(path)])
    assert out.exit_code == 1
    assert out.output.splitlines() == [
        f"{path}: step 'use': run command item 1 {{results.nope.x}}: 'nope' is not a step of this workflow"
    ]
    assert "Traceback" not in out.output


def test_validate_does_not_look_for_a_program_named_by_a_reference(tmp_path: Path) -> None:
    path = tmp_path / "tool.yaml"
    path.write_text(yaml.safe_dump({"workflow": "tool", "steps": [
        {"id": "s", "kind": "code", "owner": "t", "run": {"command": ["{input.tool}", "--version"]}}]}),
        encoding="utf-8")
    out = CliRunner().invoke(cli, ["validate", str(path)])
    assert out.exit_code == 0
    assert [line.split(": ")[1] for line in out.output.splitlines()] == ["OK  tool v1"]
