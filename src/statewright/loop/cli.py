"""``statewright loop ...``: run, inspect, stop, clear, unpark and simulate outer loops.

Attached to the main CLI as ``statewright loop``; it also runs alone as ``python -m
statewright.loop``. The database is ``--db``, else ``$STATEWRIGHT_DB``, else
``.statewright/state.db``. Errors go through the command line's one guard
(``statewright._cli_guard``): one line on stderr, exit 1, nothing changed.

Exit codes of ``loop run`` come from the one table of ``statewright._exit``: 0 done, or
stopped cleanly (kill switch, signal); 4 a person decides next (the run is asleep at a gate,
or its pass's task waits for an approval); 5 escalated, stuck or out_of_budget; 1 the command
failed (bad input, a held loop, a source that is down: a crash the next start counts).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import click

from statewright._cli_guard import OneLineGroup, guard
from statewright._errors import InputError
from statewright._exit import Exit
from statewright.definition.durations import parse_duration_seconds
from statewright.loop._isolation import require_secrets
from statewright.loop.definition import load_loop
from statewright.loop.passes import cancel_pass_task
from statewright.loop.runner import (
    LoopRunner,
    clear_hold,
    decide_gate,
    loop_is_running,
    request_stop,
    run_sleeps,
    unpark_item,
)
from statewright.loop.simulate import SimInputs, exact, monte_carlo
from statewright.loop.sources import WorkItem
from statewright.loop.store import LoopStore, StoredLine, line_dict, run_dict, waiting_on
from statewright.machine.loop.model import ItemStatus, LineKind, LoopState, LoopStatus

if TYPE_CHECKING:
    from statewright.runtime.users import Principal

DEFAULT_DB = ".statewright/state.db"
F = TypeVar("F", bound=Callable[..., Any])
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _db_option(fn: F) -> F:
    return click.option(
        "--db",
        "db",
        envvar="STATEWRIGHT_DB",
        default=DEFAULT_DB,
        show_default=True,
        help="The statewright database file (or set STATEWRIGHT_DB).",
    )(fn)


def _open(db: str, *, create: bool) -> LoopStore:
    if db.startswith("memory:"):
        msg = (f"--db {db}: an in-memory database ends with the command, and a loop's runs must outlive it;"
               " give a file path or a postgresql:// URL")
        raise InputError(msg)
    if _URL.match(db) and not db.startswith(("postgresql://", "postgres://", "sqlite:")):
        msg = f"--db {db}: not a database the loop can use; give a file path, sqlite:///PATH or a postgresql:// URL"
        raise InputError(msg)
    path = _sqlite_path(db)
    if not create and path is not None and not path.exists():
        msg = f"no statewright database at {db}; start a loop with 'statewright loop run FILE'"
        raise InputError(msg)
    return LoopStore.open(db, create=create)


def _sqlite_path(db: str) -> Path | None:
    """The file of a SQLite ``--db`` (a path or ``sqlite:///PATH``); None for PostgreSQL."""
    if db.startswith(("postgresql://", "postgres://")):
        return None
    if db.startswith("sqlite:"):
        parts = urlsplit(db)
        return Path(parts.path if not parts.netloc else parts.netloc + parts.path)
    return Path(db)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@click.group("loop", cls=OneLineGroup)
def loop() -> None:
    """Outer loops over a backlog: find, assign, check, record, decide."""


@loop.command("run")
@click.argument("file", type=click.Path(dir_okay=False))
@_db_option
@click.option("--trigger", default="manual trigger", show_default=True, help="What started it.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option("--new-run", is_flag=True, help="Open a new run even when the newest one is unfinished "
              "(it is left as it stands; the items' standing carries over).")
@click.option("--lease", "lease", default="30s", show_default=True,
              help="How soon after this process dies a 'statewright worker' takes the run up (a duration).")
@guard
def run_cmd(file: str, db: str, trigger: str, as_json: bool, new_run: bool, lease: str) -> None:
    """Start a run of the loop FILE, or resume its unfinished run (pinned to the file it
    opened with: a changed file is refused)."""
    definition = load_loop(file)
    require_secrets(definition, os.environ)  # refused before anything is written
    lease_seconds = _lease_seconds(lease)
    with _open(db, create=True) as store:
        before = store.latest_run(definition.name)
        if new_run:
            before = None
        runner = LoopRunner(definition, store, trigger=trigger, install_signal_handlers=True, new_run=new_run,
                            lease_seconds=lease_seconds)
        outcome = runner.run()
        run = store.run(outcome.run_id)
        lines = store.lines(outcome.run_id)
        pending = [
            {"item": a.item_id, "role": a.role, "proposal_hash": a.proposal_hash}
            for a in store.pending_approvals(outcome.run_id)
        ]
        if before is not None and before.run_id == outcome.run_id:
            lines = lines[before.lines :]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "run": outcome.run_id,
                    "loop": definition.name,
                    "status": str(outcome.status),
                    "paused": outcome.paused,
                    "reason": outcome.reason,
                    "waiting_on_task": outcome.waiting_on or None,
                    "awaiting_approval": pending,
                    "lines": [line_dict(line) for line in lines],
                },
                indent=2,
            )
        )
    else:
        _print_lines(lines)
        if outcome.waiting_on:
            click.echo(
                f"run {outcome.run_id}: waits for task {outcome.waiting_on}'s approval; once it is decided"
                f" ('statewright approve {outcome.waiting_on} --hash HASH'), 'statewright loop run {file}'"
                " takes the task's outcome as the pass's result"
            )
        elif outcome.paused:
            click.echo(f"run {outcome.run_id}: paused in {outcome.status} ({outcome.paused})")
            for a in pending:
                click.echo(
                    f"  waiting for role {a['role']} to approve item {a['item']}: hash {a['proposal_hash']}"
                )
        else:
            click.echo(f"run {outcome.run_id}: {outcome.status} ({run.state.reason})")
    if outcome.status in (LoopStatus.ESCALATED, LoopStatus.STUCK, LoopStatus.OUT_OF_BUDGET):
        raise SystemExit(Exit.ENDED_SHORT)
    if pending or outcome.waiting_on:  # a gate, or a pass's task: a person decides next
        raise SystemExit(Exit.WAITING)


