"""The fleet in the in-memory store: claiming by priority and fair share, admission under
the limits (store/admission.py), waking, usage. The same rules as store/fleet_sql.py, over
the database's dictionaries, under its lock (which serializes admissions as the SQL stores'
transactions do)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from statewright.definition.fleet import DAY_MS, SHARE_SCALE, FleetConfig
from statewright.store.admission import Ledger, claim_gates, slots_in_use, usage_gates
from statewright.store.base import Claim, NewCommand
from statewright.store.memory_tables import CommandRow, Database


class MemoryFleet:
    db: Database

    def _config(self) -> FleetConfig:
        return self.db.fleet if self.db.fleet is not None else FleetConfig()

    def _fair(self, tenant: str, priority: int) -> int:
        """As ``FleetSql._fair_sql``: one share step past the tenant's last queued command,
        never before the oldest queued at its priority."""
        mine = [c.fair for c in self.db.outbox.values() if c.tenant == tenant]
        level = [c.fair for c in self.db.outbox.values() if c.priority == priority and c.lease_expires_ms is None]
        share = self._config().tenants.get(tenant)
        step = share.share_step if share is not None else SHARE_SCALE
        return max(max(mine) + step if mine else 0, min(level) if level else 0)

    def _new_row(self, task_id: str, c: NewCommand, body_json: str) -> CommandRow:
        """The outbox row of a new command, in its place in its tenant's fair queue."""
        return CommandRow(c.command_id, task_id, c.type, body_json, c.available_at_ms, priority=c.priority,
                          tenant=c.tenant, fair=self._fair(c.tenant, c.priority), gates=c.gates)

    def claim(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int = 1, *, task_id: str | None = None
    ) -> list[Claim]:
        with self.db.lock:
            config = self._config()
            due = sorted(
                (c for c in self.db.outbox.values()
                 if c.available_at_ms <= now_ms and (c.lease_expires_ms is None or c.lease_expires_ms <= now_ms)
                 and (task_id is None or c.task_id == task_id)),
                key=lambda c: (-c.priority, c.fair),
            )
            ledger: Ledger | None = None
            out: list[Claim] = []
            for c in due:
                if len(out) >= limit:
                    break
                share = config.tenants.get(c.tenant)
                gates = claim_gates(c.gates, c.tenant, share is not None and share.gating)
                held = replace(c, lease_owner=worker_id, lease_expires_ms=now_ms + lease_ms, token=c.token + 1,
                               deliveries=c.deliveries + 1)
                if gates:
                    ledger = ledger or Ledger(config, self._in_use(now_ms), self._window, self._spent,
                                              load_horizon=self.db.rate_horizon.get)
                    why = ledger.check(gates, now_ms)
                    if why is not None:
                        self.db.outbox[c.command_id] = replace(c, available_at_ms=why.until_ms, waiting=why.reason,
                                                               wait_gate=why.gate or None)
                        continue
                    slots, rates = ledger.take(gates, now_ms)
                    if slots:
                        held = replace(held, slot_token=held.token)
                    for g in rates:
                        self.db.rate_log.setdefault(g, []).append([now_ms, c.command_id, 0, 1])
                self.db.outbox[c.command_id] = held
                out.append(_claim(held, tuple(g.name for g in gates)))
            if ledger is not None:
                for gate, before in ledger.forgettable(now_ms).items():
                    self.db.rate_log[gate] = [r for r in self.db.rate_log.get(gate, []) if r[0] >= before]
                    self.db.rate_horizon[gate] = max(self.db.rate_horizon.get(gate, before - 1), before - 1)
        return out

    def _in_use(self, now_ms: int) -> dict[str, int]:
        """Live slots per gate: commands whose admitted claim still holds its lease."""
        return slots_in_use((c.gates, c.tenant) for c in self.db.outbox.values()
                            if c.slot_token is not None and c.slot_token == c.token
                            and c.lease_expires_ms is not None and c.lease_expires_ms > now_ms)

    def _window(self, gate: str, since_ms: int) -> list[tuple[int, int, int]]:
        rows = self.db.rate_log.get(gate, [])
        return [(int(r[0]), int(r[3]), int(r[2])) for r in rows if r[0] > since_ms]

    def _spent(self, tenant: str, day: int) -> tuple[int, float]:
        return self.db.usage.get((tenant, day), (0, 0.0))

    def wake(self, gates: Sequence[str], now_ms: int, count: int = 1) -> None:
        with self.db.lock:
            for gate in gates:
                waiting = sorted((c for c in self.db.outbox.values()
                                  if c.wait_gate == gate and c.lease_expires_ms is None and c.available_at_ms > now_ms),
                                 key=lambda c: (-c.priority, c.fair))[:count]
                for c in waiting:
                    self.db.outbox[c.command_id] = replace(c, available_at_ms=now_ms)

    def record_usage(
        self, command_id: str, tenant: str, gates: Sequence[str], tokens: int, money_usd: float, at_ms: int
    ) -> None:
        if not gates or (tokens <= 0 and money_usd <= 0):
            return
        with self.db.lock:
            for gate, counted in usage_gates(gates, self._config()).items():
                if not counted:
                    continue
                if gate.startswith("limit:"):
                    rows = [r for r in self.db.rate_log.get(gate, []) if r[1] == command_id]
                    for r in rows:
                        r[2] += tokens
                    if not rows:  # its start was forgotten: its tokens count from now
                        self.db.rate_log.setdefault(gate, []).append([at_ms, command_id, tokens, 0])
                else:
                    key = (tenant, at_ms // DAY_MS)
                    t, m = self.db.usage.get(key, (0, 0.0))
                    self.db.usage[key] = (t + tokens, m + money_usd)

    def usage(self, tenant: str, day: int) -> tuple[int, float]:
        return self._spent(tenant, day)

    def put_fleet(self, config: FleetConfig, at_ms: int) -> None:
        with self.db.lock:
            self.db.fleet = config
            for c in list(self.db.outbox.values()):
                parked = (c.wait_gate or "").startswith("budget:")
                if parked and c.lease_expires_ms is None and c.available_at_ms > at_ms:
                    self.db.outbox[c.command_id] = replace(c, available_at_ms=at_ms)

    def fleet(self) -> FleetConfig:
        return self._config()


def _claim(c: CommandRow, gates: tuple[str, ...] = ()) -> Claim:
    return Claim(
        command_id=c.command_id, task_id=c.task_id, type=c.type, body=json.loads(c.body), token=c.token,
        deliveries=c.deliveries, failures=c.failures, lease_expires_ms=int(c.lease_expires_ms or 0),
        gates=gates, tenant=c.tenant,
    )


__all__ = ["MemoryFleet"]
