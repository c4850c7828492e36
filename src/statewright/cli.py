"""The ``statewright`` command line. Bad input gets one clear line on stderr, never a
traceback, and changes nothing."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from statewright._cli_guard import guard as _guard
from statewright._errors import DefinitionError, InputError, StatewrightError
from statewright._exit import TASK_EXIT
from statewright.store import DEFAULT_DB

F = TypeVar("F", bound=Callable[..., Any])


def _db_option(fn: F) -> F:
    return click.option(
        "--db", envvar="STATEWRIGHT_DB", default=DEFAULT_DB, show_default=True,
        help="SQLite path or postgresql:// URL (env STATEWRIGHT_DB); 'run' also takes memory:.",
    )(fn)


def _json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def _setup_logging(quiet: bool, fmt: str) -> None:
    """statewright's log lines to stderr: text (local time with the zone) or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S%z"))
    root = logging.getLogger("statewright")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if quiet else logging.INFO)
    root.propagate = False


class _JsonLines(logging.Formatter):
    """One JSON object per line; ``at`` is the local time to the millisecond with its offset
    (ISO 8601), so lines a second apart stay in order."""

    FIELDS = ("task", "step", "attempt", "command", "event", "result", "seconds")

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")
        out: dict[str, Any] = {"at": at, "level": record.levelname.lower(),
                               "logger": record.name, "message": record.getMessage()}
        out.update({k: getattr(record, k) for k in self.FIELDS if hasattr(record, k)})
        return json.dumps(out, ensure_ascii=False, default=str)


def _shown_db(db: str) -> str:
    from statewright.store.postgres import redact

    return redact(db) if db.startswith(("postgresql://", "postgres://")) else db


def _all_done(engine: Any) -> Callable[[], bool]:
    """True once no task is running or waiting on a timer, and no loop run waits to be woken
    (checked at most every half second).
    A parent whose map step only waits for its children counts through them: while any runs,
    so does it; when they all wait for people, there is nothing left to work."""
    last = [0.0, False]

    def on_children(task: Any) -> bool:
        cur = task.state.get("current") or {}
        return not cur.get("command_id") and any(c.get("status") == "running" for c in task.state.get("children", ()))

    def done() -> bool:
        now = time.monotonic()
        if now - last[0] >= 0.5:
            last[0] = now
            busy = (t for s in ("running", "waiting") for t in engine.store.list_tasks(status=s))
            last[1] = all(on_children(t) for t in busy)
            if last[1]:  # a woken loop run is work too, until it is driven on (a gate's timer not yet
                # due is not: the run waits for a person, as a task awaiting approval does)
                due = engine.clock.now_ms()
                last[1] = not any(r["type"] == "WakeRun" and r["available_at_ms"] <= due
                                  for r in engine.store.outbox())
        return bool(last[1])

    return done


def _engine(db: str, *, create: bool = False, in_memory: bool = False) -> Any:
    """The engine on ``db``. An in-memory database (``memory:``) ends with the process, so
    only a command that does all its work in one process takes one (``in_memory``: run);
    the others refuse it, unless this process already holds that database (a program that
    drives the commands in-process, as the tests do)."""
    from statewright.runtime.engine import Engine
    from statewright.store import is_memory_url, open_store

    if is_memory_url(db) and not in_memory:
        from statewright.store.memory import database_exists

        if not database_exists(db):
            ctx = click.get_current_context(silent=True)
            name = " ".join(["statewright", *(ctx.command_path.split()[1:] if ctx is not None else [])])
            raise InputError(f"--db {db} names an in-memory database, which ends with the process; '{name}' "
                             "needs one that other processes can open (a SQLite path or a postgresql:// URL); "
                             "only 'statewright run' works in memory")
        create = True
    if create:
        _refuse_missing_directory(db)
    engine = Engine(open_store(db, create=create))
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # close the database when the command ends, however it ends
        ctx.call_on_close(engine.close)
    return engine


def _refuse_missing_directory(db: str) -> None:
    """Only the default location is made on first use: an explicit SQLite path whose
    directory is missing is a typo, not a second, empty system."""
    from urllib.parse import urlsplit

    if db == DEFAULT_DB or db.startswith(("postgresql://", "postgres://", "memory:")):
        return
    path = db
    if db.startswith("sqlite:"):
        parts = urlsplit(db)
        path = parts.path if not parts.netloc else parts.netloc + parts.path
    parent = Path(path).parent
    if not parent.is_dir():
        raise InputError(f"--db {db}: the directory {parent} does not exist; create it first "
                         f"(only the default, {DEFAULT_DB}, is made on first use)")


def _parse_input(raw: str | None, wf: Any) -> dict[str, Any]:
    """``--input``: a JSON object inline or ``@file.json``, within the bounds of
    ``statewright._json_limits`` (size, depth, integers, finite numbers, valid Unicode),
    checked against the workflow before any database is opened or created."""
    from statewright._json_limits import loads_json_object, read_regular_file
    from statewright.runtime.inputs import task_input

    if raw is None:
        return task_input(wf, {})
    if not raw.startswith("@"):
        return task_input(wf, loads_json_object(raw, "--input"))
    data = read_regular_file(raw[1:], f"--input {raw}")  # a FIFO or a device is refused unread
    return task_input(wf, loads_json_object(data, f"--input {raw}"))


@click.group()
@click.version_option(package_name="statewright")
def cli() -> None:
    """Run AI-agent work as explicit, durable state machines."""


