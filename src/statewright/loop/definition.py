"""Loop files: parse and validate a YAML (or dict) loop definition.

    loop: nightly-fixes                    # name: letters, digits, . _ -
    source: {jsonl: backlog.jsonl}         # or {command: [argv...]} or {directory: items/}
    workflow: workflows/fix.yaml           # the task engine runs it, one task per pass
    # workflow: {command: [python, worker.py], timeout: 10m,   # or a command per item
    #            env: {REGION: eu-west-1}, secrets: [GH_TOKEN]}
    check:                                 # oracles per item, after the pass
      - {name: suite, command: [python, checks/suite.py], timeout: 60s,
         assets: [checks/]}                # files the worker must not write
    gate: {role: maintainer, timeout: 2d}  # optional human approval before the effect
    goal:
      all_items_closed: true
      oracles:
        - {name: tests, command: [python, -m, pytest, -q], timeout: 10m}
    budgets: {passes: 30, tokens: 2000000, money_usd: 25, wall_time: 2h,
              per_pass: {tokens: 200000, money_usd: 2}}   # what one pass may spend
    parallel: 4                            # items worked at once, one pass each; default 1
    attempts_per_item: 3                   # default 3
    stuck_after: 5                         # passes since the last close; default 5
    restart_limit: 2                       # unclean restarts per state; default 2
    kill_switch: {file: STOP}              # the run stops cleanly while this file exists

With ``parallel: N`` the run works a wave of up to N items at once through the same state
table: every pass of the wave is launched, checked, decided and recorded (one record row
each) before the run decides. Budgets are charged per pass and never overspent: a wave
launches no more passes than ``budgets.passes`` has left, and, where ``budgets.per_pass``
says what one pass may spend, no more than the tokens and money left can cover (required
with ``parallel`` > 1 and a tokens or money budget). A pass that reports spending more than
its share is "no result" (its cap fired), and what it spent is charged.

A check's or oracle's ``assets`` (and every argv entry naming an existing file) are
fingerprinted when a run opens; a check whose assets changed since then errors (a
fail), because CHECKING must use assets the worker cannot write.

Every command the loop runs (a command source, a command worker, checks, oracles) gets a
minimal environment plus what it declares: ``env:`` values and ``secrets:`` names taken
from the runner's environment, validated as a step's are (``definition._env``).

Relative paths are resolved against the loop file's directory, and commands run
there. Durations are ``90s``, ``10m``, ``2h``, ``2d`` (a bare number means seconds).
Every problem found is reported at once, each naming the file and the field. The file is
read with the workflow loader's bounded YAML loader and held to the same bounds
(``statewright.definition.limits``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import field, replace
from enum import StrEnum
from pathlib import Path

import yaml

from statewright._errors import DefinitionError
from statewright._record import record
from statewright.definition._env import parse_step_env
from statewright.definition._yaml import load_yaml, yaml_problem
from statewright.definition.durations import parse_duration_seconds
from statewright.definition.limits import (
    MAX_ATTEMPTS,
    MAX_COUNT,
    MAX_DEFINITION_BYTES,
    MAX_MONEY_USD,
    NAME,
    NAME_RULE,
    is_name,
)
from statewright.definition.loader import load_workflow, plain_definition
from statewright.loop.errors import LoopDefinitionError
from statewright.machine.loop.model import LoopConfig

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # matched whole (fullmatch)
_DEFAULT_CHECK_TIMEOUT_SECONDS = 300.0
_DEFAULT_WORKER_TIMEOUT_SECONDS = 3600.0
MAX_PARALLEL = 64  # passes at once: each is a worker process and a workspace

_TOP = frozenset(
    {
        "loop",
        "source",
        "workflow",
        "check",
        "gate",
        "goal",
        "budgets",
        "attempts_per_item",
        "stuck_after",
        "restart_limit",
        "kill_switch",
        "parallel",
    }
)
_REQUIRED = ("loop", "source", "workflow", "check", "goal", "budgets")


class SourceKind(StrEnum):
    """Where the backlog comes from."""

    JSONL = "jsonl"
    COMMAND = "command"
    DIRECTORY = "directory"


@record
class CommandSpec:
    """A command to run: argv (no shell), a timeout, a name for the record, and the
    variables it declares (``env`` values, ``secrets`` names from the runner's environment)."""

    name: str
    argv: tuple[str, ...]
    timeout_seconds: float
    assets: tuple[Path, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()


@record
class SourceSpec:
    kind: SourceKind
    path: Path | None = None
    command: CommandSpec | None = None


@record
class WorkerSpec:
    """Either a workflow file for the task engine, or a command run per item."""

    workflow_path: Path | None = None
    command: CommandSpec | None = None


@record
class GateSpec:
    role: str
    timeout_seconds: float | None = None


@record
class GoalSpec:
    all_items_closed: bool
    oracles: tuple[CommandSpec, ...]


@record
class BudgetSpec:
    passes: int
    tokens: int | None = None
    money_usd: float | None = None
    wall_time_seconds: float | None = None
    pass_tokens: int | None = None  # budgets.per_pass: what one pass may spend
    pass_money_usd: float | None = None


@record
class LoopDefinition:
    """A validated loop file."""

    name: str
    path: str
    base_dir: Path
    source: SourceSpec
    worker: WorkerSpec
    checks: tuple[CommandSpec, ...]
    goal: GoalSpec
    budgets: BudgetSpec
    gate: GateSpec | None = None
    attempts_per_item: int = 3
    stuck_after: int = 5
    restart_limit: int = 2
    kill_switch_file: Path | None = None
    sha256: str = ""
    parallel: int = 1

    def config(self) -> LoopConfig:
        """What the pure reducer needs from this definition."""
        gate_timeout = self.gate.timeout_seconds if self.gate else None
        wall = self.budgets.wall_time_seconds
        return LoopConfig(
            loop=self.name,
            check_names=tuple(c.name for c in self.checks),
            oracle_names=tuple(o.name for o in self.goal.oracles),
            max_passes=self.budgets.passes,
            all_items_closed=self.goal.all_items_closed,
            gate_role=self.gate.role if self.gate else None,
            gate_timeout_ms=None if gate_timeout is None else int(gate_timeout * 1000),
            max_tokens=self.budgets.tokens,
            max_money_usd=self.budgets.money_usd,
            wall_time_ms=None if wall is None else int(wall * 1000),
            attempts_per_item=self.attempts_per_item,
            stuck_after=self.stuck_after,
            restart_limit=self.restart_limit,
            parallel=self.parallel,
            pass_tokens=self.budgets.pass_tokens,
            pass_money_usd=self.budgets.pass_money_usd,
        )

    def check(self, name: str) -> CommandSpec | None:
        return next((c for c in self.checks if c.name == name), None)

    def oracle(self, name: str) -> CommandSpec | None:
        return next((o for o in self.goal.oracles if o.name == name), None)

    def describe(self) -> str:
        """One line: ``loop fix-backlog: jsonl source -> command worker; checks [..]; ...``."""
        worker = "command worker" if self.worker.command is not None else f"workflow {self.worker.workflow_path}"
        checks = ", ".join(c.name for c in self.checks)
        oracles = ", ".join(o.name for o in self.goal.oracles)
        gate = f"; gate role {self.gate.role}" if self.gate else ""
        parallel = f", {self.parallel} at once" if self.parallel > 1 else ""
        return (
            f"loop {self.name}: {self.source.kind} source -> {worker}; checks [{checks}]{gate};"
            f" goal oracles [{oracles}]; at most {self.budgets.passes} passes{parallel}"
        )

    def commands(self) -> tuple[CommandSpec, ...]:
        """Every command the loop runs itself: source, worker, checks, goal oracles."""
        own = (self.source.command, self.worker.command)
        return (*(c for c in own if c is not None), *self.checks, *self.goal.oracles)


def load_loop(path: str | Path) -> LoopDefinition:
    """Read and validate a loop file. Raise LoopDefinitionError naming the file and field."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_DEFINITION_BYTES + 1)
    except OSError as exc:
        msg = f"cannot read the loop file: {exc.strerror or exc}; check the path"
        raise LoopDefinitionError([msg], source=str(p)) from None
    if len(raw) > MAX_DEFINITION_BYTES:
        msg = f"the file is over {MAX_DEFINITION_BYTES:,} bytes, the most a definition may be"
        raise LoopDefinitionError([msg], source=str(p))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}; save the file as UTF-8"
        raise LoopDefinitionError([msg], source=str(p)) from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise LoopDefinitionError([yaml_problem(exc)], source=str(p)) from None
    return parse_loop(data, source=str(p), base_dir=p.resolve().parent, sha256=hashlib.sha256(raw).hexdigest())


def parse_loop(
    data: object, *, source: str = "<loop>", base_dir: Path | None = None, sha256: str = ""
) -> LoopDefinition:
    """Validate a loop definition given as a dict (what the YAML file holds)."""
    if isinstance(data, Mapping):
        try:
            data = plain_definition(data, source)
        except DefinitionError as exc:
            raise LoopDefinitionError(exc.problems, source=source) from None
    v = _Validator(source, base_dir or Path.cwd())
    definition = v.loop(data)
    if v.problems or definition is None:
        raise LoopDefinitionError(v.problems or ["empty definition"], source=source)
    definition = replace(definition, sha256=sha256)
    try:
        definition.config()
    except LoopDefinitionError as exc:
        raise LoopDefinitionError(exc.problems, source=source) from None
    return definition


class _Validator:
    """Collects every problem, each naming its field, then builds the definition."""

    def __init__(self, source: str, base_dir: Path) -> None:
        self.source = source
        self.base_dir = base_dir
        self.problems: list[str] = []

    def bad(self, field: str, msg: str) -> None:
        self.problems.append(f"{field}: {msg}")

    def loop(self, data: object) -> LoopDefinition | None:
        if not isinstance(data, Mapping):
            self.bad("(top level)", f"expected a mapping of fields, got {_kind(data)}")
            return None
        for key in data:
            if key not in _TOP:
                self.bad(str(key), f"unknown field; the fields are {', '.join(sorted(_TOP))}")
        for key in _REQUIRED:
            if key not in data:
                self.bad(key, "required field is missing")
        name = data.get("loop")
        if "loop" in data and not is_name(name, _NAME):
            self.bad("loop", f"expected a name of letters, digits, '.', '_', '-', got {name!r}")
        source = self.source_spec(data.get("source")) if "source" in data else None
        worker = self.worker(data.get("workflow")) if "workflow" in data else None
        checks = self.commands("check", data.get("check"), "check") if "check" in data else ()
        goal = self.goal(data.get("goal")) if "goal" in data else None
        budgets = self.budgets(data.get("budgets")) if "budgets" in data else None
        gate = self.gate(data["gate"]) if data.get("gate") is not None else None
        attempts = self.count("attempts_per_item", data.get("attempts_per_item", 3), minimum=1, maximum=MAX_ATTEMPTS)
        stuck = self.count("stuck_after", data.get("stuck_after", 5), minimum=1, maximum=MAX_ATTEMPTS)
        restarts = self.count("restart_limit", data.get("restart_limit", 2), minimum=0, maximum=MAX_ATTEMPTS)
        kill = self.kill_switch(data["kill_switch"]) if data.get("kill_switch") else None
        parallel = self.count("parallel", data.get("parallel", 1), minimum=1, maximum=MAX_PARALLEL)
        if budgets is not None:
            self.parallel_fits(parallel, budgets)
        if (
            self.problems
            or not isinstance(name, str)
            or source is None
            or worker is None
            or goal is None
            or budgets is None
        ):
            return None
        return LoopDefinition(
            name=name,
            path=self.source,
            base_dir=self.base_dir,
            source=source,
            worker=worker,
            checks=checks,
            goal=goal,
            budgets=budgets,
            gate=gate,
            attempts_per_item=attempts,
            stuck_after=stuck,
            restart_limit=restarts,
            kill_switch_file=kill,
            parallel=parallel,
        )

    def parallel_fits(self, parallel: int, budgets: BudgetSpec) -> None:
        """A wave never outgrows the budgets: ``parallel`` within the passes, and with more
        than one pass at once, what one pass may spend declared for every capped resource."""
        if parallel > budgets.passes:
            self.bad("parallel", f"{parallel} passes at once is over the budget of {budgets.passes} passes"
                                 " (budgets.passes); lower parallel or raise the budget")
        for name, cap, share in (("tokens", budgets.tokens, budgets.pass_tokens),
                                 ("money_usd", budgets.money_usd, budgets.pass_money_usd)):
            if cap is not None and share is not None and share > cap:
                self.bad(f"budgets.per_pass.{name}", f"{share:g} is over the whole budget of {cap:g}")
            if parallel > 1 and cap is not None and share is None:
                self.bad(f"budgets.per_pass.{name}", f"required with parallel: {parallel} and budgets.{name}: what one"
                                                     " pass may spend is reserved when it launches, so that passes"
                                                     " at once never overspend")

    # -- pieces

    def mapping(self, field: str, value: object, allowed: set[str]) -> Mapping[str, object] | None:
        if not isinstance(value, Mapping):
            self.bad(field, f"expected a mapping with {', '.join(sorted(allowed))}, got {_kind(value)}")
            return None
        for key in value:
            if key not in allowed:
                self.bad(f"{field}.{key}", f"unknown field; allowed: {', '.join(sorted(allowed))}")
        return value

    def source_spec(self, value: object) -> SourceSpec | None:
        kinds = {k.value for k in SourceKind}
        m = self.mapping("source", value, kinds | {"timeout", "env", "secrets"})
        if m is None:
            return None
        given = [k for k in m if k in kinds]
        if len(given) != 1:
            self.bad("source", f"give exactly one of jsonl, command, directory; got {given or 'none'}")
            return None
        kind = SourceKind(given[0])
        if kind is SourceKind.COMMAND:
            timeout = self.duration("source.timeout", m.get("timeout", "60s"))
            argv = self.argv("source.command", m["command"])
            env, secrets = self.declared("source", m)
            if argv is None:
                return None
            return SourceSpec(kind, command=CommandSpec("source", argv, timeout, env=env, secrets=secrets))
        for key, what in (("timeout", "a timeout"), ("env", "env"), ("secrets", "secrets")):
            if key in m:
                self.bad(f"source.{key}", f"only a command source takes {what}")
        path = self.path(f"source.{kind.value}", m[kind.value])
        return None if path is None else SourceSpec(kind, path=path)

    def worker(self, value: object) -> WorkerSpec | None:
        if isinstance(value, str):
            path = self.path("workflow", value)
            if path is None:
                return None
            try:
                load_workflow(path)
            except DefinitionError as exc:
                self.bad("workflow", f"{value}: {exc.problems[0] if exc.problems else 'not a workflow'}")
                return None
            return WorkerSpec(workflow_path=path)
        m = self.mapping("workflow", value, {"command", "timeout", "env", "secrets"})
        if m is None:
            return None
        if "command" not in m:
            self.bad("workflow.command", "required: the argv run for each item")
            return None
        timeout = self.duration("workflow.timeout", m.get("timeout", _DEFAULT_WORKER_TIMEOUT_SECONDS))
        argv = self.argv("workflow.command", m["command"])
        env, secrets = self.declared("workflow", m)
        if argv is None:
            return None
        return WorkerSpec(command=CommandSpec("worker", argv, timeout, env=env, secrets=secrets))

    def commands(self, field: str, value: object, prefix: str) -> tuple[CommandSpec, ...]:
        if not isinstance(value, list) or not value:
            self.bad(field, f"expected a non-empty list of {{command: [...]}}, got {_kind(value)}")
            return ()
        out: list[CommandSpec] = []
        for i, entry in enumerate(value):
            where = f"{field}[{i}]"
            m = self.mapping(where, entry, {"name", "command", "timeout", "assets", "env", "secrets"})
            if m is None:
                continue
            name = m.get("name", f"{prefix}{i + 1}")
            if not is_name(name, _NAME):
                self.bad(f"{where}.name", f"expected a short name (letters, digits, . _ -), got {name!r}")
                continue
            if "command" not in m:
                self.bad(f"{where}.command", "required: the argv to run")
                continue
            argv = self.argv(f"{where}.command", m["command"])
            timeout = self.duration(f"{where}.timeout", m.get("timeout", _DEFAULT_CHECK_TIMEOUT_SECONDS))
            assets = self.assets(f"{where}.assets", m.get("assets", []))
            env, secrets = self.declared(where, m)
            if argv is not None:
                out.append(CommandSpec(name, argv, timeout, assets, env, secrets))
        names = [c.name for c in out]
        for name in sorted({n for n in names if names.count(n) > 1}):
            self.bad(field, f"the name {name!r} is used twice; names must be unique")
        return tuple(out)

    def goal(self, value: object) -> GoalSpec | None:
        m = self.mapping("goal", value, {"all_items_closed", "oracles"})
        if m is None:
            return None
        closed = m.get("all_items_closed", True)
        if not isinstance(closed, bool):
            self.bad("goal.all_items_closed", f"expected true or false, got {_kind(closed)}")
        if "oracles" not in m:
            self.bad("goal.oracles", "required: at least one command a machine can check")
            return None
        oracles = self.commands("goal.oracles", m["oracles"], "oracle")
        return GoalSpec(closed if isinstance(closed, bool) else True, oracles)

    def budgets(self, value: object) -> BudgetSpec | None:
        m = self.mapping("budgets", value, {"passes", "tokens", "money_usd", "wall_time", "per_pass"})
        if m is None:
            return None
        if "passes" not in m:
            self.bad("budgets.passes", "required: a hard cap on passes is the floor of every loop")
            return None
        passes = self.count("budgets.passes", m["passes"], minimum=1)
        tokens = self.count("budgets.tokens", m["tokens"], minimum=1) if "tokens" in m else None
        money = self.money("budgets.money_usd", m["money_usd"]) if "money_usd" in m else None
        wall = self.duration("budgets.wall_time", m["wall_time"]) if "wall_time" in m else None
        pass_tokens = pass_money = None
        if "per_pass" in m:
            share = self.mapping("budgets.per_pass", m["per_pass"], {"tokens", "money_usd"})
            if share is not None:
                if "tokens" in share:
                    pass_tokens = self.count("budgets.per_pass.tokens", share["tokens"], minimum=1)
                if "money_usd" in share:
                    pass_money = self.money("budgets.per_pass.money_usd", share["money_usd"])
        return BudgetSpec(passes, tokens, money, wall, pass_tokens, pass_money)

    def money(self, field: str, raw: object) -> float | None:
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 < raw <= MAX_MONEY_USD:
            self.bad(field, f"expected a positive number up to {MAX_MONEY_USD:,.0f}, got {_kind(raw)}")
            return None
        return float(raw)

    def gate(self, value: object) -> GateSpec | None:
        m = self.mapping("gate", value, {"role", "timeout"})
        if m is None:
            return None
        role = m.get("role")
        if not is_name(role, NAME):
            self.bad("gate.role", f"expected the role that must approve, a name of {NAME_RULE}; got {_kind(role)}")
            return None
        timeout = self.duration("gate.timeout", m["timeout"]) if "timeout" in m else None
        return GateSpec(role, timeout)

    def kill_switch(self, value: object) -> Path | None:
        m = self.mapping("kill_switch", value, {"file"})
        if m is None:
            return None
        if "file" not in m:
            self.bad("kill_switch.file", "required: the path whose existence stops the run")
            return None
        return self.path("kill_switch.file", m["file"])

    def declared(self, field: str, m: Mapping[str, object]) -> tuple[dict[str, str], tuple[str, ...]]:
        """The ``env`` values and ``secrets`` names a command declares, checked as a step's."""
        env, secrets, problems = parse_step_env(m)
        for problem in problems:
            self.bad(field, problem)
        return env, secrets

    # -- scalars

    def argv(self, field: str, value: object) -> tuple[str, ...] | None:
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(a, str | int | float) and not isinstance(a, bool) for a in value)
        ):
            self.bad(field, f"expected a non-empty list of strings (argv, no shell), got {_kind(value)}")
            return None
        return tuple(str(a) for a in value)

    def assets(self, field: str, value: object) -> tuple[Path, ...]:
        if not isinstance(value, list):
            self.bad(field, f"expected a list of paths the worker must not write, got {_kind(value)}")
            return ()
        paths = (self.path(f"{field}[{i}]", v) for i, v in enumerate(value))
        return tuple(p for p in paths if p is not None)

    def path(self, field: str, value: object) -> Path | None:
        if not (isinstance(value, str) and value.strip()):
            self.bad(field, f"expected a path, got {_kind(value)}")
            return None
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    def duration(self, field: str, value: object) -> float:
        try:
            return parse_duration_seconds(value)
        except ValueError as exc:
            self.bad(field, str(exc))
            return 0.0

    def count(self, field: str, value: object, *, minimum: int, maximum: int = MAX_COUNT) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.bad(field, f"expected a whole number, got {_kind(value)}")
            return minimum
        if value < minimum:
            self.bad(field, f"must be at least {minimum}, got {value}")
            return minimum
        if value > maximum:
            self.bad(field, f"must be at most {maximum}, got {_kind(value)}")
            return minimum
        return value


def _kind(value: object) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"
