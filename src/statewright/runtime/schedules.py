"""Schedules: cron expressions that start one task per slot.

    tick (now) -> due_slots: per schedule, the latest slot at or before now, unless a task
                  was started for it (the submit key schedule:NAME:SLOT) or it is missed
               -> fire_due: submit under that key: one task per slot, however many
                  schedulers run on the same store (a second submit returns the first task)

A schedules file (YAML):

    schedules:
      - name: nightly-triage             # a name, unique in the file
        workflow: triage.yaml            # relative to this file
        cron: "0 2 * * *"                # five fields, or @hourly, @daily, @weekly, @monthly, @yearly
        timezone: Europe/Paris           # IANA name (default UTC): slots are read in this zone
        input: {queue: inbox}            # the task's input, checked against the workflow now
        catch_up: skip                   # or one (default skip), see below
        grace: 5m                        # how late a slot may start and still be on time (default 1m)

A slot is on time until ``grace`` after it. A slot missed while no scheduler ran (no task for
it, and the grace is over) is skipped (``catch_up: skip``), or (``catch_up: one``) the latest
missed slot is started once, however many were missed; earlier ones never are. With ``one``,
a new schedule starts its latest past slot when it first runs.

The slot key is in UTC, so the same instant has one key in every zone and across a change of
daylight saving time. The clock is the engine's: tests move a FakeClock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statewright._errors import DefinitionError, InputError, StatewrightError, VersionConflictError
from statewright._record import record
from statewright.definition.durations import parse_duration_seconds
from statewright.definition.limits import NAME_RULE, is_name
from statewright.definition.loader import load_workflow, read_definition_text
from statewright.definition.model import Workflow

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from statewright.runtime.engine import Engine

DEFAULT_GRACE_SECONDS = 60.0
MAX_SCHEDULES = 1000
MAX_WAIT_SECONDS = 30.0  # a running scheduler looks again at least this often
_FIELDS = {"name", "workflow", "cron", "timezone", "input", "catch_up", "grace"}
_MACROS = {"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually"}


class CatchUp(StrEnum):
    SKIP = "skip"  # a missed slot is not started
    ONE = "one"  # the latest missed slot is started once


@record
class Schedule:
    name: str
    workflow: Workflow = field(repr=False)
    workflow_file: str
    cron: str
    timezone: str = "UTC"
    input: Mapping[str, Any] = field(default_factory=dict)
    catch_up: CatchUp = CatchUp.SKIP
    grace_seconds: float = DEFAULT_GRACE_SECONDS

    def zone(self) -> ZoneInfo:
        from zoneinfo import ZoneInfo

        return ZoneInfo(self.timezone)

    def latest_slot_ms(self, now_ms: int) -> int:
        """The latest slot at or before ``now_ms``."""
        from croniter import croniter

        now = datetime.fromtimestamp(now_ms / 1000, self.zone())
        it = croniter(self.cron, now.replace(microsecond=0) + timedelta(seconds=1))
        while True:
            slot = _ms(it.get_prev(datetime))
            if slot <= now_ms:
                return slot

    def next_slots_ms(self, now_ms: int, count: int) -> list[int]:
        """The next ``count`` slots after ``now_ms``."""
        from croniter import croniter

        it = croniter(self.cron, datetime.fromtimestamp(now_ms / 1000, self.zone()))
        return [_ms(it.get_next(datetime)) for _ in range(count)]

    def key(self, slot_ms: int) -> str:
        """The submit key of a slot: ``schedule:NAME:2026-12-02T01:00:00Z``."""
        return f"schedule:{self.name}:{datetime.fromtimestamp(slot_ms / 1000, UTC):%Y-%m-%dT%H:%M:%SZ}"

    def shown(self, slot_ms: int) -> str:
        """A slot as people read it, in the schedule's zone: ``2026-12-03 02:00 CET``."""
        return datetime.fromtimestamp(slot_ms / 1000, self.zone()).strftime("%Y-%m-%d %H:%M %Z")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@record