@cli.command()
@click.argument("files", nargs=-1, required=True)
def validate(files: tuple[str, ...]) -> None:
    """Check workflow and loop files (a file with a top-level ``loop:`` is a loop file);
    print OK per file or the errors. A callable or command that cannot be found here is a
    warning (exit 0 unless a file has errors)."""
    from statewright.definition import load_workflow
    from statewright.definition.loader import is_loop_file
    from statewright.executors._reachable import unreachable_references

    bad = 0
    for f in files:
        if is_loop_file(f):
            from statewright.loop.definition import load_loop

            try:
                click.echo(f"{f}: OK  {load_loop(f).describe()}")
            except DefinitionError as exc:
                bad += 1
                for p in exc.problems:
                    click.echo(f"{f}: {p}")
            continue
        try:
            wf = load_workflow(f)
        except DefinitionError as exc:
            bad += 1
            for p in exc.problems:
                click.echo(f"{f}: {p}")
            continue
        click.echo(f"{f}: OK  {wf.describe()}")
        for warning in unreachable_references(wf, Path(f).parent):
            click.echo(f"{f}: warning: {warning}")
        for step in wf.steps:
            if step.map is not None and not step.map.workflow_hash:
                click.echo(f"{f}: warning: step {step.id!r} maps the workflow named {step.map.workflow!r}, which "
                           "is looked up in the database when a task is submitted (name a file to check it now)")
    sys.exit(1 if bad else 0)


@cli.command()
@click.argument("file")
@click.option("--input", "input_", help="JSON object, or @file.json")
@click.option("--key", help="Idempotency key: submitting again returns the same task.")
@click.option("--priority", default=0, show_default=True, type=int,
              help="Higher is claimed first (-1000 to 1000); within one priority, oldest first.")
@click.option("--tenant", help="Whose fair share and limits its steps count against (default: the workflow's "
                               "'tenant:' reference into the input, else none).")
@_db_option
@_guard
def submit(file: str, input_: str | None, key: str | None, priority: int, tenant: str | None, db: str) -> None:
    """Submit a task; prints its id."""
    from statewright.definition import load_workflow

    wf = load_workflow(file)
    data = _parse_input(input_, wf)
    engine = _engine(db, create=True)
    click.echo(engine.submit(wf, data, key=key, priority=priority, tenant=tenant))


@cli.command()
@click.option("--until-idle", is_flag=True,
              help="Exit when nothing is due NOW: a task whose timer is due in two seconds stays 'waiting'.")
@click.option("--until-done", is_flag=True,
              help="Work until no task is running or waiting on a timer (waits for due timers).")
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option("--lease", "lease", default=30.0, show_default=True, type=click.FloatRange(0.5, 60.0),
              help="Lease length in seconds.")
@click.option("--batch", default=32, show_default=True, type=click.IntRange(1, 1000),
              help="Most step outcomes one commit may carry (1: a commit per outcome).")
@click.option("--max-deliveries", default=5, show_default=True, type=click.IntRange(1, 100),
              help="Starts of one command that may end without an outcome (its worker died); "
                   "the next delivery fails it with worker_died instead of running it. A step's "
                   "retry.max_deliveries overrides it.")
@click.option("--quiet", is_flag=True, help="Log only warnings (no line per claim and outcome).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Log lines as text, or as one JSON object per line.")
@_db_option
@_guard
def worker(until_idle: bool, until_done: bool, concurrency: int, lease: float, batch: int, max_deliveries: int,
           quiet: bool, log_format: str, db: str) -> None:
    """Claim and perform due commands, logging one line per claim and per outcome (task,
    step, attempt, result, duration) to stderr. SIGTERM/Ctrl-C stops cleanly. Restart
    workers after deploying step code: a worker keeps the modules it has imported."""
    from statewright.runtime.worker import Worker

    if until_idle and until_done:
        raise InputError("give --until-idle or --until-done, not both")
    _setup_logging(quiet, log_format)
    from statewright.loop.wake import handlers

    engine = _engine(db, create=True)
    w = Worker(engine, lease_seconds=lease, concurrency=concurrency, batch=batch, max_deliveries=max_deliveries,
               handlers=handlers(engine.store))
    w.install_signal_handlers()
    logging.getLogger("statewright.worker").info(
        "worker %s started on %s (concurrency %d); python steps load from its PYTHONPATH, each module "
        "logged with its file and modification time when first loaded", w.worker_id, _shown_db(db), concurrency)
    stats = w.run(until_idle=until_idle, until=_all_done(engine) if until_done else None)
    click.echo(f"worker stopped: {stats.commands} commands, {stats.timers} timers, {stats.retries} retries")


@cli.command()
@click.argument("file")
@click.option("--input", "input_", help="JSON object, or @file.json")
@click.option("--key", help="Idempotency key.")
@_db_option
@_guard
def run(file: str, input_: str | None, key: str | None, db: str) -> None:
    """Submit, then work until the task ends or parks at a human step; print the history.
    The exit status says how it ended (``statewright._exit``): 0 completed, 3 completed early,
    4 waiting for a person, 5 halted, 6 cancelled; 1 when the command itself failed."""
    from statewright.definition import load_workflow
    from statewright.machine.state import TaskStatus
    from statewright.runtime.run import SETTLED
    from statewright.runtime.worker import Worker

    wf = load_workflow(file)
    data = _parse_input(input_, wf)
    engine = _engine(db, create=True, in_memory=True)
    worker = Worker(engine)
    tid = engine.submit(wf, data, key=key, hold_for=worker)  # its commit claims the first step for us
    progress = _Progress(engine, tid)
    worker.run(until=lambda: progress.seen().status in SETTLED)
    _print_show(engine, tid)
    st = engine.state(tid)
    if st.status is TaskStatus.AWAITING_APPROVAL:
        h = st.current.proposal_hash if st.current else ""
        click.echo(f"\napprove with: statewright approve {tid} --hash {h}  (your token in STATEWRIGHT_TOKEN)")
    sys.exit(RUN_EXIT[st.status.value])


