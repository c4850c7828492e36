"""Scheduling the fleet, as data: priorities, tenants and their shares, concurrency limits,
named rate limits and daily budgets.

In a workflow file::

    workflow: deploy-service
    concurrency: 4                 # at most 4 of its steps performed at once, fleet-wide
    tenant: input.customer         # the task's tenant, read from its input at submit
    steps:
      - id: draft
        kind: ai
        limits: [model-api]        # draws on the named limit 'model-api'
      - id: ship
        kind: code
        concurrency: 1             # one deploy at a time, across every worker

In a fleet file (``statewright limits apply fleet.yaml``; kept in the store, shared by every
worker on the database)::

    limits:
      model-api: {rate: 60/min, tokens: 100000/min, concurrency: 8}
    tenants:
      acme: {weight: 3, concurrency: 10, daily_tokens: 2000000, daily_usd: 50}

Everything here is pure: parsing and checking, no store, no clock."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, TypeGuard

from statewright._errors import DefinitionError
from statewright._record import record
from statewright.definition.limits import MAX_COUNT, MAX_MONEY_USD, NAME, NAME_RULE, is_name

MIN_PRIORITY = -1000
MAX_PRIORITY = 1000
"""A task's priority: a whole number from -1000 to 1000; higher is claimed first (default 0)."""
MAX_CONCURRENCY = 100_000
"""Largest ``concurrency`` of a workflow, a step, a named limit or a tenant."""
MAX_WEIGHT = 1000
"""Largest tenant weight (its share of claims against a tenant of weight 1)."""
SHARE_SCALE = 1_000_000
"""Fair-queue units one claim of a tenant of weight 1 advances its clock by."""
DAY_MS = 86_400_000

_WINDOWS = {"s": 1_000, "sec": 1_000, "second": 1_000, "min": 60_000, "minute": 60_000,
            "h": 3_600_000, "hour": 3_600_000, "day": DAY_MS, "d": DAY_MS}
_RATE = re.compile(r"\s*([0-9]{1,15})\s*/\s*([a-z]+)\s*")
RATE_RULE = "a whole number, '/', and s, min, hour or day (60/min, 5/s, 100000/hour)"


@record
class Rate:
    """``amount`` per ``window_ms``, over any sliding window of that length."""

    amount: int
    window_ms: int
    text: str

    def __str__(self) -> str:
        return self.text


def parse_rate(value: object) -> Rate:
    """``60/min`` -> Rate(60, 60000). ValueError names the accepted form."""
    m = _RATE.fullmatch(value) if isinstance(value, str) else None
    if m is None or m.group(2) not in _WINDOWS:
        raise ValueError(f"a rate must be {RATE_RULE}; got {_shown(value)}")
    amount = int(m.group(1))
    if not 1 <= amount <= MAX_COUNT:
        raise ValueError(f"a rate's amount must be from 1 to {MAX_COUNT}; got {_shown(value)}")
    unit = m.group(2)
    return Rate(amount, _WINDOWS[unit], f"{amount}/{unit}")


@record
class NamedLimit:
    """A limit steps draw on by name (``limits: [model-api]``)."""

    name: str
    concurrency: int | None = None
    rate: Rate | None = None  # steps started per window
    tokens: Rate | None = None  # tokens the steps that drew on it used per window

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        if self.rate is not None:
            out["rate"] = self.rate.text
        if self.tokens is not None:
            out["tokens"] = self.tokens.text
        return out


@record
class TenantShare:
    """A tenant's weight in the fair share of claims, its concurrency and its daily budgets."""

    name: str
    weight: int = 1
    concurrency: int | None = None
    daily_tokens: int | None = None
    daily_usd: float | None = None

    @property
    def gating(self) -> bool:
        """Whether claiming its tasks' steps needs a look at the ledger (a limit or budget)."""
        return self.concurrency is not None or self.daily_tokens is not None or self.daily_usd is not None

    @property
    def share_step(self) -> int:
        return SHARE_SCALE // self.weight

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"weight": self.weight}
        for key in ("concurrency", "daily_tokens", "daily_usd"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@record
class FleetConfig:
    """The fleet's configuration: its named limits and its tenants' shares, by name."""

    limits: Mapping[str, NamedLimit] = field(default_factory=dict)
    tenants: Mapping[str, TenantShare] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "limits": {n: lim.to_dict() for n, lim in sorted(self.limits.items())},
            "tenants": {n: t.to_dict() for n, t in sorted(self.tenants.items())},
        }


def fleet_from_dict(data: object, source: str = "<fleet>") -> FleetConfig:
    """Check a fleet file's mapping (``limits:``, ``tenants:``) and build the config."""
    problems: list[str] = []
    if not isinstance(data, Mapping):
        msg = f"a fleet file must be a mapping with 'limits' and/or 'tenants', got {type(data).__name__}"
        raise DefinitionError([msg], source)
    for key in data:
        if key not in ("limits", "tenants"):
            problems.append(f"unknown field {key!r}; allowed: limits, tenants")
    limits = {}
    for name, body in _section(data, "limits", problems).items():
        lim = named_limit(name, body, problems.append)
        if lim is not None:
            limits[name] = lim
    tenants = {}
    for name, body in _section(data, "tenants", problems).items():
        share = tenant_share(name, body, problems.append)
        if share is not None:
            tenants[name] = share
    if problems:
        raise DefinitionError(problems, source)
    return FleetConfig(limits, tenants)


