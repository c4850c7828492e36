"""Parse and validate workflow definitions from YAML files, dicts, or the builder.

Every rule is checked before anything runs; all problems are collected and raised as one
DefinitionError whose lines name the file, the step id and the rule broken."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from statewright._canonical import sha256_hex
from statewright._errors import DefinitionError
from statewright.definition._env import parse_step_env
from statewright.definition.durations import parse_duration_seconds
from statewright.definition.model import (
    COMPLETE,
    CONTINUE,
    HALT,
    OutcomeRoute,
    RetryPolicy,
    Route,
    RouteKind,
    Step,
    StepKind,
    Workflow,
)

REVIEW_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "must_fix": {"type": "array", "items": {"type": "string"}},
        "summary": {"type": "string"},
    },
    "required": ["approved"],
    "additionalProperties": False,
}
BUILTIN_SCHEMAS: Mapping[str, Mapping[str, Any]] = {"review": REVIEW_SCHEMA}

_TOP_FIELDS = {"workflow", "version", "description", "input_schema", "steps"}
_COMMON_STEP_FIELDS = {
    "id", "kind", "owner", "description", "on_failure", "on_success", "timeout", "retry",
}
_KIND_FIELDS: Mapping[StepKind, set[str]] = {
    StepKind.AI: {"agent", "instructions", "output_schema", "outcomes", "protected"},
    StepKind.HUMAN: {"approvers", "separate_from", "expires_after", "instructions"},
    StepKind.WAIT: {"check", "every", "max_checks"},
    StepKind.CODE: {"run", "output_schema", "outcomes", "protected"},
}
_PROCESS_FIELDS = {"env", "secrets"}  # kinds that run something: ai, wait, code
_REQUIRED_KIND_FIELDS: Mapping[StepKind, tuple[str, ...]] = {
    StepKind.AI: ("agent",),
    StepKind.HUMAN: ("approvers",),
    StepKind.WAIT: ("check", "every", "max_checks"),
    StepKind.CODE: ("run",),
}
_RETRY_FIELDS = {
    "max_attempts", "initial_backoff", "max_backoff", "multiplier", "jitter", "non_retryable",
}
_STEP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

SpecValidator = Callable[[Mapping[str, Any]], list[str]]


def _spec_validators() -> dict[str, SpecValidator]:
    """The executors' own shape checks, when the executors package provides them."""
    try:
        from statewright import executors
    except ImportError:  # pragma: no cover - the executors ship with the package
        return {}
    out: dict[str, SpecValidator] = {}
    for key, name in (
        ("agent", "validate_agent_spec"),
        ("run", "validate_code_spec"),
        ("check", "validate_check_spec"),
    ):
        fn = getattr(executors, name, None)
        if callable(fn):
            out[key] = fn
    return out


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, msg: str) -> None:
        self.items.append(f"{where}: {msg}" if where else msg)


def _kind_name(value: object) -> str:
    return type(value).__name__