RUN_EXIT = TASK_EXIT  # ``statewright run``'s exit status by how the task ended (README: Exit status)


class _Progress:
    """Says what a task that ``run`` works waits on, once each time that changes, so a long
    wait is never silent: a wait step's next check ("waiting at wait-ci: check 2 of 6 failed,
    next in 4m 58s"), or a step held back (a retry's backoff after a transient error, a
    limit). The outbox of a running task is read at most once a second."""

    def __init__(self, engine: Any, task_id: str) -> None:
        self.engine, self.task_id = engine, task_id
        self.last: tuple[Any, ...] = ()
        self.said: tuple[Any, ...] = ()
        self.read_at = 0.0

    def seen(self) -> Any:
        from statewright.machine.state import TaskStatus

        st = self.engine.state(self.task_id)
        cur = st.current
        now = (st.status, cur.step if cur else "", cur.attempt if cur else 0, cur.checks if cur else 0)
        changed, self.last = now != self.last, now
        if cur is None:
            return st
        if st.status is TaskStatus.WAITING and changed:
            self._say(now, self._next_check(st, cur))
        elif st.status is TaskStatus.RUNNING and cur.command_id and (changed or time.monotonic() - self.read_at >= 1):
            self.read_at = time.monotonic()
            held = self._held_back(cur)
            if held:
                self._say((*now, held[0]), held[1])
        return st

    def _say(self, key: tuple[Any, ...], text: str) -> None:
        if key != self.said:
            self.said = key
            click.echo(text, err=True)

    def _next_check(self, st: Any, cur: Any) -> str:
        from statewright._time import duration

        step = st.workflow.step(cur.step)
        due = [t["due_at_ms"] for t in self.engine.store.timers(self.task_id)]
        wait = f", next in {duration((min(due) - self.engine.clock.now_ms()) / 1000)}" if due else ""
        return f"waiting at {cur.step}: check {cur.checks} of {step.max_checks} failed{wait}"

    def _held_back(self, cur: Any) -> tuple[int, str] | None:
        """(when it is due, what to say) for the step's command while it waits to be claimed
        again; None while it runs or is due now."""
        from statewright._time import duration

        now_ms = self.engine.clock.now_ms()
        row = next((r for r in self.engine.store.outbox(self.task_id) if r["command_id"] == cur.command_id), None)
        if row is None or row["lease_owner"] is not None or row["available_at_ms"] <= now_ms:
            return None
        due, n = row["available_at_ms"], row["failures"]
        why = row["waiting"] or (f"a retry's backoff after {n} transient error{'s' if n != 1 else ''}" if n else "")
        return due, f"waiting at {cur.step} #{cur.attempt}: {why or 'held back'}, next try in " \
            f"{duration((due - now_ms) / 1000)}"


def _token_option(fn: F) -> F:
    return click.option(
        "--token-file", type=click.Path(dir_okay=False),
        help="A file holding your token (default: env STATEWRIGHT_TOKEN).",
    )(fn)


def _as_option(fn: F) -> F:
    return click.option("--as", "as_name", help="Your name: refused unless it is your token's person.")(fn)


@cli.command()
@click.option("--status", help="Only tasks in this status.")
@click.option("--workflow", help="Only tasks of this workflow.")
@click.option("--waiting-for-me", is_flag=True,
              help="Only tasks waiting for an approval you may give (needs your token).")
@_token_option
@_db_option
@_json_option
@_guard
def tasks(status: str | None, workflow: str | None, waiting_for_me: bool, token_file: str | None, db: str,
          as_json: bool) -> None:
    """List tasks: where each stands, and why a halted one halted."""
    from statewright.machine.state import TaskStatus

    if status is not None and status not in {s.value for s in TaskStatus}:
        raise InputError(f"unknown status {status!r}; use one of {', '.join(s.value for s in TaskStatus)}")
    engine = _engine(db)
    if waiting_for_me:
        who = _principal(engine, token_file)
        if status not in (None, TaskStatus.AWAITING_APPROVAL.value):
            raise InputError("--waiting-for-me lists tasks awaiting approval; leave out --status or give that one")
        rows = engine.store.list_tasks(status=TaskStatus.AWAITING_APPROVAL.value, workflow=workflow)
        states = engine.states([r.task_id for r in rows])
        rows = [r for r in rows if r.task_id in states and engine.may_approve(states[r.task_id], who)]
    else:
        rows = engine.store.list_tasks(status=status, workflow=workflow)
    from statewright.runtime.fleet import with_waiting

    listed = with_waiting([_task_row(r) for r in rows], engine.store, engine.clock.now_ms())
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    click.echo(f"{'TASK':<22} {'WORKFLOW':<20} {'STATUS':<18} {'STEP':<18} {'UPDATED':<22} WHY")
    for t in listed:
        click.echo(f"{t['task_id']:<22} {t['workflow']:<20} {t['status']:<18} {t['step'] or '-':<18} "
                   f"{t['updated']:<22} {t['why']}".rstrip())


def _task_row(r: Any) -> dict[str, Any]:
    from statewright.runtime.history import task_row

    return task_row(r)


@cli.command()
@click.argument("task_id")
@_db_option
@_json_option
@_guard
def review(task_id: str, db: str, as_json: bool) -> None:
    """What an approver decides on: the proposal in full (and the diff), why the task
    stopped, the evidence, the checks, verdicts and notes, who may approve, the hash and
    the expiry."""
    from statewright.runtime.review import review_lines

    data = _engine(db).review(task_id)
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
        return
    for line in review_lines(data):
        click.echo(line)