class Fired:
    """A slot's task: ``started`` False when another scheduler started it first."""

    schedule: Schedule
    slot_ms: int
    task_id: str
    started: bool


# --- the schedules file --------------------------------------------------------------------


def load_schedules(path: str | Path) -> list[Schedule]:
    """Read and check a schedules file; every problem is one line of a DefinitionError naming
    the file and the schedule."""
    import yaml

    from statewright.definition._yaml import load_yaml, yaml_problem

    source = str(path)
    text = read_definition_text(path)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise DefinitionError([yaml_problem(exc)], source) from None
    if not isinstance(data, Mapping) or set(data) != {"schedules"} or not isinstance(data["schedules"], list):
        raise DefinitionError(["a schedules file is a mapping with one key, 'schedules': a list of schedules"], source)
    entries = data["schedules"]
    if not entries or len(entries) > MAX_SCHEDULES:
        raise DefinitionError([f"'schedules' must list 1 to {MAX_SCHEDULES} schedules, got {len(entries)}"], source)
    problems: list[str] = []
    out: list[Schedule] = []
    base = Path(path).parent
    for i, raw in enumerate(entries):
        schedule = _parse(raw, i, base, problems)
        if schedule is None:
            continue
        if any(s.name == schedule.name for s in out):
            problems.append(f"schedule {schedule.name!r}: the name is used twice; names must be unique")
            continue
        out.append(schedule)
    if problems:
        raise DefinitionError(problems, source)
    return out


def _parse(raw: object, index: int, base: Path, problems: list[str]) -> Schedule | None:
    if not isinstance(raw, Mapping):
        problems.append(f"schedules[{index}]: a schedule must be a mapping, got {type(raw).__name__}")
        return None
    name = raw.get("name")
    if not is_name(name):
        problems.append(f"schedules[{index}]: 'name' must be a name of {NAME_RULE}; got {name!r}")
        return None
    where = f"schedule {name!r}"
    start = len(problems)
    unknown = sorted(str(k) for k in raw if k not in _FIELDS)
    if unknown:
        problems.append(f"{where}: unknown field(s) {unknown}; allowed: {', '.join(sorted(_FIELDS))}")
    cron = raw.get("cron")
    cron_problem = cron_expression_problem(cron)
    if cron_problem is not None:
        problems.append(f"{where}: cron: {cron_problem}")
    timezone = raw.get("timezone", "UTC")
    zone_problem = timezone_problem(timezone)
    if zone_problem is not None:
        problems.append(f"{where}: timezone: {zone_problem}")
    catch_up = CatchUp.SKIP
    if "catch_up" in raw:
        try:
            catch_up = CatchUp(raw["catch_up"])
        except ValueError:
            problems.append(f"{where}: catch_up must be one or skip, got {raw['catch_up']!r}")
    grace = DEFAULT_GRACE_SECONDS
    if "grace" in raw:
        try:
            grace = parse_duration_seconds(raw["grace"])
        except ValueError as exc:
            problems.append(f"{where}: grace: {exc}")
    payload = raw.get("input", {})
    if not isinstance(payload, Mapping):
        problems.append(f"{where}: input must be a mapping (a JSON object), got {type(payload).__name__}")
        payload = {}
    wf_file = raw.get("workflow")
    workflow = None
    if not isinstance(wf_file, str) or not wf_file:
        problems.append(f"{where}: 'workflow' must name a workflow file (relative to the schedules file)")
    else:
        wf_path = base / wf_file
        try:
            workflow = load_workflow(wf_path)
        except DefinitionError as exc:
            problems.append(f"{where}: workflow {wf_path}: {exc.problems[0]}"
                            + (f" (and {len(exc.problems) - 1} more; statewright validate {wf_path})"
                               if len(exc.problems) > 1 else ""))
        else:
            payload = _checked_input(workflow, payload, where, problems)
    if workflow is None or len(problems) > start:
        return None
    return Schedule(name=str(name), workflow=workflow, workflow_file=str(base / str(wf_file)), cron=str(cron),
                    timezone=str(timezone), input=payload, catch_up=catch_up, grace_seconds=grace)


