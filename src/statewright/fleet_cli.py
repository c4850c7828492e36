"""``statewright limits``: the fleet's named limits and tenants, kept in the store and shared
by every worker on it (definition/fleet.py says what a fleet file holds)."""

from __future__ import annotations

import json
import time

import click

from statewright._cli_guard import guard as _guard
from statewright.store import DEFAULT_DB


def _db_option(fn: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--db", envvar="STATEWRIGHT_DB", default=DEFAULT_DB, show_default=True,
        help="SQLite path or postgresql:// URL (env STATEWRIGHT_DB).",
    )(fn)


@click.group()
def limits() -> None:
    """The fleet's named limits, tenants' shares, concurrency and daily budgets."""


@limits.command("apply")
@click.argument("file")
@_db_option
@_guard
def limits_apply(file: str, db: str) -> None:
    """Replace the fleet config with FILE's (limits: and tenants:). Steps a raised budget
    had parked are looked at again at once."""
    import yaml

    from statewright._errors import DefinitionError
    from statewright.definition._yaml import load_yaml, yaml_problem
    from statewright.definition.fleet import fleet_from_dict
    from statewright.definition.loader import read_definition_text
    from statewright.store import open_store

    try:
        data = load_yaml(read_definition_text(file))
    except yaml.YAMLError as exc:
        raise DefinitionError([yaml_problem(exc)], file) from None
    config = fleet_from_dict(data, file)
    store = open_store(db)
    try:
        store.put_fleet(config, int(time.time() * 1000))
    finally:
        store.close()
    click.echo(f"{len(config.limits)} limits, {len(config.tenants)} tenants applied to {store.url}")


@limits.command("show")
@_db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def limits_show(db: str, as_json: bool) -> None:
    """The fleet config, and what each tenant with a budget used today (UTC)."""
    from statewright.definition.fleet import DAY_MS
    from statewright.store import open_store

    store = open_store(db)
    try:
        config = store.fleet()
        day = int(time.time() * 1000) // DAY_MS
        used = {name: store.usage(name, day) for name in config.tenants}
    finally:
        store.close()
    out = config.to_dict()
    for name, (tokens, usd) in used.items():
        out["tenants"][name]["used_today"] = {"tokens": tokens, "usd": round(usd, 6)}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    if not config.limits and not config.tenants:
        click.echo("no limits or tenants configured (statewright limits apply FILE)")
    for name, body in out["limits"].items():
        click.echo(f"limit  {name}: " + ", ".join(f"{k} {v}" for k, v in body.items()))
    for name, body in out["tenants"].items():
        click.echo(f"tenant {name}: " + ", ".join(f"{k} {v}" for k, v in body.items() if k != "used_today")
                   + f"; used today {body['used_today']['tokens']:,} tokens, ${body['used_today']['usd']:,.2f}")


__all__ = ["limits"]
