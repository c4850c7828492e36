"""schemathesis against /openapi.json: inputs generated from the document (and ones that
break it) never get a 5xx, and each answer is a status and a body the document describes."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from server.support import World

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def test_no_input_gets_a_server_error(world: World) -> None:
    """Every operation, about 20 generated cases each, with a valid token (the hooks: none)."""
    world.waiting("gate")  # something to list, review and act on
    world.halted()
    schema = schemathesis.openapi.from_asgi("/openapi.json", world.client.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 18  # with /openapi.json, /metrics and the remote agents' three

    for operation in operations:
        _fuzz(world, operation)


def _fuzz(world: World, operation: Any) -> None:
    signed = operation.path != "/api/hooks/{name}"

    @given(operation.as_strategy())
    @settings(max_examples=20, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    def check(case: Any) -> None:
        headers = {**(case.headers or {}), **world.auth("mia")} if signed else None
        if case.query and "wait" in case.query:  # a long poll with nothing to claim waits it out
            case.query["wait"] = 0
        case.call_and_validate(headers=headers, checks=CHECKS)

    check()
