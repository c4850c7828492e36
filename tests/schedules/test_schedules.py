"""Schedules start one task per cron slot, on every store backend, on a fake clock: a slot is
started once however many schedulers look (the submit key schedule:NAME:SLOT), a missed slot
is skipped or started once as configured, and a bad file is refused one line per problem."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from statewright import DefinitionError
from statewright.cli import cli
from statewright.machine.state import TaskStatus
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.schedules import Fired, due_slots, fire_due, load_schedules, run_schedules
from statewright.runtime.worker import Worker

WORKFLOW = """\
workflow: report
input_schema:
  type: object
  properties: {team: {type: string}}
  required: [team]
steps:
  - id: write
    kind: code
    owner: ops
    run: {command: ["true"]}
"""


def at(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(at("2026-12-02T01:00:10"))


@pytest.fixture
def engine_defaults(clock: FakeClock, tmp_path: Path) -> Callable[[], dict[str, object]]:
    return lambda: {"clock": clock, "workspace_root": tmp_path / "workspaces"}


def schedules_file(tmp_path: Path, body: str) -> Path:
    (tmp_path / "report.yaml").write_text(WORKFLOW, encoding="utf-8")
    path = tmp_path / "schedules.yaml"
    path.write_text(body, encoding="utf-8")
    return path


def hourly(tmp_path: Path, catch_up: str = "skip") -> Path:
    return schedules_file(tmp_path, f"""\
schedules:
  - name: hourly-report
    workflow: report.yaml
    cron: "0 * * * *"
    timezone: Europe/Paris
    input: {{team: ops}}
    catch_up: {catch_up}
""")


def keys(engine: Engine) -> list[str]:
    tasks = engine.store.list_tasks()
    return sorted(k for t in tasks if (k := _key_of(engine, t.task_id)))


def _key_of(engine: Engine, task_id: str) -> str:
    for key in (f"schedule:hourly-report:2026-12-02T{h:02d}:00:00Z" for h in range(24)):
        if engine.store.task_by_key(key) == task_id:
            return key
    return ""


def test_a_slot_is_started_once_by_two_schedulers_on_one_store(
    open_engine: Callable[..., Engine], tmp_path: Path,
) -> None:
    """Two schedulers (two engines on the same database) look at the same moment, at once, in
    threads: one task for the slot; a scheduler that fires it too names that task; looking
    again starts nothing."""
    schedules = load_schedules(hourly(tmp_path))
    engines = [open_engine(), open_engine()]
    barrier = threading.Barrier(2)
    results: list[list[Fired]] = [[], []]
    errors: list[BaseException] = []

    def look(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fire_due(engines[i], schedules)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=look, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    fired = results[0] + results[1]
    assert [f.started for f in fired].count(True) == 1
    assert len({f.task_id for f in fired}) == 1
    assert {f.slot_ms for f in fired} == {at("2026-12-02T01:00:00")}
    assert keys(engines[0]) == ["schedule:hourly-report:2026-12-02T01:00:00Z"]
    assert fire_due(engines[1], schedules) == [] and len(engines[0].store.list_tasks()) == 1


def test_a_scheduler_that_found_the_slot_due_and_lost_the_race_names_the_winners_task(
    open_engine: Callable[..., Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B saw the slot due before A started it; B's submit under the slot's key returns A's
    task, reported as not started by B."""
    from statewright.runtime import schedules as module

    schedules = load_schedules(hourly(tmp_path))
    a, b = open_engine(), open_engine()
    seen_due = due_slots(b, schedules)
    [won] = fire_due(a, schedules)
    monkeypatch.setattr(module, "due_slots", lambda engine, found, now_ms=None: seen_due)
    [lost] = fire_due(b, schedules)
    assert (won.started, lost.started, lost.task_id) == (True, False, won.task_id)
    assert len(a.store.list_tasks()) == 1


def test_skip_never_starts_a_missed_slot(open_engine: Callable[..., Engine], clock: FakeClock,
                                         tmp_path: Path) -> None:
    """01:00 starts on time; nothing runs from 01:30 to 04:30, so 02:00, 03:00 and 04:00 are
    missed and skipped; 05:00 starts on time (within the default minute of grace)."""
    schedules = load_schedules(hourly(tmp_path, "skip"))
    engine = open_engine()
    assert [f.started for f in fire_due(engine, schedules)] == [True]
    clock.advance(3.5 * 3600)
    assert due_slots(engine, schedules) == []
    assert fire_due(engine, schedules) == []
    clock.advance(1800 + 30)  # 05:00:40
    [fired] = fire_due(engine, schedules)
    assert fired.slot_ms == at("2026-12-02T05:00:00")
    assert keys(engine) == ["schedule:hourly-report:2026-12-02T01:00:00Z",
                            "schedule:hourly-report:2026-12-02T05:00:00Z"]


def test_one_starts_the_latest_missed_slot_once(open_engine: Callable[..., Engine], clock: FakeClock,
                                                tmp_path: Path) -> None:
    """With catch_up: one the same outage starts one task, for 04:00, and no other."""
    schedules = load_schedules(hourly(tmp_path, "one"))
    engine = open_engine()
    fire_due(engine, schedules)
    clock.advance(3.5 * 3600)  # 04:30:10
    [fired] = fire_due(engine, schedules)
    assert (fired.started, fired.schedule.shown(fired.slot_ms)) == (True, "2026-12-02 05:00 CET")
    assert fire_due(engine, schedules) == []
    clock.advance(600)
    assert fire_due(engine, schedules) == []
    assert keys(engine) == ["schedule:hourly-report:2026-12-02T01:00:00Z",
                            "schedule:hourly-report:2026-12-02T04:00:00Z"]