def named_limit(name: object, body: object, problem: Callable[[str], None]) -> NamedLimit | None:
    where = f"limit {name!r}"
    if not is_name(name, NAME):
        problem(f"{where}: a limit's name must be {NAME_RULE}")
        return None
    if not isinstance(body, Mapping) or not body:
        problem(f"{where}: give at least one of concurrency, rate, tokens (rate: 60/min)")
        return None
    for key in body:
        if key not in ("concurrency", "rate", "tokens"):
            problem(f"{where}: unknown field {key!r}; allowed: concurrency, rate, tokens")
    rates: dict[str, Rate | None] = {}
    for key in ("rate", "tokens"):
        rates[key] = None
        if key in body:
            try:
                rates[key] = parse_rate(body[key])
            except ValueError as exc:
                problem(f"{where}: {key}: {exc}")
    conc = concurrency(body.get("concurrency"), f"{where}: concurrency", problem) if "concurrency" in body else None
    return NamedLimit(name, conc, rates["rate"], rates["tokens"])


def tenant_share(name: object, body: object, problem: Callable[[str], None]) -> TenantShare | None:
    where = f"tenant {name!r}"
    if not is_tenant(name):
        problem(f"{where}: a tenant must be {NAME_RULE}")
        return None
    if not isinstance(body, Mapping):
        problem(f"{where}: give weight, concurrency, daily_tokens and/or daily_usd")
        return None
    for key in body:
        if key not in ("weight", "concurrency", "daily_tokens", "daily_usd"):
            problem(f"{where}: unknown field {key!r}; allowed: weight, concurrency, daily_tokens, daily_usd")
    weight = body.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
        problem(f"{where}: weight must be a whole number from 1 to {MAX_WEIGHT}; got {_shown(weight)}")
        weight = 1
    conc = concurrency(body.get("concurrency"), f"{where}: concurrency", problem) if "concurrency" in body else None
    tokens = body.get("daily_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= MAX_COUNT):
        problem(f"{where}: daily_tokens must be a whole number from 0 to {MAX_COUNT}; got {_shown(tokens)}")
        tokens = None
    usd = body.get("daily_usd")
    if usd is not None and (isinstance(usd, bool) or not isinstance(usd, int | float) or not 0 <= usd <= MAX_MONEY_USD):
        problem(f"{where}: daily_usd must be a number from 0 to {MAX_MONEY_USD:.0f}; got {_shown(usd)}")
        usd = None
    return TenantShare(name, weight, conc, tokens, float(usd) if usd is not None else None)


def concurrency(value: object, where: str, problem: Callable[[str], None]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        problem(f"{where} must be a whole number from 1 to {MAX_CONCURRENCY}; got {_shown(value)}")
        return None
    return value


def check_priority(value: object) -> int:
    """A task's priority, or ValueError naming the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        msg = f"priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY} (higher runs first); " \
              f"got {_shown(value)}"
        raise ValueError(msg)
    return value


def is_tenant(value: object) -> TypeGuard[str]:
    return is_name(value, NAME)


def check_tenant(value: object) -> str:
    if not is_tenant(value):
        raise ValueError(f"a tenant must be {NAME_RULE}; got {_shown(value)}")
    return str(value)


def workflow_scheduling(data: Mapping[str, Any], problem: Callable[[str], None]) -> tuple[int | None, str | None]:
    """A workflow's ``concurrency`` and ``tenant`` (a reference ``input.FIELD...``)."""
    conc = concurrency(data["concurrency"], "'concurrency'", problem) if "concurrency" in data else None
    ref = data.get("tenant")
    if ref is not None and (not isinstance(ref, str) or _TENANT_REF.fullmatch(ref) is None):
        problem(f"'tenant' must be a reference into the task's input such as input.customer; got {_shown(ref)}")
        ref = None
    return conc, ref


def step_scheduling(raw: Mapping[str, Any], problem: Callable[[str], None]) -> dict[str, Any]:
    """A step's ``concurrency`` and ``limits`` (names of named limits), as Step fields."""
    out: dict[str, Any] = {}
    if "concurrency" in raw:
        out["concurrency"] = concurrency(raw["concurrency"], "concurrency", problem)
    if "limits" in raw:
        names = raw["limits"]
        if not isinstance(names, list) or not all(is_name(n, NAME) for n in names):
            problem(f"limits must be a list of limit names ({NAME_RULE}); got {_shown(names)}")
        elif len(set(names)) != len(names):
            problem(f"limits names a limit twice: {_shown(names)}")
        else:
            out["limits"] = tuple(names)
    return out


_TENANT_REF = re.compile(r"input(\.[A-Za-z0-9_-]+)+")


def _section(data: Mapping[str, Any], key: str, problems: list[str]) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(f"'{key}' must map names to settings, got {type(value).__name__}")
        return {}
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


__all__ = [
    "DAY_MS",
    "MAX_CONCURRENCY",
    "MAX_PRIORITY",
    "MAX_WEIGHT",
    "MIN_PRIORITY",
    "RATE_RULE",
    "SHARE_SCALE",
    "FleetConfig",
    "NamedLimit",
    "Rate",
    "TenantShare",
    "check_priority",
    "check_tenant",
    "concurrency",
    "fleet_from_dict",
    "is_tenant",
    "named_limit",
    "parse_rate",
    "step_scheduling",
    "tenant_share",
    "workflow_scheduling",
]