def load_workflow(path: str | Path) -> Workflow:
    """Read and validate one YAML workflow file."""
    p = Path(path)
    source = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DefinitionError(["file not found"], source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DefinitionError([f"cannot read the file: {exc}"], source) from None
    return workflow_from_yaml(text, source)


def workflow_from_yaml(text: str, source: str = "<yaml>") -> Workflow:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DefinitionError([f"not valid YAML{where}: {problem}"], source) from None
    return workflow_from_dict(data, source)


def workflow_from_dict(data: object, source: str = "<dict>") -> Workflow:
    """Validate a plain mapping and build the frozen Workflow, or raise DefinitionError."""
    if not isinstance(data, Mapping):
        msg = f"a workflow must be a YAML mapping with 'workflow' and 'steps', got {_kind_name(data)}"
        raise DefinitionError([msg], source)
    problems = _Problems()
    for key in data:
        if key not in _TOP_FIELDS:
            problems.add("", f"unknown field {key!r}; allowed: {', '.join(sorted(_TOP_FIELDS))}")
    name = data.get("workflow")
    if not isinstance(name, str) or not name.strip():
        problems.add("", "'workflow' must be a non-empty name")
        name = "<unnamed>"
    version = data.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        problems.add("", f"'version' must be a whole number >= 1, got {version!r}")
        version = 1
    description = data.get("description", "")
    if not isinstance(description, str):
        problems.add("", "'description' must be text")
        description = ""
    input_schema = data.get("input_schema")
    if input_schema is not None:
        input_schema = _check_schema(input_schema, "input_schema", problems)
    raw_steps = data.get("steps")
    steps: list[Step] = []
    if raw_steps is None:
        problems.add("", "'steps' is missing; a workflow needs at least one step")
    elif not isinstance(raw_steps, list):
        problems.add("", f"'steps' must be a list, got {_kind_name(raw_steps)}")
    elif not raw_steps:
        problems.add("", "'steps' is empty; a workflow needs at least one step")
    else:
        validators = _spec_validators()
        seen: set[str] = set()
        for i, raw in enumerate(raw_steps):
            step = _parse_step(raw, i, problems, validators)
            if step is None:
                continue
            if step.id in seen:
                problems.add(f"step {step.id!r}", "duplicate step id; step ids must be unique")
                continue
            seen.add(step.id)
            steps.append(step)
        _check_routes(steps, problems)
    if problems.items:
        raise DefinitionError(problems.items, source)
    return Workflow(
        name=name,
        version=version,
        steps=tuple(steps),
        description=description,
        input_schema=input_schema,
        # A file that leaves out 'version' means version 1 and hashes like one that says so.
        content_hash=sha256_hex({**_plain(data), "version": version}),
        source=source,
        raw=_plain(data),
    )


def _plain(value: Any) -> Any:
    """Deep copy to plain JSON-able types (YAML may give dates or tuples)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _check_schema(schema: object, where: str, problems: _Problems) -> Mapping[str, Any] | None:
    if isinstance(schema, str):
        if schema in BUILTIN_SCHEMAS:
            return BUILTIN_SCHEMAS[schema]
        known = ", ".join(sorted(BUILTIN_SCHEMAS))
        problems.add(where, f"unknown built-in schema {schema!r}; built in: {known}")
        return None
    if not isinstance(schema, Mapping):
        problems.add(where, f"must be a JSON Schema mapping, got {_kind_name(schema)}")
        return None
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    plain = _plain(schema)
    try:
        validator_for(plain).check_schema(plain)
    except SchemaError as exc:
        problems.add(where, f"not a valid JSON Schema: {exc.message}")
        return None
    if plain.get("type") == "object" and "additionalProperties" not in plain:
        plain["additionalProperties"] = False  # unknown fields fail closed
    return dict(plain)


def _parse_route(value: object, where: str, success: bool, problems: _Problems) -> Route:
    if isinstance(value, str):
        if value == "halt" and not success:
            return HALT
        if value == "continue":
            return CONTINUE
        if value == "complete" and success:
            return COMPLETE
        allowed = "continue | complete" if success else "halt | continue | {loop_back: STEP, max_attempts: N}"
        problems.add(where, f"unknown route {value!r}; use {allowed}")
        return CONTINUE if success else HALT
    if isinstance(value, Mapping) and "loop_back" in value:
        if success:
            problems.add(where, "a success route cannot loop back; use continue or complete")
            return CONTINUE
        extra = set(value) - {"loop_back", "max_attempts"}
        if extra:
            problems.add(where, f"unknown field(s) {sorted(extra)} in loop_back route")
        target = value.get("loop_back")
        if not isinstance(target, str):
            problems.add(where, "loop_back must name an earlier step id")
            return HALT
        n = value.get("max_attempts")
        if n is None:
            problems.add(where, f"loop_back to {target!r} needs max_attempts (a whole number >= 1)")
            return HALT
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            problems.add(where, f"max_attempts must be a whole number >= 1, got {n!r}")
            return HALT
        return Route(RouteKind.LOOP_BACK, target=target, max_attempts=n)
    allowed = "continue | complete" if success else "halt | continue | {loop_back: STEP, max_attempts: N}"
    problems.add(where, f"unknown route {value!r}; use {allowed}")
    return CONTINUE if success else HALT


def _duration(value: object, where: str, problems: _Problems) -> float | None:
    try:
        return parse_duration_seconds(value)
    except ValueError as exc:
        problems.add(where, str(exc))
        return None


def _parse_retry(value: object, where: str, problems: _Problems) -> RetryPolicy:
    if not isinstance(value, Mapping):
        problems.add(where, f"retry must be a mapping, got {_kind_name(value)}")
        return RetryPolicy()
    unknown = set(value) - _RETRY_FIELDS
    if unknown:
        problems.add(where, f"unknown retry field(s) {sorted(unknown)}; allowed: {sorted(_RETRY_FIELDS)}")
    n = value.get("max_attempts", 3)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        problems.add(where, f"retry.max_attempts must be a whole number >= 1, got {n!r}")
        n = 3
    initial = _duration(value.get("initial_backoff", 1), f"{where}.initial_backoff", problems)
    maximum = _duration(value.get("max_backoff", 60), f"{where}.max_backoff", problems)
    mult = value.get("multiplier", 2.0)
    if isinstance(mult, bool) or not isinstance(mult, int | float) or mult < 1:
        problems.add(where, f"retry.multiplier must be a number >= 1, got {mult!r}")
        mult = 2.0
    jitter = value.get("jitter", True)
    if not isinstance(jitter, bool):
        problems.add(where, "retry.jitter must be true or false")
        jitter = True
    nr = value.get("non_retryable", [])
    if not isinstance(nr, list) or not all(isinstance(x, str) for x in nr):
        problems.add(where, "retry.non_retryable must be a list of error class names")
        nr = []
    return RetryPolicy(
        max_attempts=n,
        initial_backoff_seconds=initial if initial is not None else 1.0,
        max_backoff_seconds=maximum if maximum is not None else 60.0,
        multiplier=float(mult),
        jitter=jitter,
        non_retryable=tuple(nr),
    )


def _parse_step(
    raw: object, index: int, problems: _Problems, validators: Mapping[str, SpecValidator]
) -> Step | None:
    if not isinstance(raw, Mapping):
        problems.add(f"steps[{index}]", f"a step must be a mapping, got {_kind_name(raw)}")
        return None
    sid = raw.get("id")
    if not isinstance(sid, str) or not _STEP_ID.match(sid):
        problems.add(f"steps[{index}]", f"'id' must be a short name (letters, digits, _ . -), got {sid!r}")
        return None
    where = f"step {sid!r}"
    kind_raw = raw.get("kind")
    try:
        kind = StepKind(str(kind_raw))
    except ValueError:
        problems.add(where, f"unknown kind {kind_raw!r}; use one of ai, human, wait, code")
        return None
    allowed = _COMMON_STEP_FIELDS | _KIND_FIELDS[kind] | (set() if kind is StepKind.HUMAN else _PROCESS_FIELDS)
    for key in raw:
        if key not in allowed:
            other = [k.value for k, f in _KIND_FIELDS.items() if key in f]
            hint = f" (it belongs to {', '.join(other)} steps)" if other else ""
            problems.add(where, f"unknown field {key!r} for a {kind.value} step{hint}")
    owner = raw.get("owner")
    if not isinstance(owner, str) or not owner.strip():
        problems.add(where, "'owner' is required on every step (a team or person)")
        owner = ""
    for req in _REQUIRED_KIND_FIELDS[kind]:
        if req not in raw:
            problems.add(where, f"a {kind.value} step needs '{req}'")
    for key in ("description", "instructions"):
        if key in raw and not isinstance(raw[key], str):
            problems.add(where, f"'{key}' must be text")
    specs: dict[str, Mapping[str, Any] | None] = {}
    for key in ("agent", "run", "check"):
        spec = raw.get(key)
        if spec is None:
            specs[key] = None
            continue
        if not isinstance(spec, Mapping):
            problems.add(where, f"'{key}' must be a mapping, got {_kind_name(spec)}")
            specs[key] = None
            continue
        specs[key] = _plain(spec)
        validator = validators.get(key)
        if validator is not None:
            for p in validator(specs[key] or {}):
                problems.add(where, f"{key}: {p}")
    timeout = None
    if "timeout" in raw:
        timeout = _duration(raw["timeout"], f"{where} timeout", problems)
    every = 0.0
    max_checks = 0
    if kind is StepKind.WAIT:
        if "every" in raw:
            every = _duration(raw["every"], f"{where} every", problems) or 0.0
        mc = raw.get("max_checks", 0)
        if isinstance(mc, bool) or not isinstance(mc, int) or mc < 1:
            if "max_checks" in raw:
                problems.add(where, f"max_checks must be a whole number >= 1, got {mc!r}")
            mc = 1
        max_checks = mc
    schema = None
    if "output_schema" in raw:
        schema = _check_schema(raw["output_schema"], f"{where} output_schema", problems)
    outcomes: dict[str, OutcomeRoute] = {}
    if "outcomes" in raw:
        oc = raw["outcomes"]
        if not isinstance(oc, Mapping) or not oc:
            problems.add(where, "'outcomes' must map outcome names to pass | fail | halt")
        else:
            for name, route in oc.items():
                try:
                    outcomes[str(name)] = OutcomeRoute(route)
                except ValueError:
                    problems.add(where, f"outcome {name!r} maps to {route!r}; use pass, fail or halt")
            if schema is None:
                problems.add(where, "'outcomes' needs an output_schema with an 'outcome' field")
            else:
                schema = _with_outcome_enum(schema, list(outcomes), where, problems)
    on_failure = HALT
    if "on_failure" in raw:
        on_failure = _parse_route(raw["on_failure"], f"{where} on_failure", False, problems)
    on_success = CONTINUE
    if "on_success" in raw:
        on_success = _parse_route(raw["on_success"], f"{where} on_success", True, problems)
    role = None
    separate: tuple[str, ...] = ()
    expires = None
    if kind is StepKind.HUMAN:
        ap = raw.get("approvers")
        if isinstance(ap, Mapping) and set(ap) == {"role"} and isinstance(ap["role"], str):
            role = ap["role"]
        elif "approvers" in raw:
            problems.add(where, "approvers must be {role: ROLE}")
        sf = raw.get("separate_from", [])
        if not isinstance(sf, list) or not all(isinstance(x, str) for x in sf):
            problems.add(where, "separate_from must be a list of earlier step ids")
        else:
            separate = tuple(sf)
        if "expires_after" in raw:
            expires = _duration(raw["expires_after"], f"{where} expires_after", problems)
    protected: tuple[str, ...] = ()
    if "protected" in raw:
        pr = raw["protected"]
        if not isinstance(pr, list) or not all(isinstance(x, str) for x in pr):
            problems.add(where, "protected must be a list of paths")
        else:
            protected = tuple(pr)
    env, secrets, env_problems = parse_step_env(raw)
    for p in env_problems:
        problems.add(where, p)
    retry = RetryPolicy()
    if "retry" in raw:
        retry = _parse_retry(raw["retry"], f"{where} retry", problems)
    return Step(
        id=sid,
        kind=kind,
        owner=owner,
        description=raw.get("description", "") if isinstance(raw.get("description"), str) else "",
        instructions=raw.get("instructions", "") if isinstance(raw.get("instructions"), str) else "",
        agent=specs["agent"],
        run=specs["run"],
        check=specs["check"],
        every_seconds=every,
        max_checks=max_checks,
        timeout_seconds=timeout,
        output_schema=schema,
        outcomes=outcomes,
        on_failure=on_failure,
        on_success=on_success,
        approvers_role=role,
        separate_from=separate,
        expires_after_seconds=expires,
        retry=retry,
        protected=protected,
        env=env,
        secrets=secrets,
    )


def _with_outcome_enum(
    schema: Mapping[str, Any], names: list[str], where: str, problems: _Problems
) -> Mapping[str, Any]:
    """Pin the verdict's ``outcome`` to the mapped names: an unknown outcome fails closed."""
    props = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(props, Mapping) or "outcome" not in props:
        problems.add(where, "'outcomes' needs an object output_schema with an 'outcome' property")
        return schema
    out = dict(schema)
    new_props = dict(props)
    new_props["outcome"] = {**dict(props["outcome"]), "enum": names}
    out["properties"] = new_props
    required = list(out.get("required", []))
    if "outcome" not in required:
        required.append("outcome")
    out["required"] = required
    return out


def _check_routes(steps: list[Step], problems: _Problems) -> None:
    index = {s.id: i for i, s in enumerate(steps)}
    for i, s in enumerate(steps):
        where = f"step {s.id!r}"
        r = s.on_failure
        if r.kind is RouteKind.LOOP_BACK and r.target is not None:
            if r.target == s.id:
                problems.add(
                    where, f"loop_back target {r.target!r} is the step itself; "
                    "loops may only go back to an earlier step",
                )
            elif r.target not in index:
                problems.add(where, f"loop_back target {r.target!r} does not exist")
            elif index[r.target] > i:
                problems.add(where, f"loop_back target {r.target!r} comes after it; loops may only go back")
        if r.kind is RouteKind.CONTINUE and s.kind is StepKind.HUMAN:
            problems.add(
                where,
                "on_failure: continue on a human step would let the work pass a rejected or "
                "expired approval; use halt or loop_back",
            )
        elif r.kind is RouteKind.CONTINUE and i == len(steps) - 1:
            problems.add(
                where,
                "on_failure: continue on the last step would complete a task whose last step failed; "
                "use halt or loop_back",
            )
        for other in s.separate_from:
            if other not in index:
                problems.add(where, f"separate_from names {other!r}, which is not a step")
            elif index[other] >= i:
                problems.add(where, f"separate_from names {other!r}, which is not an earlier step")