def test_a_running_scheduler_starts_each_slot_as_its_clock_reaches_it(
    open_engine: Callable[..., Engine], clock: FakeClock, tmp_path: Path,
) -> None:
    """run_schedules sleeps on the engine's clock to the next slot; the tasks it starts carry
    the schedule's input and a worker completes them."""
    schedules = load_schedules(hourly(tmp_path))
    engine = open_engine()
    stop = threading.Event()
    fired: list[Fired] = []

    def seen(f: Fired) -> None:
        fired.append(f)
        if len(fired) == 4:
            stop.set()

    run_schedules(engine, schedules, stop=stop, on_fire=seen)
    assert [f.schedule.shown(f.slot_ms) for f in fired] == [
        "2026-12-02 02:00 CET", "2026-12-02 03:00 CET", "2026-12-02 04:00 CET", "2026-12-02 05:00 CET"]
    assert all(f.started for f in fired)
    Worker(engine).run(until_idle=True)
    for f in fired:
        state = engine.state(f.task_id)
        assert state.status is TaskStatus.COMPLETED
        assert state.input["team"] == "ops"


@pytest.mark.parametrize(("entry", "line"), [
    ('cron: "61 * * * *"', "schedule 'r': cron: '61 * * * *' is not a valid cron expression (a field is out of "
                           "range or malformed)"),
    ('cron: "0 2 * *"', "schedule 'r': cron: '0 2 * *' has 4 fields; use five (minute hour day-of-month month "
                        "day-of-week) or one of @annually, @daily, @hourly, @midnight, @monthly, @weekly, @yearly"),
    ('cron: "0 2 * * *"\n    timezone: Mars/Olympus',
     "schedule 'r': timezone: 'Mars/Olympus' is not a known IANA time zone (such as Europe/Paris, "
     "America/New_York or UTC)"),
    ('cron: "0 2 * * *"\n    catch_up: all', "schedule 'r': catch_up must be one or skip, got 'all'"),
    ('cron: "0 2 * * *"\n    input: {team: 7}', None),
])
def test_a_bad_schedule_is_one_line_and_starts_nothing(
    entry: str, line: str | None, tmp_path: Path, store_url: str,
) -> None:
    given = entry if "input:" in entry else f"{entry}\n    input: {{team: ops}}"
    path = schedules_file(tmp_path, f"schedules:\n  - name: r\n    workflow: report.yaml\n    {given}\n")
    with pytest.raises(DefinitionError) as info:
        load_schedules(path)
    [problem] = info.value.problems
    if line is None:
        assert problem.startswith("schedule 'r': input: ") and "team" in problem
    else:
        assert problem == line
    result = CliRunner().invoke(cli, ["schedule", "run", str(path), "--once", "--db", store_url])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [f"error: {path}: {problem}"]
    if not store_url.startswith("postgres"):
        assert not Path(store_url).exists()  # refused before the database was opened


def test_schedule_list_shows_next_slots_as_dates(tmp_path: Path) -> None:
    path = schedules_file(tmp_path, """\
schedules:
  - name: nightly
    workflow: report.yaml
    cron: "@daily"
    timezone: America/New_York
    input: {team: ops}
""")
    result = CliRunner().invoke(cli, ["schedule", "list", str(path), "--count", "2"])
    assert result.exit_code == 0, result.output
    header, row = result.output.strip().splitlines()
    assert header.split("\t") == ["NAME", "CRON", "TIMEZONE", "CATCH_UP", "WORKFLOW", "NEXT"]
    name, cron, zone, catch_up, workflow, nexts = row.split("\t")
    assert (name, cron, zone, catch_up, workflow) == ("nightly", "@daily", "America/New_York", "skip", "report")
    first, second = nexts.split(", ")
    assert first.endswith(("00:00 EST", "00:00 EDT")) and second.endswith(("00:00 EST", "00:00 EDT"))
    assert datetime.strptime(second[:16], "%Y-%m-%d %H:%M").toordinal() == \
        datetime.strptime(first[:16], "%Y-%m-%d %H:%M").toordinal() + 1


def test_schedule_run_once_from_the_cli_starts_the_due_slot_once(tmp_path: Path, store_url: str) -> None:
    path = schedules_file(tmp_path, """\
schedules:
  - name: every-minute
    workflow: report.yaml
    cron: "* * * * *"
    input: {team: ops}
""")
    first = CliRunner().invoke(cli, ["schedule", "run", str(path), "--once", "--db", store_url])
    assert first.exit_code == 0, first.output
    [line] = first.output.strip().splitlines()
    assert line.startswith("schedule every-minute: slot ") and " started task t-" in line
    engine = Engine.open(store_url)
    try:
        assert len(engine.store.list_tasks()) == 1
    finally:
        engine.close()


def test_schedule_run_starts_the_due_slot_and_stops_cleanly_on_sigterm(tmp_path: Path, store_url: str) -> None:
    """A real scheduler process: it starts the minute's slot (on time: within its minute of
    grace), says so on a line of its own at once, and exits 0 on SIGTERM."""
    import os
    import signal
    import subprocess
    import sys

    path = schedules_file(tmp_path, """\
schedules:
  - name: every-minute
    workflow: report.yaml
    cron: "* * * * *"
    input: {team: ops}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    with subprocess.Popen([sys.executable, "-m", "statewright", "schedule", "run", str(path), "--db", store_url],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            line = proc.stdout.readline()
            assert line.startswith("schedule every-minute: slot ") and " started task t-" in line, line
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    engine = Engine.open(store_url)
    try:
        assert len(engine.store.list_tasks()) >= 1
    finally:
        engine.close()