def _checked_input(workflow: Workflow, payload: Mapping[str, Any], where: str, problems: list[str]) -> dict[str, Any]:
    from statewright.runtime.inputs import task_input

    try:
        return dict(task_input(workflow, dict(payload)))
    except InputError as exc:
        problems.append(f"{where}: input: {exc}")
        return {}


def cron_expression_problem(value: object) -> str | None:
    """Why ``value`` is not a cron expression this scheduler takes, or None."""
    from croniter import croniter

    if not isinstance(value, str) or not value.strip():
        return f"must be a cron expression of five fields (\"0 2 * * *\") or a macro such as @daily, got {value!r}"
    text = value.strip()
    if text.lower() not in _MACROS and len(text.split()) != 5:
        return (f"{text!r} has {len(text.split())} fields; use five (minute hour day-of-month month day-of-week) "
                f"or one of {', '.join(sorted(_MACROS))}")
    if not croniter.is_valid(text):
        return f"{text!r} is not a valid cron expression (a field is out of range or malformed)"
    return None


def timezone_problem(value: object) -> str | None:
    """Why ``value`` is not an IANA time zone name, or None."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(value, str) or not value:
        return f"must be an IANA time zone name such as Europe/Paris or UTC, got {value!r}"
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        return f"{value!r} is not a known IANA time zone (such as Europe/Paris, America/New_York or UTC)"
    return None


# --- firing --------------------------------------------------------------------------------


def due_slots(engine: Engine, schedules: Sequence[Schedule], now_ms: int | None = None) -> list[tuple[Schedule, int]]:
    """The slots to start now: per schedule, its latest slot at or before ``now_ms`` when no
    task was started for it and it is on time (or ``catch_up: one``)."""
    now = engine.clock.now_ms() if now_ms is None else now_ms
    due = []
    for schedule in schedules:
        slot = schedule.latest_slot_ms(now)
        late = (now - slot) / 1000 > schedule.grace_seconds
        if late and schedule.catch_up is CatchUp.SKIP:
            continue
        if engine.store.task_by_key(schedule.key(slot)) is None:
            due.append((schedule, slot))
    return due


def fire_due(engine: Engine, schedules: Sequence[Schedule], now_ms: int | None = None) -> list[Fired]:
    """Start a task for every due slot, under the slot's key: two schedulers on one store
    start each slot once (the loser's submit returns the winner's task)."""
    from statewright.runtime.engine import new_task_id

    fired = []
    for schedule, slot in due_slots(engine, schedules, now_ms):
        key = schedule.key(slot)
        mine = new_task_id(engine.clock.now_ms())
        try:
            tid = engine.submit(schedule.workflow, dict(schedule.input), key=key, task_id=mine)
        except VersionConflictError:  # another scheduler inserted the same key first
            found = engine.store.task_by_key(key)
            if found is None:
                raise
            tid = found
        fired.append(Fired(schedule, slot, tid, started=tid == mine))
    return fired


def run_schedules(
    engine: Engine,
    schedules: Sequence[Schedule],
    *,
    stop: threading.Event,
    once: bool = False,
    on_fire: Callable[[Fired], None] = lambda fired: None,
    on_error: Callable[[StatewrightError], None] | None = None,
) -> None:
    """Fire due slots until ``stop`` is set (or once), sleeping on the engine's clock until the
    next slot (at most MAX_WAIT_SECONDS at a time). A store error while starting a slot is
    passed to ``on_error`` and tried again at the next look (the slot's key keeps it once);
    without ``on_error`` it is raised."""
    while not stop.is_set():
        try:
            for fired in fire_due(engine, schedules):
                on_fire(fired)
        except StatewrightError as exc:
            if on_error is None or isinstance(exc, DefinitionError | InputError):
                raise
            on_error(exc)
        if once:
            return
        now = engine.clock.now_ms()
        upcoming = min(s.next_slots_ms(now, 1)[0] for s in schedules)
        engine.clock.sleep(min(MAX_WAIT_SECONDS, max(0.0, (upcoming - now) / 1000)), stop)
