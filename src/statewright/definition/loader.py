"""Parse and validate workflow definitions from YAML files, dicts, or the builder.

Every rule is checked before anything runs; all problems are collected and raised as one
DefinitionError whose lines name the file, the step id and the rule broken. The bounds
(sizes, depths, durations, counts) and the name rules are in ``definition.limits``;
a definition past a structural bound (too deep, too big, not JSON-shaped) gets that one
line and no more checks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

from statewright._canonical import canonical_json, sha256_hex
from statewright._errors import DefinitionError
from statewright._json_limits import iter_json_problems, json_path
from statewright._names import split_role
from statewright.definition._env import parse_step_env
from statewright.definition._schemas import schema_problems
from statewright.definition.durations import parse_duration_seconds
from statewright.definition.fleet import step_scheduling, workflow_scheduling
from statewright.definition.limits import (
    DEFINITION_JSON_LIMITS,
    MAX_ATTEMPTS,
    MAX_CHECKS,
    MAX_DEFINITION_BYTES,
    MAX_DEFINITION_DEPTH,
    MAX_DELIVERIES_BOUND,
    MAX_RETRY_MULTIPLIER,
    MAX_STEPS,
    MAX_VERSION,
    MAX_YAML_NODES,
    MIN_RETRY_MULTIPLIER,
    NAME,
    NAME_RULE,
    OWNER,
    OWNER_RULE,
    is_name,
    parse_size_bytes,
)
from statewright.definition.maps import items_problems, parse_map, pin_children
from statewright.definition.model import (
    COMPLETE,
    CONTINUE,
    DEFAULT_REJECT_CODES,
    HALT,
    OutcomeRoute,
    RetryPolicy,
    Route,
    RouteKind,
    Step,
    StepKind,
    Workflow,
)
from statewright.definition.notify import NotifyEvent, parse_targets, parse_workflow_notify
from statewright.definition.references import reference_problems
from statewright.machine.paths import RefError, parse_ref

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

_TOP_FIELDS = {
    "workflow", "version", "description", "input_schema", "steps", "reject_codes", "notify", "github",
    "concurrency", "tenant",
}
_COMMON_STEP_FIELDS = {
    "id", "kind", "owner", "description", "on_failure", "on_success", "timeout", "retry", "stuck_after",
}
_KIND_FIELDS: Mapping[StepKind, set[str]] = {
    StepKind.AI: {"agent", "instructions", "output_schema", "outcomes", "protected"},
    StepKind.HUMAN: {"approvers", "separate_from", "expires_after", "instructions", "proposal", "artifacts",
                      "reject_codes", "notify"},
    StepKind.WAIT: {"check", "every", "max_checks"},
    StepKind.CODE: {"run", "agent", "output_schema", "outcomes", "protected", "on_conflict"},
    StepKind.MAP: {"workflow", "workflow_hash", "items", "max_concurrency", "tolerated_failures"},
}
_PROCESS_FIELDS = {"env", "secrets", "concurrency", "limits"}  # kinds that run something: ai, wait, code
_RESULT_FIELDS = {"result_limit"}  # kinds that record a result: ai, wait, code
_REQUIRED_KIND_FIELDS: Mapping[StepKind, tuple[str, ...]] = {
    StepKind.AI: ("agent",),
    StepKind.HUMAN: ("approvers",),
    StepKind.WAIT: ("check", "every", "max_checks"),
    StepKind.CODE: ("run",),
    StepKind.MAP: ("workflow", "items"),
}
_RETRY_FIELDS = {
    "max_attempts", "initial_backoff", "max_backoff", "multiplier", "jitter", "non_retryable",
    "max_deliveries",
}

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


def read_definition_text(path: str | Path) -> str:
    """A definition file's text: at most ``MAX_DEFINITION_BYTES``, UTF-8. Raises
    DefinitionError (naming the file) otherwise; never reads more than the bound."""
    p = Path(path)
    source = str(p)
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_DEFINITION_BYTES + 1)
    except FileNotFoundError:
        raise DefinitionError(["file not found"], source) from None
    except OSError as exc:
        raise DefinitionError([f"cannot read the file: {exc.strerror or exc}"], source) from None
    if len(raw) > MAX_DEFINITION_BYTES:
        msg = f"the file is over {MAX_DEFINITION_BYTES:,} bytes, the most a definition may be"
        raise DefinitionError([msg], source)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}; save the file as UTF-8"
        raise DefinitionError([msg], source) from None


def is_loop_file(path: str | Path) -> bool:
    """Whether ``path`` holds a loop file (a mapping with ``loop:`` and no ``steps:``) rather
    than a workflow. Anything unreadable or malformed is not: the workflow loader says why."""
    import yaml

    from statewright.definition._yaml import load_yaml

    try:
        data = load_yaml(read_definition_text(path))
    except (DefinitionError, yaml.YAMLError):
        return False
    return isinstance(data, Mapping) and "loop" in data and "steps" not in data


def load_workflow(path: str | Path) -> Workflow:
    """Read and validate one YAML workflow file, and the child workflows its map steps name
    by file (each pinned in it by content hash)."""
    wf = workflow_from_yaml(read_definition_text(path), str(path))
    if not any(s.map is not None for s in wf.steps):
        return wf
    return pin_children(wf, Path(path), _read_one, workflow_from_dict)


def _read_one(path: Path) -> Workflow:
    return workflow_from_yaml(read_definition_text(path), str(path))


def workflow_from_yaml(text: str, source: str = "<yaml>") -> Workflow:
    import yaml  # here: a workflow built in Python never loads the YAML parser

    from statewright.definition._yaml import load_yaml, yaml_problem

    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise DefinitionError([yaml_problem(exc)], source) from None
    return workflow_from_dict(data, source)


def workflow_from_dict(data: object, source: str = "<dict>") -> Workflow:
    """Validate a plain mapping and build the frozen Workflow, or raise DefinitionError."""
    if not isinstance(data, Mapping):
        msg = f"a workflow must be a YAML mapping with 'workflow' and 'steps', got {_kind_name(data)}"
        raise DefinitionError([msg], source)
    data = plain_definition(data, source)
    problems = _Problems()
    for key in data:
        if key not in _TOP_FIELDS:
            problems.add("", f"unknown field {key!r}; allowed: {', '.join(sorted(_TOP_FIELDS))}")
    name = data.get("workflow")
    if not is_name(name):
        problems.add("", f"'workflow' must be a name of {NAME_RULE}; got {_short(name)}")
        name = "<unnamed>"
    version = data.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        problems.add("", f"'version' must be a whole number from 1 to {MAX_VERSION}, got {_short(version)}")
        version = 1
    description = data.get("description", "")
    if not isinstance(description, str):
        problems.add("", "'description' must be text")
        description = ""
    reject_codes: tuple[str, ...] = DEFAULT_REJECT_CODES
    if "reject_codes" in data:
        reject_codes = _parse_reject_codes(data["reject_codes"], "reject_codes", problems) or reject_codes
    input_schema = data.get("input_schema")
    if input_schema is not None:
        input_schema = _check_schema(input_schema, "input_schema", problems)
    notify = parse_workflow_notify(data["notify"], problems.items) if "notify" in data else {}
    raw_steps = data.get("steps")
    steps: list[Step] = []
    if raw_steps is None:
        problems.add("", "'steps' is missing; a workflow needs at least one step")
    elif not isinstance(raw_steps, list):
        problems.add("", f"'steps' must be a list, got {_kind_name(raw_steps)}")
    elif not raw_steps:
        problems.add("", "'steps' is empty; a workflow needs at least one step")
    elif len(raw_steps) > MAX_STEPS:
        problems.add("", f"{len(raw_steps)} steps; a workflow may have at most {MAX_STEPS}")
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
        for step in steps:
            if step.stuck_after_seconds is not None and not notify.get(NotifyEvent.STUCK):
                problems.add(f"step {step.id!r}", "stuck_after needs someone to tell: add notify: {stuck: "
                                                  "[TARGET...]} to the workflow")
        for step_id, problem in reference_problems(steps, input_schema):
            problems.add(f"step {step_id!r}", problem)
        for step_id, problem in items_problems(steps, input_schema):
            problems.add(f"step {step_id!r}", problem)
    github = None
    if "github" in data:
        from statewright.definition.github import parse_github  # here: few workflows have one

        github = parse_github(data["github"], steps, problems.add, reject_codes)
    wf_concurrency, tenant_ref = workflow_scheduling(data, lambda p: problems.add("", p))
    if problems.items:
        raise DefinitionError(problems.items, source)
    return Workflow(
        name=name,
        version=version,
        steps=tuple(steps),
        description=description,
        input_schema=input_schema,
        reject_codes=reject_codes,
        notify=notify,
        github=github,
        concurrency=wf_concurrency,
        tenant_ref=tenant_ref,
        # A file that leaves out 'version' means version 1 and hashes like one that says so.
        content_hash=sha256_hex({**data, "version": version}),
        source=source,
        raw=data,
    )


_MAX_LISTED = 20  # structural problems listed at once
MAX_PROPOSAL_ITEMS = 64  # references in a proposal, artifacts of a human step


class _NotPlain(Exception):
    """A bound broken while copying a definition to plain JSON types."""


def plain_definition(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A deep copy in plain JSON types (YAML may give dates, sets or int keys), within the
    definition bounds; raise DefinitionError with the one bound it breaks."""
    budget = [MAX_YAML_NODES]
    try:
        plain = _plain(data, (), budget)
    except _NotPlain as exc:
        raise DefinitionError([str(exc)], source) from None
    problems = list(islice(iter_json_problems(plain, DEFINITION_JSON_LIMITS), _MAX_LISTED))
    if problems:
        raise DefinitionError(problems, source)
    return plain  # type: ignore[no-any-return]


