"""The reliability campaign for malformed definitions and inputs.

Deterministic mutations of the example workflows (keys dropped, wrong types, huge,
negative, infinite and NaN numbers, deep nesting, bad names, Unicode oddities, truncated
or tampered YAML) go through the Python loader and through ``validate``; a definition that
loads is also submitted and exported, since whatever validate accepts must not fail
later. Odd ``--input`` texts go through ``submit``. Every case is tallied as
``clean_error``, ``accepted``, ``traceback`` or ``hang``; any traceback or hang fails."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from malformed_cases import HANG_SECONDS, OK_WORKFLOW, generated_definitions, generated_inputs
from statewright import Engine, StatewrightError, Workflow, workflow_from_dict, workflow_from_yaml
from statewright.definition import StepKind
from statewright.executors import validate_agent_spec, validate_check_spec, validate_code_spec
from statewright.executors._reachable import unreachable_references
from statewright.export import to_asl, to_mermaid
from statewright.export.asl import Queues
from statewright.store import open_store
from tally import tally

from .support import sw

DEFINITIONS = generated_definitions()
INPUTS = generated_inputs()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    eng = Engine(open_store(str(tmp_path_factory.mktemp("campaign") / "state.db"), create=True))
    yield eng
    eng.close()


def _run(fn: Callable[[], Any]) -> tuple[str, Any, float]:
    """("clean_error" | "accepted" | "traceback", the value or the exception, seconds)."""
    start = time.monotonic()
    try:
        value = fn()
    except StatewrightError as exc:
        return "clean_error", exc, time.monotonic() - start
    except Exception as exc:  # anything else is what a user would see as a traceback
        return "traceback", exc, time.monotonic() - start
    return "accepted", value, time.monotonic() - start


def _later(wf: Workflow, engine: Engine) -> Callable[[], list[str]]:
    """What happens after validate: submit the task, export the workflow, look for its
    tools, and check each step's spec as the executor will before it runs. Returns the
    problems an executor would refuse the step with (there must be none)."""

    def go() -> list[str]:
        with contextlib.suppress(StatewrightError):  # a clean refusal (input schema) is fine
            engine.submit(wf, {})
        to_mermaid(wf)
        with contextlib.suppress(StatewrightError):  # what Step Functions cannot run is refused in one line
            to_asl(wf, Queues(default="https://sqs.example/q"))
        unreachable_references(wf)
        problems = []
        for step in wf.steps:
            if step.kind is StepKind.AI:
                problems += validate_agent_spec(step.agent)
            elif step.kind is StepKind.CODE:
                problems += validate_code_spec(step.run)
            elif step.kind is StepKind.WAIT:
                problems += validate_check_spec(step.check)
        return problems

    return go


def _validate(result: Result, path: Path) -> str:
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "traceback"
    lines = result.stdout.splitlines()
    if result.exit_code == 0:
        return "accepted"
    if result.exit_code == 1 and lines and all(line.startswith(f"{path}: ") for line in lines):
        return "clean_error"
    return "traceback"


def _as_yaml(payload: Any) -> str | None:
    try:
        return yaml.safe_dump(payload, allow_unicode=True, sort_keys=False)
    except Exception:  # the harness cannot write every odd value as YAML: load it as a dict only
        return None


def test_generated_definitions_never_crash_or_hang(engine: Engine, tmp_path: Path) -> None:
    """At least 200 mutated example workflows: each loads or is refused cleanly, fast, by
    the loader and by ``validate``; each one that loads also submits and exports cleanly."""
    assert len(DEFINITIONS) >= 200
    assert {kind for _, kind, _ in DEFINITIONS} == {"yaml", "dict"}
    failures = []
    results: dict[str, int] = {}
    path = tmp_path / "case.yaml"
    for case, kind, payload in DEFINITIONS:
        text = payload if kind == "yaml" else _as_yaml(payload)
        load: Callable[[], Any] = (lambda p=payload: workflow_from_yaml(p)) if kind == "yaml" \
            else (lambda p=payload: workflow_from_dict(p))
        result, value, seconds = _run(load)
        if result == "accepted":
            later, found, _ = _run(_later(value, engine))
            if later == "traceback":
                result, value = "traceback", found
            elif found:
                failures.append(f"{case}: accepted, but an executor would refuse it: {found}")
        if seconds > HANG_SECONDS:
            result = "hang"
        if text is not None and result != "traceback":
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
            start = time.monotonic()
            cli = _validate(sw("validate", path), path)
            if cli == "traceback" or time.monotonic() - start > HANG_SECONDS:
                result, value = ("traceback" if cli == "traceback" else "hang"), f"validate: {cli}"
        tally("malformed", f"generated definition {case}", result=result)
        results[result] = results.get(result, 0) + 1
        if result in ("traceback", "hang"):
            failures.append(f"{case}: {result}: {value!r}"[:300])
    assert failures == []
    assert results["accepted"] > 0 and results["clean_error"] > 0  # the generator is not degenerate


def test_generated_inputs_never_crash_or_hang(tmp_path: Path) -> None:
    """Odd ``--input`` texts: each is accepted (one task) or refused with one line (no rows)."""
    wf_file = tmp_path / "ok.yaml"
    wf_file.write_text(OK_WORKFLOW, encoding="utf-8")
    db = tmp_path / "inputs.db"
    failures = []
    seen: dict[str, int] = {}
    for case, text in INPUTS:
        seen[case] = seen.get(case, 0) + 1
        name = case if seen[case] == 1 else f"{case} #{seen[case]}"
        before = _tasks(db)
        start = time.monotonic()
        res = sw("submit", wf_file, "--input", text, "--db", db)
        seconds = time.monotonic() - start
        after = _tasks(db)
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            result = "traceback"
        elif res.exit_code == 0:
            result = "accepted" if after == before + 1 else "traceback"
        else:
            lines = res.stderr.splitlines()
            one_line = res.stdout == "" and len(lines) == 1 and lines[0].startswith("error: ")
            result = "clean_error" if one_line and after == before else "traceback"
        if seconds > HANG_SECONDS:
            result = "hang"
        tally("malformed", f"generated {name}", result=result)
        if result in ("traceback", "hang"):
            failures.append(f"{name}: {result}: {res.output[:200]!r} {res.exception!r}")
    assert failures == []


def _tasks(db: Path) -> int:
    if not db.exists():
        return 0
    store = open_store(str(db))
    try:
        return len(store.list_tasks())
    finally:
        store.close()