def _print_show(engine: Any, task_id: str) -> None:
    from statewright.runtime.history import history_lines

    st = engine.state(task_id)
    click.echo(f"task {st.task_id}  workflow {st.workflow.name} v{st.workflow.version} "
               f"({st.workflow.content_hash[:12]})  status {st.status.value}")
    if st.status.value == "cancelled":
        from statewright._time import when

        last = next((o for o in reversed(st.operator_actions) if o.action == "cancel"), None)
        if last is not None:
            click.echo(f"cancelled by {last.actor} at {when(last.at_ms)}: {last.reason}")
    elif st.halt:
        click.echo(f"halted at {st.halt.step}: {st.halt.reason} {st.halt.detail}".rstrip())
    parked = engine.store.remote_row(st.current.command_id) if st.current and st.current.command_id else None
    if parked is not None:
        from statewright._time import when

        click.echo(f"{st.current.step} #{st.current.attempt} waits for a remote agent on queue {parked.queue!r} "
                   f"since {when(parked.parked_at_ms)}" if parked.agent is None else
                   f"{st.current.step} #{st.current.attempt} is with remote agent {parked.agent!r} "
                   f"(claimed from {parked.queue!r} at {when(parked.claimed_at_ms or 0)})")
    for line in history_lines(st):
        click.echo("  " + line)
    if st.parent is not None or st.children:
        from statewright.runtime.history import family_lines

        live = engine.states([c.task_id for c in st.children if c.live])
        for line in family_lines(st, live):
            click.echo(line)
    if st.results:
        click.echo("results:")
    for step_id, result in st.results.items():
        text = json.dumps(result, ensure_ascii=False, sort_keys=True)
        click.echo(f"  {step_id}: {text if len(text) <= 100 else text[:99] + '…'}")
    from statewright.runtime.notify import notification_lines

    notices = notification_lines(engine.events(task_id))
    if notices:
        click.echo("notifications:")
    for line in notices:
        click.echo("  " + line)
    _print_proposal(st)


def _print_proposal(st: Any) -> None:
    from statewright.runtime.history import proposal_lines

    for line in proposal_lines(st):
        click.echo(line)


@cli.command()
@click.argument("task_id")
@_db_option
@_json_option
@_guard
def show(task_id: str, db: str, as_json: bool) -> None:
    """Show a task: its state, then its history as a straight line with detours."""
    engine = _engine(db)
    if as_json:
        st = engine.state(task_id)
        from statewright.runtime.history import proposal_view

        click.echo(json.dumps({"state": st.to_dict(), "review": proposal_view(st),
                               "events": [e.to_dict() for e in engine.events(task_id)]},
                              indent=2, default=str))
        return
    _print_show(engine, task_id)


def _principal(engine: Any, token_file: str | None, as_name: str | None = None) -> Any:
    """The person the token names (and ``--as``, when given, must name the same)."""
    from statewright.runtime.users import read_token

    who = engine.users.authenticate(read_token(token_file))
    return engine.users.check(who, as_name=as_name)


def _stdin_is_tty() -> bool:
    return sys.stdin.isatty()


def _reviewed_hash(engine: Any, task_id: str) -> str:
    """At a terminal: show the proposal, ask, and return the hash of what was shown."""
    if not _stdin_is_tty():
        raise InputError(
            f"approve needs --hash HASH, the proposal you reviewed ('statewright show {task_id} --json' "
            "prints it); nothing is approved unseen"
        )
    st = engine.state(task_id)
    if st.current is None or st.status.value != "awaiting_approval":
        raise InputError(f"task {task_id} is {st.status.value}, not awaiting approval")
    shown = st.current.proposal_hash
    _print_proposal(st)
    click.echo(f"\ntask {task_id} waits at {st.current.step!r}; proposal hash {shown}")
    if not click.confirm("approve this proposal?", default=False):
        raise InputError("not approved: the proposal was not confirmed")
    return str(shown)


@cli.command()
@click.argument("task_id")
@_as_option
@click.option("--hash", "proposal_hash",
              help="The proposal hash you reviewed (at a terminal, leave it out to review and confirm).")
@click.option("--comment", default="")
@_token_option
@_db_option
@_guard
def approve(task_id: str, as_name: str | None, proposal_hash: str | None, comment: str, token_file: str | None,
            db: str) -> None:
    """Approve the proposal a task waits on, as the person your token names."""
    engine = _engine(db)
    who = _principal(engine, token_file, as_name)
    if proposal_hash is None:
        proposal_hash = _reviewed_hash(engine, task_id)
    st = engine.approve(task_id, who, proposal_hash=proposal_hash, comment=comment)
    click.echo(f"approved by {who.name}; task {task_id} is {st.status.value}")


@cli.command()
@click.argument("task_id")
@_as_option
@click.option("--reason", required=True,
              help="A reason code the step takes (default set: insufficient_evidence, incorrect_extraction, "
                   "policy_denial, suspected_fraud, other).")
@click.option("--comment", default="")
@_token_option
@_db_option
@_guard
def reject(task_id: str, as_name: str | None, reason: str, comment: str, token_file: str | None, db: str) -> None:
    """Reject the proposal a task waits on, with a reason code."""
    engine = _engine(db)
    who = _principal(engine, token_file, as_name)
    st = engine.reject(task_id, who, reason_code=reason, comment=comment)
    click.echo(f"rejected by {who.name}; task {task_id} is {st.status.value}")


@cli.command()
@click.argument("task_id")
@_as_option
@click.option("--reason", required=True)
@_token_option
@_db_option
@_guard
def retry(task_id: str, as_name: str | None, reason: str, token_file: str | None, db: str) -> None:
    """Re-run a halted task's halted step (audited; needs the operator role)."""
    engine = _engine(db)
    st = engine.retry(task_id, _principal(engine, token_file, as_name), reason)
    click.echo(f"retried; task {task_id} is {st.status.value}")


