"""The fleet's SQL, shared by SQLite and PostgreSQL: claiming by priority and fair share,
admission under the limits (store/admission.py says how), the fleet config, waking the
commands that waited for a slot, and usage against token rates and daily budgets.

The claim itself stays one statement. Only when a claimed row has gates, or belongs to a
tenant with a limit or budget, is it admitted in a transaction that holds
``_lock_gates_txn`` (nothing on SQLite, whose writers are serialized already, and where
the claim and its admission share one transaction; a transaction-level advisory lock on
PostgreSQL, where, while claims meet gated rows, the claim moves into that transaction).
Each admission sends all its reads before it waits for any. A slot is held by the admitted
claim's lease (``slot_token`` on its outbox row), so a claim that ends frees its slots with
no write; a worker wakes their waiters with the commit of the claims' outcomes. An admission
reads its gates' bounds (``sw_slot_bounds``, kept by every admission), not the slots, while
they leave room."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statewright.definition.fleet import DAY_MS, SHARE_SCALE, FleetConfig, NamedLimit, TenantShare, parse_rate
from statewright.store.base import Claim, NewCommand
from statewright.store.grants import GRANT_SKEW_MS, grant_of

if TYPE_CHECKING:  # admission is imported where a claim has gates: most claims have none
    from statewright.store.admission import Gate
    from statewright.store.grants import Grant, Need

_HOLDS = (  # a claimed row under gates holds their slots with the claim's new token
    ", slot_token = CASE WHEN gates IS NOT NULL OR (SELECT gating FROM sw_tenants"
    " WHERE sw_tenants.tenant = sw_outbox.tenant) = 1 THEN token + 1 END"
)
CLAIM_RETURNING = (
    "command_id, task_id, type, body, token, deliveries, failures, lease_expires_ms, gates, tenant,"
    " (SELECT gating FROM sw_tenants WHERE sw_tenants.tenant = sw_outbox.tenant), priority, fair"
)
_ADMISSION_ROUNDS = 4  # claims again after giving back the commands that must wait
_PARSED: dict[tuple[tuple[str, str, str], ...], ParsedFleet] = {}  # fleet config rows -> parsed
_NAMES: dict[int, tuple[tuple[Gate, ...], tuple[str, ...]]] = {}  # id of a set of gates -> it, its names
_PRUNE_EVERY_MS = 10_000  # how often an admission forgets old rate log rows
# How often an admission counts the live slots one by one even where every bound leaves
# room: a bound stays above what ended (an expired lease, a finished step) until then.
_COUNT_EVERY_MS = 10_000
_PLANS_AT_MOST = 256  # runs of claimed rows a store keeps what they draw from its grant for
_BOUNDED_AT_MOST = 256  # how many gates' bounds an admission that cannot name its gates reads ahead
# Every command that holds slots: its admitted claim's lease is alive (read by the index of
# leases: the steps running, no more).
_HOLDERS = ("SELECT command_id, gates, tenant FROM sw_outbox WHERE lease_expires_ms IS NOT NULL"
            " AND lease_expires_ms > ? AND slot_token = token")
# The slots set aside by grants that may still be used (store/grants.py): counted as held.
_GRANTED = "SELECT gate, SUM(amount) FROM sw_grants WHERE expires_ms > ? GROUP BY gate"
# How many starts the rate log holds at most: every row written adds its starts, every row
# forgotten takes its starts away. All its writers hold the gates' lock.
_ROWS_AT_MOST = "(SELECT at_most FROM sw_rate_log_rows WHERE id = 1)"


class FleetSql:
    """Mixed into SqlStore; uses its ``_tx``/``_stmt``/``_x`` and ``skip_locked``."""

    skip_locked: str = ""
    _prune_after_ms: int = 0
    _count_after_ms: int = 0  # until then, admissions decide on the slots' bounds where they leave room
    _bounded: tuple[str, ...] = ()  # the gates with a concurrency the last admissions looked at
    _windows_ms: dict[str, dict[int, bool]] = {}  # per limit gate, its rate windows in the last config read
    _start_caps: dict[tuple[str, int], int] = {}  # (limit gate, window): its start rate, in the last config read
    # Up to when a gate's rate log rows may be gone (parameter: the gate), by the index of
    # the rows of no command (``sw_rate_log_marks``).
    _horizon_of: str = "(SELECT MAX(at_ms) FROM sw_rate_log WHERE command_id = '' AND gate = ?)"
    _greatest: str = "MAX"  # the two-argument maximum: MAX on SQLite, GREATEST on PostgreSQL
    _claim_holds: bool = True  # the claim runs in its admission's transaction (see _claim_query)
    _grant: Grant | None = None  # what this store's next claims may be admitted from (store/grants.py)
    # The grant, and per run of claimed rows' (gates, tenant, gating): what they draw from it
    # and their gates' names (``_from_grant``), or None where it does not cover them.
    _plans: tuple[Grant, dict[tuple[Any, ...], tuple[Need, tuple[tuple[str, ...], ...]] | None]] | None = None
    _owner: str = ""  # this store's name in sw_grants
    # The rows a statement changes, picked by a subquery that orders and limits them.
    _picked: str = "command_id IN ({})"
    # The fleet config's version as a claim returns it: read in the claim's transaction, in
    # which no config put can commit (on SQLite, writers are serialized; PostgreSQL's
    # function holds off a put until the claim commits).
    _version_sql: str = "(SELECT version FROM sw_fleet_version WHERE id = 1)"

    @abstractmethod
    def _tx(self) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _stmt(self) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _x(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any: ...

    @abstractmethod
    def _work_added_txn(self, cur: Any) -> None: ...

    @abstractmethod
    def _sql(self, sql: str) -> str: ...

    def _lock_gates_txn(self, cur: Any) -> None:
        """Hold off every other admission until this transaction ends."""
        return None

    def _lock_config_txn(self, cur: Any) -> None:
        """Commit a fleet config put only once no claim that read the version before it is
        still to commit (``_version_sql``): taken last, after every write of the put."""
        return None

    def _fair_sql(self) -> str:
        """Where a new command of a tenant takes its place in the fair queue (parameters:
        ``fair_params``: tenant, tenant, priority): one step past the tenant's last queued command (a step
        of SHARE_SCALE / weight), and never before the oldest command queued at its
        priority (a running step is not queued), so a tenant that was idle starts level with
        the others, not ahead."""
        g = self._greatest
        return (
            f"{g}(COALESCE((SELECT MAX(fair) FROM sw_outbox WHERE tenant = ?)"
            f" + COALESCE((SELECT share_step FROM sw_tenants WHERE tenant = ?), {SHARE_SCALE}), 0),"
            " COALESCE((SELECT MIN(fair) FROM sw_outbox WHERE priority = ? AND lease_expires_ms IS NULL), 0))"
        )

    # --- claiming ------------------------------------------------------------------------
    def claim(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int = 1, *, task_id: str | None = None
    ) -> list[Claim]:
        """Lease up to ``limit`` due commands, higher priority first, then by fair share;
        with ``task_id``, only that task's. Commands under limits are admitted (or given
        back, waiting) before this returns."""
        out: list[Claim] = []
        with self._claim_scope():
            for _ in range(_ADMISSION_ROUNDS):
                claims, rows, gated = self._claim_round(worker_id, now_ms, lease_ms, limit - len(out), task_id)
                out += claims
                if not gated or len(out) >= limit or rows < limit:
                    break
        return out

    def _claim_round(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int, task_id: str | None
    ) -> tuple[list[Claim], int, bool]:
        """One claim and the admission of what it claimed under gates: the claims, how many
        rows were claimed, and whether any had gates."""
        grant = self._grant
        holds = self._claim_holds or grant is not None  # from a grant, the claim holds the slots
        rows, version = self._claim_rows(worker_id, now_ms, lease_ms, limit, task_id, holds,
                                         versioned=grant is not None and grant.live(now_ms))
        plain = [claim_of(r) for r in rows if not is_gated(r)]
        gated = [r for r in rows if is_gated(r)]
        granted = self._from_grant(gated, now_ms, version) if gated and version is not None else None
        if granted is not None:
            return plain + granted, len(rows), True
        return (plain + self._admit(gated, now_ms, holds) if gated else plain), len(rows), bool(gated)

    def _from_grant(self, rows: list[Any], now_ms: int, version: int) -> list[Claim] | None:
        """The claims of ``rows``, admitted from this store's grant; None where it cannot
        admit them all (it ended, does not cover their gates, has too little left, or the
        fleet config's ``version``, as the claim statement read it, is not the one it was
        taken under): then they go through an admission. What a claim's rows draw from the
        grant, and their gates' names, are worked out once per grant for each run of rows
        with the same gates, tenants and gating (``_plans``): claims in fair order repeat a
        few such runs. Worked out at each claim (the gates of each row, the rooms of each set,
        the sum per room), they made a claim of 8 from a grant cost 28 to 31 us more than one
        of tenants with no limit on SQLite; once per grant, 19 to 21 (bench/README.md)."""
        grant = self._grant
        if grant is None:
            return None
        if version != grant.version:
            self._grant = None
            return None
        plans = self._plans
        if plans is None or plans[0] is not grant:
            plans = self._plans = (grant, {})
        key = tuple((r[8], r[9], r[10]) for r in rows)
        try:
            plan = plans[1][key]
        except KeyError:
            claimed = with_gates(rows)
            need = grant.need([gates for _, gates in claimed])
            plan = None if need is None else (need, tuple(gate_names(gates) for _, gates in claimed))
            if len(plans[1]) >= _PLANS_AT_MOST:
                plans[1].clear()
            plans[1][key] = plan
        if plan is None or not grant.spend(plan[0], now_ms):
            return None
        return [claim_of(r, names) for r, names in zip(rows, plan[1], strict=True)]

    def _claim_scope(self) -> AbstractContextManager[Any]:
        """What a claim and its admission run in: one transaction on SQLite (one commit for
        both; its writers are serialized anyway); nothing on PostgreSQL, where the claim is
        one statement on its own and only an admission takes the gates' lock."""
        return self._tx()

    def _claim_rows(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int, task_id: str | None, holds: bool,
        *, versioned: bool = False,
    ) -> tuple[list[Any], int | None]:
        """The claimed rows in claim order and, with ``versioned``, the fleet config's
        version as the claim saw it (None without, or with no row claimed): a grant admits
        from the claim only under the version it was taken under (``_from_grant``)."""
        with self._stmt() as cur:
            rows = in_claim_order(self._claim_query(
                cur, worker_id, now_ms, lease_ms, limit, task_id, holds=holds, versioned=versioned).fetchall())
        if not versioned or not rows:
            return rows, None
        return rows, int(rows[0][13])  # sw_fleet_version's one row is made with the table

    def _claim_query(
        self, cur: Any, worker_id: str, now_ms: int, lease_ms: int, limit: int, task_id: str | None, *, holds: bool,
        versioned: bool = False,
    ) -> Any:
        """The claim. With ``holds`` (the admission runs in the same transaction) a claimed
        row under gates takes their slots with its lease (``slot_token``, the new token); the
        admission gives back what must wait, and with it the slots. The LIMIT is written into
        the statement (one text per limit): a bound one, PostgreSQL's generic plan guesses at
        a tenth of the table, and made a plan of its own for every claim instead (its
        ``sw_due_commands`` is held to one generic plan by its settings). With ``versioned``,
        each row returned ends with the fleet config's version (``_version_sql``)."""
        where, params = self._claim_where(cur, now_ms, int(limit), task_id)
        version = f", {self._version_sql}" if versioned else ""
        return self._x(
            cur,
            "UPDATE sw_outbox SET lease_owner = ?, lease_expires_ms = ?, token = token + 1,"
            f" deliveries = deliveries + 1{_HOLDS if holds else ''} WHERE {where}"
            f" RETURNING {CLAIM_RETURNING}{version}",
            (worker_id, now_ms + lease_ms, *params),
        )

    def _claim_where(self, cur: Any, now_ms: int, limit: int, task_id: str | None) -> tuple[str, tuple[Any, ...]]:
        """Which rows the claim takes, and the parameters that says so: the due ones,
        picked in the statement itself (``_due_sql``), so that concurrent claims skip what
        another holds (PostgreSQL's SKIP LOCKED)."""
        due, params = self._due(now_ms, limit, task_id)
        return self._picked.format(due), params

    def _due(self, now_ms: int, limit: int, task_id: str | None) -> tuple[str, tuple[Any, ...]]:
        """The query of the ids of the first ``limit`` commands due at ``now_ms`` (of
        ``task_id``, or any), and its parameters."""
        one, params = (" AND task_id = ?", (task_id,)) if task_id is not None else ("", ())
        return self._due_sql(one, str(int(limit))), (now_ms, *params, now_ms, now_ms, *params)

    def _due_sql(self, one: str, limit: str) -> str:
        """The ids of the first ``limit`` (an expression) due commands, higher priority
        first, then by fair share (parameters: now, ``one``'s, now, now, ``one``'s). The free
        ones are read by their order (``sw_outbox_free``) and the expired leases by their
        expiry (``sw_outbox_leased``), and the first of both taken: a claim never reads the
        steps that are running, however many there are. The free ones are read no further
        than the first ``limit`` due (``+`` keeps SQLite from reading every due one by
        ``sw_outbox_free_due`` and sorting them instead)."""
        order = f"ORDER BY priority DESC, fair LIMIT {limit}"
        return (
            "WITH free AS (SELECT command_id, priority, fair FROM sw_outbox WHERE lease_expires_ms IS NULL"
            f" AND +available_at_ms <= ?{one} {order}{self.skip_locked}),"
            " expired AS (SELECT command_id, priority, fair FROM sw_outbox WHERE lease_expires_ms IS NOT NULL"
            f" AND lease_expires_ms <= ? AND available_at_ms <= ?{one} {order}{self.skip_locked})"
            " SELECT command_id FROM (SELECT * FROM free UNION ALL SELECT * FROM expired) due"
            f" {order}"
        )

    def _admit(self, rows: list[Any], now_ms: int, held: bool) -> list[Claim]:
        """Admit each row in claim order, or give it back waiting: one transaction, a few
        statements whatever the number of rows. Every read is sent before any is waited for
        (on PostgreSQL, BEGIN, the gates' lock and the reads are one round trip). ``held``:
        the claim of ``rows`` took their slots (``_claim_query``)."""
        claimed = with_gates(rows)
        with self._tx() as cur:
            self._lock_gates_txn(cur)
            names = sorted({g.name for _, gates in claimed for g in gates})
            return self._admit_txn(cur, claimed, now_ms, self._admission_reads(cur, names, now_ms, len(rows)), held)

    def _admission_reads(
        self, cur: Any, names: Sequence[str] | None, now_ms: int, taking: int
    ) -> tuple[Any, Any, Any]:
        """Send what an admission of up to ``taking`` commands reads, after the gates' lock:
        the config; the slots of its gates, ``names`` (None: those the last admissions looked
        at, ``_bounded``), as their bounds, or, every ``_COUNT_EVERY_MS``, the id, gates and tenant of
        every command that holds slots (its admitted claim's lease is alive); and the rate
        log totals of each named limit among ``names`` over the windows the last config read
        gave it. Cursors, not yet waited for."""
        expected = self._windows_ms
        limits = [g for g in (expected if names is None else names) if g.startswith("limit:") and g in expected]
        config_cur = self._x(self._cursor(cur), "SELECT 'v', '', CAST(version AS TEXT) FROM sw_fleet_version"
                                                " UNION ALL SELECT 'l', name, body FROM sw_limits UNION ALL"
                                                " SELECT 't', tenant, body FROM sw_tenants")
        slots_cur: tuple[str, Any]
        if now_ms >= self._count_after_ms:
            slots_cur = ("count", self._count_reads(cur, now_ms))
        else:
            bounded = self._bounded if names is None else names
            slots_cur = ("bounds", self._x(self._cursor(cur), "SELECT gate, at_most FROM sw_slot_bounds WHERE gate IN"
                                                              f" ({', '.join('?' * len(bounded))})", tuple(bounded))
                         if bounded else None)
        totals_cur = self._totals_query(self._cursor(cur), [
            (g, now_ms - w, tokens, None if tokens else self._start_caps.get((g, w))) for g in limits
            for w, tokens in expected[g].items()], taking)
        return config_cur, slots_cur, totals_cur

    def _admit_txn(
        self, cur: Any, claimed: list[tuple[Any, tuple[Gate, ...]]], now_ms: int, reads: tuple[Any, Any, Any],
        held: bool,
    ) -> list[Claim]:
        """The admission of ``claimed`` (rows with their gates, ``with_gates``) inside the
        caller's transaction, which holds the gates' lock and sent ``reads``
        (``_admission_reads``). What it writes: the rows that must wait given back (their
        slots with them), the fencing token of each admitted claim that holds slots on its
        row unless its claim wrote it (``held``), and the rate log rows."""
        from statewright.store.admission import Ledger, slots_in_use

        admitted, holders, rate_rows, waits = [], [], [], []
        together: dict[str, list[Any]] = {}  # limit gate -> [its first command, starts]
        config_cur, (slots_how, slots_cur), totals_cur = reads
        parsed = self._parsed_fleet(config_cur.fetchall())
        config, metered = parsed.config, parsed.metered
        mine = {r[0] for r, _ in claimed}  # what this admission decides on holds nothing yet

        def in_use(reads: tuple[Any, Any]) -> dict[str, int]:
            out = slots_in_use((g, t) for c, g, t in reads[0].fetchall() if c not in mine)
            for gate, n in reads[1].fetchall():
                out[str(gate)] = out.get(str(gate), 0) + int(n)
            return out

        counting = slots_how == "count"
        ledger = Ledger(
            config,
            in_use(slots_cur) if counting else {
                str(g): int(n) for g, n in (slots_cur.fetchall() if slots_cur is not None else ())},
            lambda gate, since: [(int(a), int(n), int(t)) for a, n, t in self._x(
                cur, "SELECT at_ms, starts, tokens FROM sw_rate_log WHERE gate = ? AND at_ms > ?", (gate, since)
            ).fetchall()],
            lambda tenant, day: self._usage_txn(cur, tenant, day),
            lambda gate, since: self._totals_txn(cur, gate, since),
            lambda gate: self._horizon_txn(cur, gate),
            load_in_use=None if counting else lambda: in_use(self._count_reads(cur, now_ms)),
            load_bound=lambda gate: self._bound_txn(cur, gate),
            counted=counting,
        )
        if counting:
            self._count_after_ms = now_ms + _COUNT_EVERY_MS
        windows = parsed.windows
        sent_caps, self._start_caps = self._start_caps, parsed.start_caps
        if totals_cur is not None:
            for g, since, n, tokens, horizon in totals_cur.fetchall():
                gate, window = str(g), now_ms - int(since)
                ledger.horizons[gate] = int(horizon) if horizon is not None else None
                if tokens is None and windows.get(gate, {}).get(window):
                    continue  # a token rate over this window is new in the config: the ledger reads it
                if sent_caps.get((gate, window)) != self._start_caps.get((gate, window)):
                    continue  # a start rate that changed: a bound read for the old one may not do
                ledger.totals[(gate, window)] = [int(n), int(tokens or 0)]
                ledger.window_ms[gate] = max(ledger.window_ms.get(gate, 0), window)
        taken = ledger.take_all([gates for _, gates in claimed], now_ms)
        for r, gates in claimed:
            command_id, token = str(r[0]), int(r[4])
            if taken is not None:
                slots, rates = taken[id(gates)]
            else:
                why = ledger.check(gates, now_ms)
                if why is not None:
                    waits.append((why.until_ms, why.reason, why.gate or None, command_id, token))
                    continue
                slots, rates = ledger.take(gates, now_ms)
            if slots:
                holders.append((command_id, token))
            for gate in rates:
                if gate in metered:  # a row of its own, which the tokens it reports are added to
                    rate_rows.append((gate, now_ms, command_id, 1, 1))
                elif gate in together:
                    together[gate][1] += 1
                else:  # one row for all the starts this admission takes, named by the first
                    together[gate] = [command_id, 1]
            admitted.append(claim_of(r, gate_names(gates)))
        self._windows_ms = windows
        seen = ledger.checked.union(self._bounded)
        self._bounded = tuple(sorted(seen if len(seen) <= _BOUNDED_AT_MOST else ledger.checked))
        bounds = ledger.bounds()
        grant = grant_of(ledger, [gates for _, gates in claimed], parsed.version, now_ms) if taken else None
        if grant is not None:
            rate_rows += self._set_aside_txn(cur, grant, bounds, ledger.in_use)
        if bounds:
            self._insert_rows(cur, "INSERT INTO sw_slot_bounds (gate, at_most) VALUES", "(?, ?)",
                              " ON CONFLICT (gate) DO UPDATE SET at_most = excluded.at_most", sorted(bounds.items()))
        if waits:
            self._many(cur, "UPDATE sw_outbox SET lease_owner = NULL, lease_expires_ms = NULL, available_at_ms = ?,"
                            " deliveries = CASE WHEN deliveries > 0 THEN deliveries - 1 ELSE 0 END,"
                            " waiting = ?, wait_gate = ?, slot_token = NULL WHERE command_id = ? AND token = ?", waits)
        if holders and not held:
            self._many(cur, "UPDATE sw_outbox SET slot_token = token WHERE command_id = ? AND token = ?", holders)
        rate_rows += [(gate, now_ms, first, 0, n) for gate, (first, n) in sorted(together.items())]
        if rate_rows:
            self._insert_rows(cur, "INSERT INTO sw_rate_log (gate, at_ms, command_id, tokens, metered, starts) VALUES",
                              "(?, ?, ?, 0, ?, ?)", " ON CONFLICT (gate, at_ms, command_id)"
                              " DO UPDATE SET starts = sw_rate_log.starts + excluded.starts", rate_rows)
            self._x(cur, "UPDATE sw_rate_log_rows SET at_most = at_most + ? WHERE id = 1",
                    (sum(r[4] for r in rate_rows),))
        if now_ms >= self._prune_after_ms:  # what left every window is forgotten, now and then
            self._prune_after_ms = now_ms + _PRUNE_EVERY_MS
            self._x(cur, "DELETE FROM sw_grants WHERE expires_ms <= ?", (now_ms - GRANT_SKEW_MS,))
            for gate, before in ledger.forgettable(now_ms).items():
                # Counted before they are deleted: a pipelined DELETE tells no row count.
                self._x(cur, "UPDATE sw_rate_log_rows SET at_most = at_most - (SELECT COALESCE(SUM(starts), 0)"
                             " FROM sw_rate_log WHERE gate = ? AND at_ms < ?) WHERE id = 1", (gate, before))
                self._x(cur, "DELETE FROM sw_rate_log WHERE gate = ? AND at_ms < ?", (gate, before))
                # A row of no command marks up to when the gate's rows may be gone: an admission
                # whose clock is so far behind that its window reaches there cannot count, and waits.
                self._x(cur, "INSERT INTO sw_rate_log (gate, at_ms, command_id, tokens, metered, starts)"
                             " VALUES (?, ?, '', 0, 0, 0) ON CONFLICT DO NOTHING", (gate, before - 1))
        return admitted

    def _set_aside_txn(self, cur: Any, grant: Grant, bounds: dict[str, int], in_use: dict[str, int]) -> list[Any]:
        """Count what ``grant`` sets aside before this store admits from it: its slots in
        ``bounds`` (written after) and in ``sw_grants``; its starts as rate log rows dated at
        its end, returned to be written with the admission's own."""
        self._grant = self._grant.with_rooms(grant) if self._grant is not None else grant
        if not self._owner:
            import uuid

            self._owner = uuid.uuid4().hex
        kept = sorted((g, room) for g, room in grant.rooms.items() if room.slots is not None)
        for gate, room in kept:
            bounds[gate] = bounds.get(gate, in_use.get(gate, 0)) + int(room.slots or 0)
        if kept:
            self._insert_rows(cur, "INSERT INTO sw_grants (owner, gate, amount, expires_ms) VALUES", "(?, ?, ?, ?)",
                              " ON CONFLICT (owner, gate) DO UPDATE SET amount = excluded.amount,"
                              " expires_ms = excluded.expires_ms",
                              [(self._owner, g, room.slots, room.expires_ms) for g, room in kept])
        return [(g, room.expires_ms, f"grant:{self._owner}", 0, room.starts)
                for g, room in sorted(grant.rooms.items()) if room.starts is not None]

    def _count_reads(self, cur: Any, now_ms: int) -> tuple[Any, Any]:
        """The reads of a count of the live slots, one by one, each on a cursor of its own,
        sent before either is waited for: every command that holds slots, and the slots set
        aside by grants that may still be used."""
        return (self._x(self._cursor(cur), _HOLDERS, (now_ms,)),
                self._x(self._cursor(cur), _GRANTED, (now_ms - GRANT_SKEW_MS,)))

    def _bound_txn(self, cur: Any, gate: str) -> int | None:
        """At most how many live slots ``gate`` has (None: it was never bounded)."""
        row = self._x(cur, "SELECT at_most FROM sw_slot_bounds WHERE gate = ?", (gate,)).fetchone()
        return int(row[0]) if row else None

    def _horizon_txn(self, cur: Any, gate: str) -> int | None:
        """Up to when ``gate``'s rate log rows may have been forgotten (None: none were)."""
        row = self._x(cur, f"SELECT {self._horizon_of}", (gate,)).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def _cursor(self, cur: Any) -> Any:
        """Another cursor of ``cur``'s transaction, so that several reads can be sent before
        the first is waited for."""
        return cur.connection.cursor()

    def _totals_query(self, cur: Any, windows: list[tuple[str, int, bool, int | None]], taking: int) -> Any:
        """Starts and tokens in the rate log of each (gate, after this time, whether its
        tokens count, the start rate when only starts count), as rows of (gate, since,
        starts, tokens or NULL); None when there are none to read. Where the most starts the
        rate log holds leave room for ``taking`` more under the rate, that number stands for
        the count: every start taken is admitted either way."""
        if not windows:
            return None
        parts: list[str] = []
        params: list[Any] = []
        count = "SELECT COALESCE(SUM(starts), 0) FROM sw_rate_log WHERE gate = ? AND at_ms > ?"
        span = _ROWS_AT_MOST  # one lookup by the primary key, written twice
        for g, since, tokens, cap in windows:
            if cap is not None:
                parts.append(f"SELECT ?, ?, CASE WHEN {span} <= ? THEN {span} ELSE ({count}) END, NULL,"
                             f" {self._horizon_of}")
                params += (g, since, cap - taking, g, since, g)
            else:
                summed = "COALESCE(SUM(tokens), 0)" if tokens else "NULL"
                parts.append(f"SELECT ?, ?, COALESCE(SUM(starts), 0), {summed},"
                             f" {self._horizon_of} FROM sw_rate_log WHERE gate = ? AND at_ms > ?")
                params += (g, since, g, g, since)
        return self._x(cur, " UNION ALL ".join(parts), tuple(params))

    def _totals_txn(self, cur: Any, gate: str, since_ms: int) -> tuple[int, int]:
        """Starts and tokens in the rate log of ``gate`` after ``since_ms``."""
        row = self._x(cur, "SELECT COALESCE(SUM(starts), 0), COALESCE(SUM(tokens), 0) FROM sw_rate_log"
                           " WHERE gate = ? AND at_ms > ?",
                      (gate, since_ms)).fetchone()
        return int(row[0]), int(row[1])

    def _many(self, cur: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        cur.executemany(self._sql(sql), rows)

    def _insert_rows(self, cur: Any, head: str, one: str, tail: str, rows: list[tuple[Any, ...]]) -> None:
        """Insert ``rows`` (distinct keys; ``one`` is a row's VALUES tuple): one statement
        executed for each row (SQLite, where that costs least)."""
        self._many(cur, f"{head} {one}{tail}", rows)

    def _usage_txn(self, cur: Any, tenant: str, day: int) -> tuple[int, float]:
        row = self._x(cur, "SELECT tokens, money_usd FROM sw_usage WHERE tenant = ? AND day = ?",
                      (tenant, day)).fetchone()
        return (int(row[0]), float(row[1])) if row else (0, 0.0)

    # --- waking and usage ----------------------------------------------------------------
    def wake(self, gates: Sequence[str], now_ms: int, count: int = 1) -> None:
        """Make up to ``count`` commands waiting for each of ``gates`` due now."""
        marks = ", ".join("?" * len(gates))
        with self._tx() as cur:
            self._lock_gates_txn(cur)  # what an admission under way gives back to wait is seen
            woken = self._x(
                cur,
                "UPDATE sw_outbox SET available_at_ms = ? WHERE " + self._picked.format(
                    f"SELECT command_id FROM sw_outbox WHERE wait_gate IN ({marks}) AND lease_expires_ms IS NULL"
                    " AND available_at_ms > ? ORDER BY priority DESC, fair LIMIT ?"),
                (now_ms, *gates, now_ms, count * len(gates)),
            )
            if woken.rowcount:
                self._work_added_txn(cur)

    def record_usage(
        self, command_id: str, tenant: str, gates: Sequence[str], tokens: int, money_usd: float, at_ms: int
    ) -> None:
        if not gates or (tokens <= 0 and money_usd <= 0):
            return
        from statewright.store.admission import usage_gates

        with self._tx() as cur:
            counts = usage_gates(gates, self._fleet_txn(cur))
            for gate, counted in counts.items():
                if not counted:
                    continue
                if gate.startswith("limit:"):
                    added = self._x(cur, "UPDATE sw_rate_log SET tokens = tokens + ? WHERE command_id = ?"
                                         " AND metered = 1 AND gate = ?", (tokens, command_id, gate))
                    if not added.rowcount:  # its start has no row of its own: its tokens count from now
                        self._x(cur, "INSERT INTO sw_rate_log (gate, at_ms, command_id, tokens, metered, starts)"
                                     " VALUES (?, ?, ?, ?, 1, 0) ON CONFLICT (gate, at_ms, command_id)"
                                     " DO UPDATE SET tokens = sw_rate_log.tokens + excluded.tokens",
                                (gate, at_ms, command_id, tokens))
                else:
                    self._x(
                        cur,
                        "INSERT INTO sw_usage (tenant, day, tokens, money_usd) VALUES (?, ?, ?, ?)"
                        " ON CONFLICT (tenant, day) DO UPDATE SET tokens = sw_usage.tokens + excluded.tokens,"
                        " money_usd = sw_usage.money_usd + excluded.money_usd",
                        (tenant, at_ms // DAY_MS, tokens, money_usd),
                    )

    def usage(self, tenant: str, day: int) -> tuple[int, float]:
        with self._stmt() as cur:
            return self._usage_txn(cur, tenant, day)

    # --- the config ----------------------------------------------------------------------
    def put_fleet(self, config: FleetConfig, at_ms: int) -> None:
        with self._tx() as cur:
            self._lock_gates_txn(cur)
            self._x(cur, "DELETE FROM sw_limits")
            self._x(cur, "DELETE FROM sw_tenants")
            # A gate counts toward its bound only while it has a concurrency: one given one
            # now may have slots its bound never saw. Every gate is counted afresh.
            self._x(cur, "DELETE FROM sw_slot_bounds")
            for name, lim in sorted(config.limits.items()):
                self._x(cur, "INSERT INTO sw_limits (name, body, updated_at_ms) VALUES (?, ?, ?)",
                        (name, json.dumps(lim.to_dict(), sort_keys=True), at_ms))
                if lim.tokens is not None:  # a token rate counts what steps started before it report
                    self._x(cur, "UPDATE sw_rate_log SET metered = 1 WHERE gate = ? AND metered = 0"
                                 " AND command_id <> ''", (f"limit:{name}",))
            for name, share in sorted(config.tenants.items()):
                self._x(cur, "INSERT INTO sw_tenants (tenant, share_step, gating, body, updated_at_ms)"
                             " VALUES (?, ?, ?, ?, ?)",
                        (name, share.share_step, 1 if share.gating else 0,
                         json.dumps(share.to_dict(), sort_keys=True), at_ms))
            # Grants were taken under the config before: none admits anything any longer.
            self._x(cur, "UPDATE sw_fleet_version SET version = version + 1 WHERE id = 1")
            self._x(cur, "DELETE FROM sw_grants")
            self._grant = None
            # A budget may have been raised: what it parked is looked at again now.
            self._x(cur, "UPDATE sw_outbox SET available_at_ms = ? WHERE wait_gate LIKE 'budget:%'"
                         " AND lease_expires_ms IS NULL AND available_at_ms > ?", (at_ms, at_ms))
            self._work_added_txn(cur)
            self._lock_config_txn(cur)

    def fleet(self) -> FleetConfig:
        with self._stmt() as cur:
            return self._fleet_txn(cur)

    def _fleet_txn(self, cur: Any) -> FleetConfig:
        """The config as stored now (one read; the rows parsed once per distinct text)."""
        return self._parse_fleet(self._x(cur, "SELECT 'l', name, body FROM sw_limits UNION ALL"
                                              " SELECT 't', tenant, body FROM sw_tenants").fetchall())

    def _parse_fleet(self, rows: list[Any]) -> FleetConfig:
        return self._parsed_fleet(rows).config

    def _parsed_fleet(self, rows: list[Any]) -> ParsedFleet:
        """The config the rows of ``sw_limits`` and ``sw_tenants`` hold, with what
        admissions derive from it (made once per distinct text)."""
        key = tuple((str(k), str(n), str(b)) for k, n, b in rows)
        cached = _PARSED.get(key)
        if cached is None:
            cached = ParsedFleet.of(FleetConfig(
                {n: limit_from_row(n, json.loads(b)) for k, n, b in key if k == "l"},
                {n: tenant_from_row(n, json.loads(b)) for k, n, b in key if k == "t"},
            ), next((int(b) for k, _, b in key if k == "v"), 0))
            if len(_PARSED) > 64:
                _PARSED.clear()
            _PARSED[key] = cached
        return cached


@dataclass(frozen=True)
class ParsedFleet:
    """A fleet config as read (and its version, where it was read), with what every
    admission under it derives: the limit gates whose token rate counts what a start
    reports (only their rows are looked up by command), each limit gate's rate windows
    (``_windows_of``), and its start rates."""

    config: FleetConfig
    version: int
    metered: frozenset[str]
    windows: dict[str, dict[int, bool]]
    start_caps: dict[tuple[str, int], int]

    @classmethod
    def of(cls, config: FleetConfig, version: int = 0) -> ParsedFleet:
        return cls(
            config,
            version,
            frozenset(f"limit:{n}" for n, lim in config.limits.items() if lim.tokens is not None),
            _windows_of(config),
            {(f"limit:{n}", lim.rate.window_ms): lim.rate.amount for n, lim in config.limits.items() if lim.rate},
        )


def _windows_of(config: FleetConfig) -> dict[str, dict[int, bool]]:
    """Per named limit gate, the windows of its rates, each with whether a token rate has it
    (what an admission reads ahead)."""
    out = {}
    for name, lim in config.limits.items():
        windows: dict[int, bool] = {}
        for rate, tokens in ((lim.rate, False), (lim.tokens, True)):
            if rate is not None:
                windows[rate.window_ms] = windows.get(rate.window_ms, False) or tokens
        if windows:
            out[f"limit:{name}"] = windows
    return out


def limit_from_row(name: str, body: dict[str, Any]) -> NamedLimit:
    """A named limit as the store keeps it (checked when it was put)."""
    return NamedLimit(
        name, body.get("concurrency"),
        parse_rate(body["rate"]) if "rate" in body else None,
        parse_rate(body["tokens"]) if "tokens" in body else None,
    )


def tenant_from_row(name: str, body: dict[str, Any]) -> TenantShare:
    usd = body.get("daily_usd")
    return TenantShare(name, int(body.get("weight", 1)), body.get("concurrency"), body.get("daily_tokens"),
                       float(usd) if usd is not None else None)


def fair_params(c: NewCommand) -> tuple[Any, ...]:
    """The parameters of ``FleetSql._fair_sql`` for a new command ``c``."""
    return c.tenant, c.tenant, c.priority


def with_gates(rows: list[Any]) -> list[tuple[Any, tuple[Gate, ...]]]:
    """Each claimed row with its gates, and its tenant's where the tenant has a limit or a
    budget (``claim_gates`` is imported once for all of them)."""
    from statewright.store.admission import claim_gates

    return [(r, claim_gates(r[8], str(r[9]), bool(r[10]))) for r in rows]


def is_gated(r: Any) -> bool:
    """Whether a claimed row must be admitted."""
    return r[8] is not None or bool(r[10])


def in_claim_order(rows: list[Any]) -> list[Any]:
    """Claimed rows by priority, then fair share (RETURNING keeps no order)."""
    return sorted(rows, key=lambda r: (-int(r[11]), int(r[12])))


def gate_names(gates: tuple[Gate, ...]) -> tuple[str, ...]:
    """The names of ``gates`` (made once per set: ``claim_gates`` hands out one tuple each)."""
    names = _NAMES.get(id(gates))
    if names is None or names[0] is not gates:
        if len(_NAMES) > 1024:
            _NAMES.clear()
        names = _NAMES[id(gates)] = (gates, tuple(g.name for g in gates))
    return names[1]


def claim_of(r: Any, gates: tuple[str, ...] = ()) -> Claim:
    """The claim a claimed row (``CLAIM_RETURNING``) is, admitted with ``gates``."""
    return Claim(
        command_id=str(r[0]), task_id=str(r[1]), type=str(r[2]), body=json.loads(r[3]),
        token=int(r[4]), deliveries=int(r[5]), failures=int(r[6]), lease_expires_ms=int(r[7]),
        gates=gates, tenant=str(r[9]),
    )


__all__ = [
    "CLAIM_RETURNING", "FleetSql", "claim_of", "fair_params", "in_claim_order", "is_gated",
    "limit_from_row", "tenant_from_row", "with_gates",
]