@loop.command("status")
@_db_option
@click.option("--loop", "loop_name", default=None, help="Only runs of this loop.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True)
@guard
def status_cmd(db: str, loop_name: str | None, limit: int, as_json: bool) -> None:
    """List recent runs, what holds them, and gates waiting for a person."""
    path = _sqlite_path(db)
    if path is not None and not path.exists() and not db.startswith("memory:"):
        click.echo("[]" if as_json else f"no loop runs (no database at {db})")
        return
    with _open(db, create=False) as store:
        runs = store.runs(loop=loop_name, limit=limit)
        pending = store.pending_approvals()
        rows = [run_dict(r, running=loop_is_running(store, r.loop)) for r in runs]
        newest = {name: store.latest_run(name) for name in {r.loop for r in runs}}
        for row, r in zip(rows, runs, strict=True):
            last = newest[r.loop]
            if last is not None and last.run_id != r.run_id and not r.status.is_terminal:
                row["superseded_by"] = last.run_id  # left unfinished by 'loop run --new-run'
            elif not row["running"] and not r.status.is_terminal:  # resumable: how did it stop?
                lines = store.lines(r.run_id) if r.lines else []
                row["stopped_cleanly"] = bool(lines) and lines[-1].kind is LineKind.CLEAN_STOP
    by_run: dict[str, list[dict[str, Any]]] = {}
    for a in pending:
        by_run.setdefault(a.run_id, []).append({"item": a.item_id, "role": a.role, "proposal_hash": a.proposal_hash})
    for row in rows:
        row["awaiting_approval"] = by_run.get(row["run"], [])
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no loop runs")
        return
    click.echo(f"{'run':>5}  {'loop':<20} {'status':<15} {'passes':>6} {'since':>5}  note")
    for row in rows:
        note = row["reason"]
        if row["held"]:
            note = f"HOLDS new runs until cleared: {note}"
        if row["running"]:
            note = f"running (pid {row['owner_pid']}) {note}".strip()
        elif "superseded_by" in row:
            note = f"left unfinished; run {row['superseded_by']} opened after it {note}".strip()
        elif "stopped_cleanly" in row:
            how = "stopped cleanly" if row["stopped_cleanly"] else "not running (its process ended)"
            note = f"{how}; 'statewright loop run' resumes it {note}".strip()
        click.echo(
            f"{row['run']:>5}  {row['loop']:<20} {row['status']:<15}"
            f" {row['passes']:>6} {row['since_last_close']:>5}  {note}"
        )
        for a in row["awaiting_approval"]:
            click.echo(f"{'':>7}gate: role {a['role']} to approve item {a['item']}, hash {a['proposal_hash']}")


@loop.command("show")
@click.argument("run_id", metavar="RUN")
@_db_option
@click.option("--json", "as_json", is_flag=True)
@guard
def show_cmd(run_id: str, db: str, as_json: bool) -> None:
    """The record of RUN, pass by pass: state, event or check, what was written."""
    with _open(db, create=False) as store:
        run = store.run(run_id)
        lines = store.lines(run.run_id)
    parked = parked_items(run.state)
    if as_json:
        payload = run_dict(run, running=False) | {"parked": parked, "lines": [line_dict(x) for x in lines]}
        click.echo(json.dumps(payload, indent=2))
        return
    click.echo(f"run {run.run_id} of loop {run.loop}: {run.status} {run.state.reason}".rstrip())
    _print_lines(lines)
    if run.cleared_by:
        click.echo(f"cleared by {run.cleared_by}: {run.cleared_reason}")
    task = waiting_on(run)
    if task is not None:
        click.echo(f"waits for task {task}'s approval; its end carries the run on")
    for p in parked:
        why = " ".join(str(p["reason"]).split()) or "no reason recorded"
        click.echo(f"parked: {p['item']} after {p['attempts']} attempts: {why[:200]}")
    if parked:
        click.echo(f"  reopen one with 'statewright loop unpark {run.run_id} ITEM --reason TEXT' (role operator)")


@loop.command("stop")
@click.argument("run_id", metavar="[RUN]", required=False)
@_db_option
@click.option("--reason", default="requested", show_default=True)
@guard
def stop_cmd(run_id: str | None, db: str, reason: str) -> None:
    """The kill switch: stop running loops cleanly (they resume on the next start). A run
    that sleeps on its pass's task (it waits for a person) is stopped too: the task is
    cancelled, and the next start records the pass as "no result"."""
    with _open(db, create=False) as store:
        if run_id is not None:
            targets = [store.run(run_id)]
        else:
            targets = [r for r in store.runs(limit=1000) if not r.status.is_terminal]
        running = [r for r in targets if loop_is_running(store, r.loop)]
        sleeping = [r for r in targets if r not in running and waiting_on(r) is not None]
        if not running and not sleeping:
            which = f"run {run_id} is not" if run_id else "no loop run is"
            raise InputError(f"{which} running; nothing to stop")
        for r in sleeping:
            cur, task = r.state.current, waiting_on(r)
            if cur is None:
                continue
            request_stop(store, r.run_id, reason=reason, at_ms=_now_ms())
            cancel_pass_task(store.store, WorkItem(cur.item, run_id=r.run_id), cur.attempt)
            click.echo(f"run {r.run_id}: stopped; task {task} of its pass is cancelled (the next 'loop run'"
                       " records the pass as no result)")
        for r in running:
            request_stop(store, r.run_id, reason=reason, at_ms=_now_ms())
            if r.owner_pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(r.owner_pid, signal.SIGTERM)
            click.echo(f"run {r.run_id}: stop requested; it writes a clean-stop line and exits")


def _token_option(fn: F) -> F:
    return click.option("--token-file", type=click.Path(dir_okay=False),
                        help="A file holding your token (default: env STATEWRIGHT_TOKEN).")(fn)


@loop.command("clear")
@click.argument("run_id", metavar="RUN")
@click.option("--as", "who", help="Your name: refused unless it is your token's person.")
@click.option("--reason", required=True, help="Why the loop may run again.")
@_token_option
@_db_option
@guard
def clear_cmd(run_id: str, who: str | None, reason: str, token_file: str | None, db: str) -> None:
    """Lift the hold a stuck run puts on new runs of its loop (needs the operator role)."""
    from statewright._errors import PermissionDeniedError
    from statewright._names import OPERATOR_ROLE

    with _open(db, create=False) as store:
        person = _person(db, token_file, who)
        if OPERATOR_ROLE not in person.roles:
            raise PermissionDeniedError(
                f"{person.name!r} lacks the role {OPERATOR_ROLE!r} needed to clear a hold "
                f"(has: {', '.join(person.roles) or 'none'})"
            )
        clear_hold(store, run_id, actor=person.name, reason=reason, at_ms=_now_ms())
        run = store.run(run_id)
    click.echo(f"run {run.run_id} cleared by {run.cleared_by}: {run.cleared_reason}")


@loop.command("unpark")
@click.argument("run_id", metavar="RUN")
@click.argument("item")
@click.option("--as", "who", help="Your name: refused unless it is your token's person.")
@click.option("--reason", required=True, help="Why the item may be worked again.")
@_token_option
@_db_option
@guard
def unpark_cmd(run_id: str, item: str, who: str | None, reason: str, token_file: str | None, db: str) -> None:
    """Reopen the parked ITEM of RUN (needs the operator role): an audited line; the next
    pass may pick it, with a fresh count of attempts."""
    from statewright._errors import PermissionDeniedError
    from statewright._names import OPERATOR_ROLE

    if not reason.strip():
        raise InputError("unpark needs a reason (--reason TEXT)")
    with _open(db, create=False) as store:
        person = _person(db, token_file, who)
        if OPERATOR_ROLE not in person.roles:
            raise PermissionDeniedError(
                f"{person.name!r} lacks the role {OPERATOR_ROLE!r} needed to unpark an item "
                f"(has: {', '.join(person.roles) or 'none'})"
            )
        unpark_item(store, run_id, item, actor=person.name, reason=reason.strip(), at_ms=_now_ms())
    click.echo(f"run {run_id}: item {item} unparked by {person.name}; 'statewright loop run FILE' may pick it again")


@loop.command("approve")
@click.argument("run_id", metavar="RUN")
@click.option("--as", "who", help="Your name: refused unless it is your token's person.")
@click.option("--role", default=None, help="The role you act in (default: the role the gate asks for).")
@click.option("--hash", "proposal_hash", default=None, help="The hash of the proposal you reviewed (required).")
@_token_option
@_db_option
@guard
def approve_cmd(run_id: str, who: str | None, role: str | None, proposal_hash: str | None, token_file: str | None,
                db: str) -> None:
    """Approve the proposal a gate of RUN shows; a run asleep at the gate is woken (a
    'statewright worker' drives it on)."""
    _decide(db, run_id, who=who, token_file=token_file, role=role, proposal_hash=proposal_hash, approve=True,
            reason="")


@loop.command("reject")
@click.argument("run_id", metavar="RUN")
@click.option("--as", "who", help="Your name: refused unless it is your token's person.")
@click.option("--role", default=None)
@click.option("--reason", "reason_code", required=True, help="The reason code; the item is parked.")
@click.option("--hash", "proposal_hash", default=None,
              help="The hash of the proposal shown (default: the one pending).")
@_token_option
@_db_option
@guard
def reject_cmd(run_id: str, who: str | None, role: str | None, reason_code: str, proposal_hash: str | None,
               token_file: str | None, db: str) -> None:
    """Reject the proposal a gate of RUN shows, with a reason code; the item is parked (a run
    asleep at the gate is woken, as by an approval)."""
    _decide(db, run_id, who=who, token_file=token_file, role=role, proposal_hash=proposal_hash, approve=False,
            reason=reason_code)


@loop.command("simulate")
@click.option("--items", default=40, show_default=True, type=int)
@click.option("--success", default=0.7, show_default=True, type=float, help="p: a pass is right.")
@click.option("--false-reject", default=0.05, show_default=True, type=float)
@click.option(
    "--false-pass",
    multiple=True,
    type=float,
    help="f: the check passes bad work; repeat for columns. [default: 0.02 and 0.5]",
)
@click.option("--attempts", default=3, show_default=True, type=int)
@click.option("--chain", default=20, show_default=True, type=int, help="Accepted items built on.")
@click.option("--runs", default=10_000, show_default=True, type=int, help="Monte-Carlo nights.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--json", "as_json", is_flag=True)
@guard
def simulate_cmd(
    items: int,
    success: float,
    false_reject: float,
    false_pass: Sequence[float],
    attempts: int,
    chain: int,
    runs: int,
    seed: int,
    as_json: bool,
) -> None:
    """How fast a lenient check spoils the work a loop builds on: exact and Monte Carlo."""
    columns = []
    for f in false_pass or (0.02, 0.5):
        inputs = SimInputs(items, success, false_reject, f, attempts, chain)
        mc = monte_carlo(inputs, runs, random.Random(seed))
        columns.append((f, exact(inputs), mc))
    if as_json:
        payload = {
            "inputs": {
                "items": items,
                "success": success,
                "false_reject": false_reject,
                "attempts": attempts,
                "chain": chain,
                "runs": runs,
                "seed": seed,
            },
            "columns": [{"false_pass": f, "exact": e.to_dict(), "monte_carlo": m.to_dict()} for f, e, m in columns],
        }
        click.echo(json.dumps(payload, indent=2))
        return
    click.echo(
        f"{items} items, success {success:g}, false reject {false_reject:g},"
        f" {attempts} attempts; Monte Carlo {runs} runs, seed {seed}"
    )
    head = "".join(f"{'f=' + format(f, 'g'):>22}" for f, _, _ in columns)
    click.echo(f"{'':<34}{head}")
    click.echo(f"{'':<34}" + "".join(f"{'exact':>11}{'MC':>11}" for _ in columns))
    rows: list[tuple[str, Callable[[Any], str]]] = [
        ("items closed", lambda x: f"{x.expected_closed:.2f}"),
        ("items escalated", lambda x: f"{x.expected_escalated:.2f}"),
        ("passes", lambda x: f"{x.expected_passes:.1f}"),
        ("wrong items accepted", lambda x: f"{x.expected_wrong_accepted:.2f}"),
        ("wrong share of accepted work", lambda x: f"{100 * x.wrong_share:.1f}%"),
        (f"chance {chain} accepted all right", lambda x: f"{100 * x.chain_all_right:.1f}%"),
        ("longest even-odds chain", lambda x: str(x.even_odds_chain or "unbounded")),
        (f"right share needed over {chain}", lambda x: f"{100 * x.required_right_share:.2f}%"),
    ]
    for label, fmt in rows:
        cells = "".join(f"{fmt(e):>11}{fmt(m):>11}" for _, e, m in columns)
        click.echo(f"{label:<34}{cells}")


# ---------------------------------------------------------------- helpers


def _person(db: str, token_file: str | None, who: str | None) -> Principal:
    """The person the token names; ``--as``, when given, must name the same person."""
    from statewright.runtime.clock import SystemClock
    from statewright.runtime.users import Users, read_token
    from statewright.store import open_store

    token = read_token(token_file)
    people = open_store(db)
    try:
        users = Users(people, SystemClock())
        return users.check(users.authenticate(token), as_name=who)
    finally:
        people.close()


def _decide(
    db: str, run_id: str, *, who: str | None, token_file: str | None, role: str | None, proposal_hash: str | None,
    approve: bool, reason: str,
) -> None:
    with _open(db, create=False) as store:
        run = store.run(run_id)
        pending = store.pending_approvals(run.run_id)
        if not proposal_hash:
            if len(pending) != 1:
                msg = f"run {run.run_id} has {len(pending)} pending approvals; pass --hash"
                raise InputError(msg)
            if approve:
                msg = (
                    f"run {run.run_id}: approve needs --hash H, the hash of the proposal you reviewed "
                    "('statewright loop status' shows it); nothing is approved unseen"
                )
                raise InputError(msg)
            proposal_hash = pending[0].proposal_hash
        gate = next((p for p in pending if p.proposal_hash == proposal_hash), None)
        if gate is None:
            waits = ", ".join(p.proposal_hash for p in pending)
            msg = (
                f"run {run.run_id} has no gate waiting on hash {proposal_hash} (it may have been decided); "
                + (f"its gate waits on {waits}" if waits else "no gate of it waits")
                + "; 'statewright loop status' shows the hash a gate shows"
            )
            raise InputError(msg)
        person = _person(db, token_file, who)
        role = role or gate.role
        if role != gate.role:
            raise InputError(f"run {run.run_id}: the gate needs role {gate.role!r}, you acted as {role!r}")
        decide_gate(store, run.run_id, by=person, proposal_hash=proposal_hash, approve=approve, reason_code=reason,
                    at_ms=_now_ms())
    decision = "approved" if approve else "rejected"
    # Asleep at the gate, the run was woken with the decision; else a process drives it, or
    # a kill switch stopped it.
    then = ("a 'statewright worker' drives the run on" if run_sleeps(run)
            else "the 'loop run' process at the gate carries on" if not run.state.clean_stop
            else "the run was stopped: 'statewright loop run FILE' carries it on")
    click.echo(f"run {run.run_id}: item {gate.item_id} {decision} by {person.name} (hash {proposal_hash[:12]}); {then}")


def parked_items(state: LoopState) -> list[dict[str, Any]]:
    """The parked items of a run with their attempts and why they were parked."""
    return [
        {"item": i.id, "attempts": i.attempts, "reason": i.last_failure}
        for i in state.items
        if i.status is ItemStatus.PARKED
    ]


def _print_lines(lines: Sequence[StoredLine]) -> None:
    if not lines:
        return
    click.echo(f"{'state':<15} {'event or check':<52} written")
    for line in lines:
        click.echo(f"{line.state:<15} {line.event:<52} {line.summary}")


def main() -> None:
    loop(prog_name="statewright loop")


def _lease_seconds(value: str) -> float:
    """``--lease``: a duration from 1 second to a day."""
    try:
        seconds = parse_duration_seconds(value)
    except ValueError as exc:
        raise InputError(f"--lease: {exc}") from None
    if not 1 <= seconds <= 86_400:
        raise InputError(f"--lease: expected a duration from 1s to 1d, got {value!r}")
    return seconds