@cli.command()
@click.argument("task_id")
@_as_option
@click.option("--reason", required=True)
@_token_option
@_db_option
@_guard
def cancel(task_id: str, as_name: str | None, reason: str, token_file: str | None, db: str) -> None:
    """Cancel a task (audited; needs the operator role)."""
    engine = _engine(db)
    st = engine.cancel(task_id, _principal(engine, token_file, as_name), reason)
    click.echo(f"cancelled; task {task_id} is {st.status.value}")


@cli.command()
@click.argument("task_id")
@_as_option
@click.option("--file", "path", required=True, type=click.Path(dir_okay=False),
              help="A JSON object: the evidence (a document's id and kind, a callback's record, ...).")
@click.option("--note", default="", help="What the evidence is, in a few words.")
@_token_option
@_db_option
@_guard
def evidence(task_id: str, as_name: str | None, path: str, note: str, token_file: str | None, db: str) -> None:
    """Supply evidence to a task (audited; needs the operator role). A proposal waiting for
    approval is built again with it, so an approval of the old one is refused."""
    from statewright._json_limits import loads_json_object, read_regular_file

    data = loads_json_object(read_regular_file(path, f"--file {path}"), f"--file {path}")
    engine = _engine(db)
    who = _principal(engine, token_file, as_name)
    st = engine.add_evidence(task_id, who, data, note)
    waits = st.status.value == "awaiting_approval"
    again = " (its proposal was built again: review it before approving)" if waits else ""
    click.echo(f"evidence added to task {task_id} by {who.name}; it is {st.status.value}{again}")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8420, show_default=True, type=click.IntRange(0, 65535))
@click.option("--metrics-port", type=click.IntRange(0, 65535),
              help="Serve /metrics on this port (on the same host) instead of beside the API.")
@click.option("--workflow", "workflow_files", multiple=True, type=click.Path(dir_okay=False),
              help="A workflow POST /api/tasks may start, by its name (repeatable).")
@click.option("--hooks", "hooks_file", type=click.Path(dir_okay=False),
              help="A hooks file: POST /api/hooks/NAME starts its workflow (README: Serving).")
@click.option("--loop-db", help="Another database holding the outer loop's runs (default: --db, where "
                                "'statewright loop run' keeps them beside the tasks).")
@click.option("--github", "github_files", multiple=True, type=click.Path(dir_okay=False),
              help="A workflow whose github key names the repository whose webhooks (POST /api/github/webhook) "
                   "start and drive its tasks (repeatable; README: GitHub).")
@_db_option
@_guard
def serve(host: str, port: int, metrics_port: int | None, workflow_files: tuple[str, ...], hooks_file: str | None,
          loop_db: str | None, github_files: tuple[str, ...], db: str) -> None:
    """Serve the HTTP API and the web console (needs the [web] extra): tasks, reviews,
    approvals, the operator queue, loop runs, /metrics and signed webhooks. Every API call
    but /openapi.json, /metrics and the hooks takes 'Authorization: Bearer TOKEN'; the
    console's pages (/, /inbox, /halted, /tasks/ID, /runs) sign in at /login."""
    from statewright.definition import load_workflow

    try:
        import jinja2  # noqa: F401  (the web console's templates)
        import uvicorn

        from statewright.server import create_app, load_hooks
    except ImportError as exc:
        raise InputError(f"statewright serve needs the web extra ({exc.name} is missing): "
                         "pip install 'statewright[web]'") from None
    workflows = [load_workflow(f) for f in workflow_files]
    hooks = load_hooks(hooks_file) if hooks_file else {}
    github = None
    if github_files:
        from statewright.integrations.github.webhook import WebhookConfig

        github = WebhookConfig.load(github_files)
    sockets = [_listen(host, port, "--port")]
    if metrics_port is not None:
        sockets.append(_listen(host, metrics_port, "--metrics-port"))
    engine = _engine(db, create=True)
    app = create_app(lambda: engine, workflows=workflows, hooks=hooks, loop_db=loop_db,
                     metrics=metrics_port is None, github=github)
    apps: list[Any] = [app]
    if metrics_port is not None:
        from starlette.applications import Starlette

        from statewright.server.app import metrics_routes

        apps.append(Starlette(routes=metrics_routes(engine)))
    for sock, what in zip(sockets, ("API", "metrics"), strict=False):
        shown_host, shown_port = sock.getsockname()[:2]
        click.echo(f"statewright {what} on http://{shown_host}:{shown_port} (database {_shown_db(db)})", err=True)
    _serve_all(uvicorn, apps, sockets)


def _listen(host: str, port: int, option: str) -> Any:
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise InputError(f"--host {host}: cannot resolve it ({exc.strerror or exc})") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)  # connections wait in the backlog until the server takes them
    except OSError as exc:
        sock.close()
        raise InputError(f"{option} {port}: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    return sock


def _serve_all(uvicorn: Any, apps: list[Any], sockets: list[Any]) -> None:
    import asyncio

    # An open console page holds an event stream: on a stop, give it 5 s, then close it.
    servers = [uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on" if i == 0 else "off",
                                             timeout_graceful_shutdown=5))
               for i, app in enumerate(apps)]

    async def main() -> None:
        tasks = [asyncio.create_task(s.serve(sockets=[sock])) for s, sock in zip(servers, sockets, strict=True)]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for s in servers:  # one stopped (a signal reaches only one): stop the others too
            s.should_exit = True
        await asyncio.gather(*tasks)

    asyncio.run(main())


@cli.group()
def users() -> None:
    """People, roles and tokens (kept in the store; changed only by an admin)."""


def _write_token(issued: Any, out: str | None) -> None:
    """Show a new token once: on stdout, or in a new file only its owner may read."""
    if out is None:
        click.echo(issued.token)
        click.echo(f"token {issued.token_id} for {issued.name}: shown once, keep it secret", err=True)
        return
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create the file ({exc.strerror}); it must not exist yet") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(issued.token + "\n")
    click.echo(f"token {issued.token_id} for {issued.name} written to {out}")