def _plain(value: Any, path: tuple[str | int, ...], budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise _NotPlain(f"more than {MAX_YAML_NODES:,} values in all; the most is {MAX_YAML_NODES:,}")
    if isinstance(value, Mapping | list | tuple) and len(path) >= MAX_DEFINITION_DEPTH:
        raise _NotPlain(f"at {json_path(path)}: nested deeper than {MAX_DEFINITION_DEPTH} levels "
                      "(or a mapping that contains itself)")
    if isinstance(value, Mapping):
        out = {str(k): _plain(v, (*path, str(k)), budget) for k, v in value.items()}
        if len(out) < len(value):  # 1 and '1' are both the key "1"
            raise _NotPlain(f"at {json_path(path)}: two keys read as the same name; write each key once")
        return out
    if isinstance(value, list | tuple):
        return [_plain(v, (*path, i), budget) for i, v in enumerate(value)]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _short(value: object) -> str:
    """``repr`` of a value from a file, cut to a readable length."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**40:
        return "a number too large to show"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    plain = dict(schema)
    found = schema_problems(canonical_json(plain))
    for problem in found:
        problems.add(where, problem)
    if found:
        return None
    if plain.get("type") == "object" and "additionalProperties" not in plain:
        plain["additionalProperties"] = False  # unknown fields fail closed
    return plain


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
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ATTEMPTS:
            problems.add(where, f"max_attempts must be a whole number from 1 to {MAX_ATTEMPTS}, got {_short(n)}")
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
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ATTEMPTS:
        problems.add(where, f"retry.max_attempts must be a whole number from 1 to {MAX_ATTEMPTS}, got {_short(n)}")
        n = 3
    initial = _duration(value.get("initial_backoff", 1), f"{where}.initial_backoff", problems)
    maximum = _duration(value.get("max_backoff", 60), f"{where}.max_backoff", problems)
    mult = value.get("multiplier", 2.0)
    if (
        isinstance(mult, bool)
        or not isinstance(mult, int | float)
        or not MIN_RETRY_MULTIPLIER <= mult <= MAX_RETRY_MULTIPLIER
    ):
        problems.add(where, f"retry.multiplier must be a number from {MIN_RETRY_MULTIPLIER:g} to "
                     f"{MAX_RETRY_MULTIPLIER:g}, got {_short(mult)}")
        mult = 2.0
    jitter = value.get("jitter", True)
    if not isinstance(jitter, bool):
        problems.add(where, "retry.jitter must be true or false")
        jitter = True
    nr = value.get("non_retryable", [])
    if not isinstance(nr, list) or not all(isinstance(x, str) for x in nr):
        problems.add(where, "retry.non_retryable must be a list of error class names")
        nr = []
    deliveries = value.get("max_deliveries")
    if deliveries is not None and (isinstance(deliveries, bool) or not isinstance(deliveries, int)
                                   or not 1 <= deliveries <= MAX_DELIVERIES_BOUND):
        problems.add(where, f"retry.max_deliveries must be a whole number from 1 to {MAX_DELIVERIES_BOUND}, "
                     f"got {_short(deliveries)}")
        deliveries = None
    return RetryPolicy(
        max_attempts=n,
        initial_backoff_seconds=initial if initial is not None else 1.0,
        max_backoff_seconds=maximum if maximum is not None else 60.0,
        multiplier=float(mult),
        jitter=jitter,
        non_retryable=tuple(nr),
        max_deliveries=deliveries,
    )


def _parse_step(
    raw: object, index: int, problems: _Problems, validators: Mapping[str, SpecValidator]
) -> Step | None:
    if not isinstance(raw, Mapping):
        problems.add(f"steps[{index}]", f"a step must be a mapping, got {_kind_name(raw)}")
        return None
    sid = raw.get("id")
    if not is_name(sid, NAME):
        problems.add(f"steps[{index}]", f"'id' must be a name of {NAME_RULE}; got {_short(sid)}")
        return None
    where = f"step {sid!r}"
    kind_raw = raw.get("kind")
    try:
        kind = StepKind(str(kind_raw))
    except ValueError:
        problems.add(where, f"unknown kind {kind_raw!r}; use one of ai, human, wait, code, map")
        return None
    runs_nothing = kind in (StepKind.HUMAN, StepKind.MAP)
    allowed = _COMMON_STEP_FIELDS | _KIND_FIELDS[kind] | (set() if runs_nothing else _PROCESS_FIELDS)
    allowed |= set() if runs_nothing else _RESULT_FIELDS
    for key in raw:
        if key not in allowed:
            other = [k.value for k, f in _KIND_FIELDS.items() if key in f]
            hint = f" (it belongs to {', '.join(other)} steps)" if other else ""
            problems.add(where, f"unknown field {key!r} for a {kind.value} step{hint}")
    owner = raw.get("owner")
    if not isinstance(owner, str) or not owner.strip():
        problems.add(where, "'owner' is required on every step (a team or person)")
        owner = ""
    elif not is_name(owner, OWNER):
        problems.add(where, f"'owner' must be a team or person of {OWNER_RULE}; got {_short(owner)}")
        owner = ""
    for req in _REQUIRED_KIND_FIELDS[kind]:
        if raw.get(req) is None and not (kind is StepKind.CODE and "agent" in raw):  # 'run:' alone is null
            problems.add(where, f"a {kind.value} step needs '{req}'")
    if kind is StepKind.CODE and "agent" in raw:  # a remote agent does the step's work elsewhere
        agent = raw.get("agent")
        if not isinstance(agent, Mapping) or agent.get("type") != "remote":
            problems.add(where, "a code step's 'agent' must be a remote one ({type: remote, queue: NAME}); "
                                "a code step runs its own 'run' otherwise")
        elif raw.get("run") is not None:
            problems.add(where, "a code step takes 'run' or a remote 'agent', not both")
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
        specs[key] = dict(spec)
        validator = validators.get(key)
        if validator is not None:
            for p in validator(specs[key] or {}):
                problems.add(where, f"{key}: {p}")
    timeout = None
    if "timeout" in raw:
        timeout = _duration(raw["timeout"], f"{where} timeout", problems)
        if timeout == 0:
            problems.add(f"{where} timeout", "a timeout must be greater than zero (every attempt would time out)")
            timeout = None
    every = 0.0
    max_checks = 0
    if kind is StepKind.WAIT:
        if "every" in raw:
            every = _duration(raw["every"], f"{where} every", problems) or 0.0
        mc = raw.get("max_checks", 0)
        if isinstance(mc, bool) or not isinstance(mc, int) or not 1 <= mc <= MAX_CHECKS:
            if "max_checks" in raw:
                problems.add(where, f"max_checks must be a whole number from 1 to {MAX_CHECKS}, got {_short(mc)}")
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
                if not is_name(name):
                    problems.add(where, f"outcome name {_short(name)} must be a name of {NAME_RULE}")
                    continue
                try:
                    outcomes[str(name)] = OutcomeRoute(route)
                except ValueError:
                    problems.add(where, f"outcome {name!r} maps to {_short(route)}; use pass, fail or halt")
            if "output_schema" not in raw:
                problems.add(where, "'outcomes' needs an output_schema with an 'outcome' field")
            elif schema is not None:  # an invalid schema has its own line already
                schema = _with_outcome_enum(schema, list(outcomes), where, problems)
    on_failure = HALT
    if "on_failure" in raw:
        on_failure = _parse_route(raw["on_failure"], f"{where} on_failure", False, problems)
    on_success = CONTINUE
    if "on_success" in raw:
        on_success = _parse_route(raw["on_success"], f"{where} on_success", True, problems)
    on_conflict = None
    if "on_conflict" in raw:
        on_conflict = _parse_route(raw["on_conflict"], f"{where} on_conflict", False, problems)
        if on_conflict.kind is RouteKind.CONTINUE:
            problems.add(where, "on_conflict: continue would act on a record that changed; "
                                "use halt or {loop_back: STEP, max_attempts: N}")
    role = None
    scope: dict[str, str] = {}
    reject_codes: tuple[str, ...] = ()
    separate: tuple[str, ...] = ()
    expires = None
    if kind is StepKind.HUMAN:
        ap = raw.get("approvers")
        if isinstance(ap, Mapping) and set(ap) <= {"role", "scope"} and is_name(ap.get("role")):
            role = ap["role"]
            scope = _parse_scope(ap.get("scope", {}), where, problems)
        elif "approvers" in raw:
            problems.add(where, f"approvers must be {{role: ROLE[, scope: {{KEY: REFERENCE}}]}}, the role a name "
                                f"of {NAME_RULE}")
        if "reject_codes" in raw:
            reject_codes = _parse_reject_codes(raw["reject_codes"], f"{where} reject_codes", problems)
        sf = raw.get("separate_from", [])
        if not isinstance(sf, list) or not all(isinstance(x, str) for x in sf):
            problems.add(where, "separate_from must be a list of earlier step ids")
        else:
            separate = tuple(sf)
        if "expires_after" in raw:
            expires = _duration(raw["expires_after"], f"{where} expires_after", problems)
    proposal, artifacts = _parse_proposal(raw, where, problems)
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
    targets = parse_targets(raw["notify"], f"{where} notify", problems.items) if "notify" in raw else ()
    stuck_after = None
    if "stuck_after" in raw:
        stuck_after = _duration(raw["stuck_after"], f"{where} stuck_after", problems)
        if stuck_after == 0:
            problems.add(f"{where} stuck_after", "must be greater than zero")
            stuck_after = None
    result_limit: dict[str, Any] = {}
    if "result_limit" in raw:
        try:
            result_limit["result_limit_bytes"] = parse_size_bytes(raw["result_limit"])
        except ValueError as exc:
            problems.add(where, f"result_limit: {exc}")
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
        approvers_scope=scope,
        reject_codes=reject_codes,
        separate_from=separate,
        expires_after_seconds=expires,
        retry=retry,
        protected=protected,
        env=env,
        secrets=secrets,
        proposal=proposal,
        artifacts=artifacts,
        on_conflict=on_conflict,
        notify=targets,
        stuck_after_seconds=stuck_after,
        map=parse_map(raw, where, problems.add) if kind is StepKind.MAP else None,
        **result_limit,
        **step_scheduling(raw, lambda p: problems.add(where, p)),
    )


def _parse_scope(value: object, where: str, problems: _Problems) -> dict[str, str]:
    """``approvers: {scope: {region: input.region}}``: each scope key takes its value from the
    task's state when the approval is given."""
    if not isinstance(value, Mapping):
        problems.add(where, "approvers scope must map scope keys to references such as input.region")
        return {}
    out: dict[str, str] = {}
    for key, ref in value.items():
        if split_role(f"r:{key}=x") is None:
            problems.add(where, f"approvers scope key {_short(key)} must be a name of letters, digits and _")
            continue
        try:
            out[str(key)] = parse_ref(ref).text
        except RefError as exc:
            problems.add(f"{where} approvers scope", str(exc))
    return out


def _parse_reject_codes(value: object, where: str, problems: _Problems) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(is_name(c) for c in value):
        problems.add(where, f"reject_codes must be a non-empty list of names of {NAME_RULE}")
        return ()
    if len(set(value)) != len(value):
        problems.add(where, "a reject code is listed twice")
    return tuple(value)


def _parse_proposal(raw: Mapping[str, Any], where: str, problems: _Problems) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A human step's ``proposal:`` (references into the task's state) and ``artifacts:``
    (workspace files by relative path, or ``diff``: the work against its base commit)."""
    refs: list[str] = []
    for item in _text_list(raw, "proposal", where, problems):
        try:
            refs.append(parse_ref(item).text)
        except RefError as exc:
            problems.add(f"{where} proposal", str(exc))
    paths: list[str] = []
    for item in _text_list(raw, "artifacts", where, problems):
        parts = item.replace("\\", "/").split("/")
        if item.startswith("/") or ".." in parts or any(p in ("", ".") for p in parts):
            problems.add(f"{where} artifacts", f"{item!r} must be a plain path inside the task's workspace "
                                                "(relative, no '..', no empty or '.' parts), or diff")
            continue
        paths.append(item)
    if len(set(paths)) != len(paths):
        problems.add(f"{where} artifacts", "an artifact is listed twice")
    return tuple(refs), tuple(paths)


def _text_list(raw: Mapping[str, Any], key: str, where: str, problems: _Problems) -> list[str]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        problems.add(where, f"{key} must be a list of texts")
        return []
    if len(value) > MAX_PROPOSAL_ITEMS:
        problems.add(where, f"{key} lists {len(value)} items; at most {MAX_PROPOSAL_ITEMS}")
        return []
    return value


def _with_outcome_enum(
    schema: Mapping[str, Any], names: list[str], where: str, problems: _Problems
) -> Mapping[str, Any]:
    """Pin the verdict's ``outcome`` to the mapped names: an unknown outcome fails closed."""
    props = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(props, Mapping) or "outcome" not in props:
        problems.add(where, "'outcomes' needs an object output_schema with an 'outcome' property")
        return schema
    prop = props["outcome"]
    if prop is True:  # the JSON Schema for "anything": the outcome names narrow it
        prop = {}
    if not isinstance(prop, Mapping):
        problems.add(where, "the output_schema's 'outcome' property must be a schema that allows "
                     f"the outcome names (e.g. {{type: string}}), got {_short(prop)}")
        return schema
    kind = prop.get("type", "string")
    if kind != "string" and not (isinstance(kind, list) and "string" in kind):
        problems.add(where, f"the output_schema's 'outcome' property has type {_short(kind)}; "
                     "outcome names are strings, so use type: string")
        return schema
    out = dict(schema)
    new_props = dict(props)
    new_props["outcome"] = {**dict(prop), "enum": names}
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
        if s.on_conflict is not None and s.on_conflict.kind is RouteKind.LOOP_BACK:
            target = s.on_conflict.target
            gates = [g.id for g in steps[:i] if g.kind is StepKind.HUMAN]
            if target not in index or index[target] >= i:
                problems.add(where, f"on_conflict loop_back target {target!r} is not an earlier step")
            elif gates and index[target] > index[gates[-1]]:
                problems.add(where, f"on_conflict loop_back target {target!r} comes after the approval "
                                    f"{gates[-1]!r}, which would still hold for a record that changed; "
                                    f"loop back to {gates[-1]!r} or an earlier step")
        for other in s.separate_from:
            if other not in index:
                problems.add(where, f"separate_from names {other!r}, which is not a step")
            elif index[other] >= i:
                problems.add(where, f"separate_from names {other!r}, which is not an earlier step")