def _out_option(fn: F) -> F:
    return click.option("--out", type=click.Path(dir_okay=False),
                        help="Write the token to this new file (mode 600) instead of printing it.")(fn)


def _check_out(out: str | None) -> None:
    if out is not None and os.path.lexists(out):
        raise InputError(f"--out {out}: the file exists already; a token goes only into a new file")


@users.command("bootstrap")
@click.argument("name")
@_out_option
@_db_option
@_guard
def users_bootstrap(name: str, out: str | None, db: str) -> None:
    """Make NAME the first admin and issue their token (only while no one is admin)."""
    _check_out(out)
    engine = _engine(db, create=True)
    _write_token(engine.users.bootstrap(name), out)


@users.command("add")
@click.argument("name")
@click.option("--role", "roles", multiple=True, required=True)
@_token_option
@_db_option
@_guard
def users_add(name: str, roles: tuple[str, ...], token_file: str | None, db: str) -> None:
    """Add a person, or roles to one (admin)."""
    engine = _engine(db)
    person = engine.users.add(_principal(engine, token_file), name, roles)
    click.echo(f"{person.name}: {', '.join(person.roles)}")


@users.command("drop-role")
@click.argument("name")
@click.option("--role", "roles", multiple=True, required=True)
@_token_option
@_db_option
@_guard
def users_drop_role(name: str, roles: tuple[str, ...], token_file: str | None, db: str) -> None:
    """Take roles from a person (admin)."""
    engine = _engine(db)
    person = engine.users.drop_roles(_principal(engine, token_file), name, roles)
    click.echo(f"{person.name}: {', '.join(person.roles) or '(no roles)'}")


@users.command("remove")
@click.argument("name")
@_token_option
@_db_option
@_guard
def users_remove(name: str, token_file: str | None, db: str) -> None:
    """A person may no longer act; their tokens are revoked (admin). The log keeps them."""
    engine = _engine(db)
    engine.users.remove(_principal(engine, token_file), name)
    click.echo(f"{name}: removed; tokens revoked")


@users.command("token")
@click.argument("name")
@_out_option
@_token_option
@_db_option
@_guard
def users_token(name: str, out: str | None, token_file: str | None, db: str) -> None:
    """Issue a token for NAME (admin); it is shown once."""
    _check_out(out)
    engine = _engine(db)
    _write_token(engine.users.issue_token(_principal(engine, token_file), name), out)


@users.command("revoke-token")
@click.argument("token_id")
@_token_option
@_db_option
@_guard
def users_revoke_token(token_id: str, token_file: str | None, db: str) -> None:
    """Revoke a token by its id (admin; ids are in 'users list')."""
    engine = _engine(db)
    engine.users.revoke_token(_principal(engine, token_file), token_id)
    click.echo(f"{token_id}: revoked")


@users.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@_token_option
@_db_option
@_guard
def users_import(file: str, token_file: str | None, db: str) -> None:
    """Add the people and roles of an old users.json (admin); then issue their tokens."""
    engine = _engine(db)
    for person in engine.users.import_file(_principal(engine, token_file), file):
        click.echo(f"{person.name}: {', '.join(person.roles)}")


@users.command("whoami")
@_token_option
@_db_option
@_guard
def users_whoami(token_file: str | None, db: str) -> None:
    """The person your token names, and their roles."""
    engine = _engine(db)
    who = _principal(engine, token_file)
    click.echo(f"{who.name}: {', '.join(who.roles) or '(no roles)'} (token {who.token_id})")


@users.command("list")
@_db_option
@_json_option
@_guard
def users_list(db: str, as_json: bool) -> None:
    """People, their roles and their tokens' ids (never the tokens)."""
    engine = _engine(db)
    tokens: dict[str, list[str]] = {}
    for t in engine.users.tokens():
        if t.revoked_at_ms is None:
            tokens.setdefault(t.name, []).append(t.token_id)
    people = engine.users.people()
    if as_json:
        click.echo(json.dumps([{"name": p.name, "roles": list(p.roles), "active": p.active,
                                "tokens": tokens.get(p.name, [])} for p in people], indent=2))
        return
    for p in people:
        gone = "" if p.active else "  (removed)"
        ids = f"  tokens: {', '.join(tokens[p.name])}" if p.name in tokens else ""
        click.echo(f"{p.name}: {', '.join(p.roles) or '(no roles)'}{gone}{ids}")


@users.command("audit")
@_db_option
@_json_option
@_guard
def users_audit(db: str, as_json: bool) -> None:
    """Every change to people, roles and tokens (who, what, when); exit 1 when the log and
    the tables disagree."""
    engine = _engine(db)
    entries, problems = engine.users.log(), engine.users.problems()
    if as_json:
        click.echo(json.dumps({"changes": [
            {"seq": e.seq, "at_ms": e.at_ms, "actor": e.actor, "action": e.action, "subject": e.subject,
             "roles": list(e.roles), "token_id": e.token_id} for e in entries], "problems": problems}, indent=2))
    else:
        for e in entries:
            when = datetime.fromtimestamp(e.at_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
            what = " ".join(x for x in (", ".join(e.roles), e.token_id) if x)
            click.echo(f"{e.seq:>4}  {when}  {e.actor:<20} {e.action:<13} {e.subject}  {what}".rstrip())
        for p in problems:
            click.echo(f"problem: {p}")
        verdict = "the log and the tables agree" if not problems else f"{len(problems)} problems"
        click.echo(f"{len(entries)} changes; {verdict}")
    sys.exit(1 if problems else 0)


@cli.command()
@_db_option
@_json_option
@_guard
def verify(db: str, as_json: bool) -> None:
    """Replay every task's log and the people log; compare with the tables; check hash chains."""
    from statewright.runtime.verify import verify_all, verify_people

    engine = _engine(db)
    n, findings = verify_all(engine)
    people, changes = verify_people(engine), len(engine.users.log())
    if as_json:
        click.echo(json.dumps({"tasks": n, "problems": [f.__dict__ for f in findings],
                               "people": {"changes": changes, "problems": [f.problem for f in people]}}, indent=2))
    else:
        for f in [*findings, *people]:
            click.echo(f"{f.task_id}: {f.problem}")
        summary = f"verified {n} tasks: {len({f.task_id for f in findings})} differ"
        if changes or people:
            summary += f"; the people log ({changes} changes): {len(people) or 'no'} problems"
        click.echo(summary)
    sys.exit(1 if findings or people else 0)


@cli.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@_db_option
@_guard
def db_upgrade(db: str) -> None:
    """Apply pending schema migrations; carry an earlier release's loop tables over into loop-run
    streams; rewrite hash chains that verify in the current format (the tasks' and the people
    log's)."""
    from statewright.loop._carry import carry_loop_tables
    from statewright.runtime.verify import upgrade_history, upgrade_people

    engine = _engine(db, create=True)
    click.echo(f"{engine.store.url}: schema version {engine.store.ensure_schema()}")
    carried, not_carried = carry_loop_tables(engine.store)
    if carried:
        click.echo(f"{carried} loop runs carried over from the loop tables into the store's streams")
    for problem in not_carried:
        click.echo(f"left as it is: {problem}", err=True)
    chains, projections, findings = upgrade_history(engine)
    people_rechained, people = upgrade_people(engine)
    if chains:
        click.echo(f"{chains} task chains rewritten in the current format ({engine.store.chain!r})")
    if projections:
        click.echo(f"{projections} task projections rewritten with the fields this statewright records")
    if people_rechained:
        click.echo(f"the people log's chain rewritten in the current format ({engine.store.chain!r})")
    for f in [*findings, *people]:
        click.echo(f"{f.task_id}: left as it is: {f.problem}", err=True)
    sys.exit(1 if findings or people or not_carried else 0)


@cli.command()
@click.argument("file")
@click.option("--format", "fmt", type=click.Choice(["mermaid", "asl"]), default="mermaid", show_default=True)
@click.option("--queue-url", "queue_urls", multiple=True,
              help="asl: the SQS queue for every step's tasks, or OWNER=URL for one owner's (repeatable).")
@click.option("--dead-letter-url", default="", help="asl: the SQS queue for halted tasks (default: the queue).")
@click.option("--express", is_flag=True,
              help="asl: an Express workflow: its steps run as Lambda tasks (--function); no human step, "
                   "five minutes at most.")
@click.option("--function", "functions", multiple=True,
              help="asl --express: the Lambda function ARN that runs every step, or OWNER=ARN for one owner's "
                   "(repeatable).")
@_guard
def export(file: str, fmt: str, queue_urls: tuple[str, ...], dead_letter_url: str, express: bool,
           functions: tuple[str, ...]) -> None:
    """Print a workflow as Mermaid or Amazon States Language (for AWS Step Functions)."""
    from statewright.definition import load_workflow
    from statewright.export import to_asl, to_mermaid
    from statewright.export.asl import Queues

    if fmt == "mermaid" and (queue_urls or dead_letter_url or express or functions):
        raise InputError("--queue-url, --dead-letter-url, --express and --function go with --format asl")
    if functions and not express:
        raise InputError("--function goes with --express (a Standard export sends its steps to --queue-url)")
    wf = load_workflow(file)
    if fmt == "mermaid":
        click.echo(to_mermaid(wf), nl=False)
        return
    if not queue_urls:
        raise InputError("--format asl needs --queue-url URL (the SQS queue the sfn worker reads, and where "
                         "dead letters go)")
    asl = to_asl(wf, Queues.parse(queue_urls, dead_letter_url), express=express,
                 functions=Queues.parse(functions) if express else None)
    click.echo(json.dumps(asl, indent=2, ensure_ascii=False))


@cli.command()
@click.argument("file")
@click.option("--format", "fmt", type=click.Choice(["svg", "mermaid"]), default="svg", show_default=True)
@click.option("--current", help="Mark this step as the one a task is at.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the drawing to this file (default: stdout).")
@_guard
def graph(file: str, fmt: str, current: str | None, out: str | None) -> None:
    """Draw a workflow: its steps in a line, loop-backs as arcs back, early exits forward (the
    drawing of the web console's task page)."""
    from statewright.definition import load_workflow
    from statewright.export import to_mermaid, to_svg

    wf = load_workflow(file)
    if current is not None and current not in {s.id for s in wf.steps}:
        raise InputError(f"--current {current!r}: workflow {wf.name!r} has no such step; its steps are "
                         + ", ".join(s.id for s in wf.steps))
    text = to_svg(wf, current=current) if fmt == "svg" else to_mermaid(wf, current=current)
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--out {out}: cannot write it ({exc.strerror or exc})") from None


@cli.command()
@click.option("--workdir", type=click.Path(file_okay=False), help="Where to build the demo (default: a temp dir).")
@_guard
def demo(workdir: str | None) -> None:
    """Run the fix-a-bug example end to end on a real git repository."""
    from statewright.demo import run_demo

    sys.exit(run_demo(workdir))


@cli.group()
def schedule() -> None:
    """Start tasks from cron schedules (a schedules file; needs the [schedule] extra)."""


@schedule.command("run")
@click.argument("file")
@click.option("--once", is_flag=True, help="Start what is due now, then exit.")
@_db_option
@_guard
def schedule_run(file: str, once: bool, db: str) -> None:
    """Start one task per due slot of each schedule in FILE, under the slot's key (two
    schedulers on one database start a slot once); run until SIGTERM/Ctrl-C, or --once.
    Workers (statewright worker) run the tasks."""
    import signal
    import threading

    from statewright.runtime.schedules import Fired, load_schedules, run_schedules

    schedules = _load_schedules(file, load_schedules)
    engine = _engine(db, create=True)
    stop = threading.Event()
    if not once:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: stop.set())

    def fired(f: Fired) -> None:
        how = "started" if f.started else "was already started as"
        click.echo(f"schedule {f.schedule.name}: slot {f.schedule.shown(f.slot_ms)} {how} task {f.task_id}")

    def failed(exc: StatewrightError) -> None:
        click.echo(f"error: {exc}; trying again at the next look", err=True)

    run_schedules(engine, schedules, stop=stop, once=once, on_fire=fired, on_error=None if once else failed)


@schedule.command("list")
@click.argument("file")
@click.option("--count", default=3, show_default=True, type=click.IntRange(1, 100), help="Next slots to show.")
@_guard
def schedule_list(file: str, count: int) -> None:
    """Check FILE and show each schedule's next slots as dates in its time zone."""
    from statewright.runtime.clock import SystemClock
    from statewright.runtime.schedules import load_schedules

    schedules = _load_schedules(file, load_schedules)
    now = SystemClock().now_ms()
    click.echo("NAME\tCRON\tTIMEZONE\tCATCH_UP\tWORKFLOW\tNEXT")
    for s in schedules:
        nexts = ", ".join(s.shown(ms) for ms in s.next_slots_ms(now, count))
        click.echo(f"{s.name}\t{s.cron}\t{s.timezone}\t{s.catch_up.value}\t{s.workflow.name}\t{nexts}")


def _load_schedules(file: str, load: Callable[[str], Any]) -> Any:
    try:
        return load(file)
    except ModuleNotFoundError as exc:
        raise InputError(f"schedules need the cron library: pip install 'statewright[schedule]' ({exc})") from None
@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--server", required=True, help="The statewright server's URL (http://host:8420).")
@click.option("--queue", required=True, help="The queue to claim work from.")
@click.option("--once", is_flag=True, help="Handle one piece of work, then exit (1 if its report was refused).")
@click.option("--wait", "wait_seconds", type=click.FloatRange(0, 300), default=20.0, show_default=True,
              help="Seconds each claim is held open when no work waits.")
@click.option("--workspace", type=click.Path(file_okay=False, exists=True),
              help="Where the command runs (default: the current directory).")
@click.option("--token-file", help="A file holding the agent identity's token (else STATEWRIGHT_TOKEN).")
@click.option("--quiet", is_flag=True, help="Log warnings only.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@_guard
def agent(server: str, queue: str, once: bool, wait_seconds: float, workspace: str | None, token_file: str | None,
          quiet: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND as a remote agent for QUEUE: claim work from the server, run the command
    as a command agent (the brief in STATEWRIGHT_BRIEF, the verdict written to
    STATEWRIGHT_VERDICT) and report. STATEWRIGHT_TOKEN is the agent identity's token; the
    command never sees it."""
    from statewright._names import queue_name_problem
    from statewright.runtime.users import read_token

    problem = queue_name_problem(queue)
    if problem is not None:
        raise InputError(f"--queue: {problem}")
    if not server.startswith(("http://", "https://")):
        raise InputError(f"--server must be an http(s) URL such as http://127.0.0.1:8420; got {server!r}")
    try:
        from statewright.executors.remote_agent import RemoteAgent
    except ImportError:
        raise InputError("statewright agent needs httpx: pip install 'statewright[web]'") from None
    token = read_token(token_file)
    _setup_logging(quiet, "text")
    runner = RemoteAgent(server, queue, command, token, wait_seconds=wait_seconds,
                         workspace=Path(workspace or ".").resolve())
    runner.check_command()
    import signal

    # SIGTERM: finish and report the work in hand, claim no more.
    signal.signal(signal.SIGTERM, lambda signum, frame: runner.stopping.set())
    try:
        sys.exit(runner.run(once=once))
    finally:
        runner.close()


def _attach_optional() -> None:
    try:
        from statewright.loop.cli import loop
    except ImportError:
        pass
    else:
        cli.add_command(loop)
    try:
        from statewright.executors.mcp_verdict import mcp_verdict_command
    except ImportError:
        pass
    else:
        cli.add_command(mcp_verdict_command, "mcp-verdict")
    try:
        from statewright.integrations.github.cli import github
    except ImportError:
        pass
    else:
        cli.add_command(github)
    from statewright.integrations.sfn_cli import sfn

    cli.add_command(sfn)
    from statewright.fleet_cli import limits

    cli.add_command(limits)


_attach_optional()


class _NeverRaised(click.ClickException):
    """Stands in for click's NoArgsIsHelpError on click versions without it."""


_NO_ARGS_IS_HELP: type[click.ClickException] = getattr(click.exceptions, "NoArgsIsHelpError", _NeverRaised)


def main() -> None:
    """The ``statewright`` command: a usage mistake is one line on stderr, as every other
    refusal is (click's own format takes three)."""
    try:
        code = cli.main(prog_name="statewright", standalone_mode=False)
    except _NO_ARGS_IS_HELP as exc:  # a bare ``statewright`` (or group): the help, as click shows it
        click.echo(exc.format_message(), err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        where = exc.ctx.command_path if isinstance(exc, click.UsageError) and exc.ctx else "statewright"
        click.echo(f"error: {exc.format_message()} (see '{where} --help')"
                   if isinstance(exc, click.UsageError) else f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        sys.exit(1)
    if isinstance(code, int) and code:
        sys.exit(code)


if __name__ == "__main__":
    main()
