"""The API's OpenAPI 3.1 description, served at ``/openapi.json``, written by hand.

The request body schemas here are also what the server checks bodies against
(``BODIES``), so the description and the checks cannot drift apart."""

from __future__ import annotations

from typing import Any

from statewright.machine.loop.model import LoopStatus
from statewright.machine.state import TaskStatus

_HASH = {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "sha256 of the canonical proposal reviewed"}
_AS = {"type": "string", "description": "Your name: refused (403) unless it is the token's person."}
_TEXT = {"type": "string", "maxLength": 10000}

BODIES: dict[str, dict[str, Any]] = {
    "SubmitBody": {
        "type": "object", "additionalProperties": False, "required": ["workflow"],
        "properties": {
            "workflow": {"type": "string", "description": "The name of a workflow the server was started with."},
            "input": {"type": "object", "description": "The task's input (checked against the workflow)."},
            "key": {"type": "string", "minLength": 1, "maxLength": 200,
                    "description": "Idempotency key: the same submission again returns the same task; "
                                   "the key with other input is 409."},
            "priority": {"type": "integer", "minimum": -1000, "maximum": 1000,
                         "description": "Higher is claimed first (default 0); within one priority, oldest first."},
            "tenant": {"type": "string", "minLength": 1, "maxLength": 64,
                       "description": "Whose fair share and limits the task's steps count against (default: "
                                      "the workflow's 'tenant:' reference into the input, else none)."},
        },
    },
    "ApproveBody": {
        "type": "object", "additionalProperties": False, "required": ["proposal_hash"],
        "properties": {"proposal_hash": _HASH, "comment": _TEXT, "as": _AS},
    },
    "RejectBody": {
        "type": "object", "additionalProperties": False, "required": ["reason_code"],
        "properties": {"reason_code": {"type": "string", "minLength": 1, "maxLength": 100}, "comment": _TEXT,
                       "as": _AS},
    },
    "EvidenceBody": {
        "type": "object", "additionalProperties": False, "required": ["evidence"],
        "properties": {
            "evidence": {"type": "object", "minProperties": 1,
                         "description": "What is supplied (a document's id and kind, a callback's record, ...)."},
            "note": {**_TEXT, "description": "What the evidence is, in a few words."}, "as": _AS,
        },
    },
    "ReasonBody": {
        "type": "object", "additionalProperties": False, "required": ["reason"],
        "properties": {"reason": {"type": "string", "minLength": 1, "maxLength": 2000}, "as": _AS},
    },
}

_ERROR = {
    "type": "object", "required": ["error", "code"],
    "properties": {
        "error": {"type": "string", "description": "What was refused and what to do, in one line."},
        "code": {"type": "string", "description": "The kind of refusal (unauthenticated, forbidden, not_found, "
                                                  "stale, expired, not_waiting, conflict, key_reused, invalid, "
                                                  "unavailable)."},
        "task_id": {"type": "string"},
    },
}
_TASK_ROW = {
    "type": "object",
    "required": ["task_id", "workflow", "status", "version", "step", "why", "updated_at_ms", "updated"],
    "properties": {
        "task_id": {"type": "string"}, "workflow": {"type": "string"},
        "status": {"type": "string", "enum": [s.value for s in TaskStatus]},
        "version": {"type": "integer"}, "step": {"type": ["string", "null"]},
        "halt_reason": {"type": ["string", "null"]}, "why": {"type": "string"},
        "updated_at_ms": {"type": "integer"}, "updated": {"type": "string", "description": "UTC date and time"},
        "priority": {"type": "integer"}, "tenant": {"type": ["string", "null"]},
        "waiting": {"type": ["string", "null"],
                    "description": "A running task whose step is not running now: why (a limit, a share, a "
                                   "priority, a retry's backoff)."},
    },
}
_SCHEMAS: dict[str, Any] = {
    **BODIES,
    "Error": _ERROR,
    "Object": {"type": "object"},
    "TaskRow": _TASK_ROW,
    "TaskList": {"type": "object", "required": ["tasks"],
                 "properties": {"tasks": {"type": "array", "items": {"$ref": "#/components/schemas/TaskRow"}}}},
    "Task": {
        "type": "object", "required": ["task_id", "workflow", "status", "version", "state", "history", "events"],
        "properties": {
            "task_id": {"type": "string"}, "workflow": {"type": "string"}, "workflow_version": {"type": "integer"},
            "workflow_hash": {"type": "string"}, "status": {"type": "string"}, "version": {"type": "integer"},
            "step": {"type": ["string", "null"]},
            "waiting": {"type": ["string", "null"], "description": "Why its queued step is not running now."},
            "proposal_hash": {**_HASH, "description": "While the task waits at a human step: what an approval quotes."},
            "halt": {"type": "object"},
            "state": {"type": "object", "description": "The task's durable state: input, results, attempts."},
            "history": {"type": "array", "items": {"type": "string"},
                        "description": "The history as a straight line with annotated detours."},
            "events": {"type": "array", "items": {"type": "object"}},
        },
    },
    "Review": {
        "type": "object", "required": ["task_id", "workflow", "status", "why", "evidence", "checks", "verdicts"],
        "description": "What an approver decides on; proposal, proposal_hash, expires, approvers and "
                       "reject_codes are there while the task waits for an approval.",
        "properties": {
            "task_id": {"type": "string"}, "workflow": {"type": "object"}, "status": {"type": "string"},
            "step": {"type": ["string", "null"]}, "why": {"type": "string"}, "since": {"type": "string"},
            "input": {"type": "object"}, "evidence": {"type": "array"}, "checks": {"type": "array"},
            "verdicts": {"type": "array"}, "results": {"type": "object"}, "proposal": {"type": "object"},
            "artifacts": {"type": "object"}, "proposal_hash": _HASH, "expires": {"type": ["string", "null"]},
            "approvers": {"type": "object"}, "reject_codes": {"type": "array", "items": {"type": "string"}},
        },
    },
    "Acted": {
        "type": "object", "required": ["task_id", "status", "version"],
        "properties": {"task_id": {"type": "string"}, "status": {"type": "string"}, "version": {"type": "integer"},
                       "by": {"type": "string"},
                       "proposal_hash": {**_HASH, "description": "After evidence, while the task waits for an "
                                                                 "approval: the hash of the proposal built again"}},
    },
    "Submitted": {
        "type": "object", "required": ["task_id", "status", "created"],
        "properties": {"task_id": {"type": "string"}, "status": {"type": "string"},
                       "created": {"type": "boolean", "description": "false: the same submission was made before"}},
    },
    "Run": {"type": "object", "required": ["run", "loop", "status"],
            "properties": {"run": {"type": "string"}, "loop": {"type": "string"},
                           "status": {"type": "string", "enum": [s.value for s in LoopStatus]},
                           "reason": {"type": "string"}, "passes": {"type": "integer"}, "held": {"type": "boolean"}}},
    "RunList": {"type": "object", "required": ["runs", "loop_db"],
                "properties": {"runs": {"type": "array", "items": {"$ref": "#/components/schemas/Run"}},
                               "loop_db": {"type": "string"}}},
    "RunDetail": {"allOf": [{"$ref": "#/components/schemas/Run"},
                            {"type": "object", "required": ["lines"],
                             "properties": {"lines": {"type": "array", "items": {"type": "object"}}}}]},
}


def _json(schema: str, description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


_ERRORS = {
    "401": _json("Error", "No token, or one that is unknown or revoked"),
    "403": _json("Error", "The token's person may not do this (role, scope, separation of duty, --as)"),
    "404": _json("Error", "No such task"),
    "409": _json("Error", "The task moved on: a stale hash or version, an expired approval, or an act "
                          "that does not apply to the task as it stands"),
    "422": _json("Error", "A malformed body or parameter"),
}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: _ERRORS[c] for c in codes}


_TASK_ID = {"name": "task_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _act(summary: str, body: str, *, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"post": {
        "summary": summary, "parameters": [_TASK_ID],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{body}"}}}},
        "responses": {"200": _json("Acted", "Done; the task as it stands now"),
                      **_errors("401", "403", "404", "409", "422", *extra)},
    }}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _task_list(summary: str) -> dict[str, Any]:
    return {"summary": summary, "responses": {"200": _json("TaskList", "The tasks"), **_errors("401")}}


def spec(*, metrics: bool = True) -> dict[str, Any]:
    """The OpenAPI document of the app ``create_app`` builds (``metrics``: whether it serves
    ``/metrics`` itself)."""
    paths: dict[str, Any] = {
        "/api/tasks": {
            "get": {
                "summary": "List tasks, oldest first",
                "parameters": [
                    _query("status", {"type": "string", "enum": [s.value for s in TaskStatus]}, "Only this status"),
                    _query("workflow", {"type": "string"}, "Only this workflow"),
                    _query("min_age_seconds", {"type": "integer", "minimum": 0},
                           "Only tasks unchanged for at least this long"),
                    _query("max_age_seconds", {"type": "integer", "minimum": 0},
                           "Only tasks changed within this long"),
                    _query("waiting_for_me", {"type": "boolean"}, "Only tasks waiting for an approval you may give"),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "At most this many (100)"),
                ],
                "responses": {"200": _json("TaskList", "The tasks"), **_errors("401", "422")},
            },
            "post": {
                "summary": "Submit a task of a workflow the server was started with",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/SubmitBody"}}}},
                "responses": {"201": _json("Submitted", "Submitted"),
                              "200": _json("Submitted", "The same submission was made before under this key"),
                              **_errors("401", "409", "422")},
            },
        },
        "/api/tasks/{task_id}": {"get": {
            "summary": "A task: its state, the proposal hash while it waits at a human step, its history",
            "parameters": [_TASK_ID],
            "responses": {"200": _json("Task", "The task"), **_errors("401", "404")},
        }},
        "/api/tasks/{task_id}/review": {"get": {
            "summary": "What an approver decides on (as 'statewright review')",
            "parameters": [_TASK_ID],
            "responses": {"200": _json("Review", "The review"), **_errors("401", "404")},
        }},
        "/api/tasks/{task_id}/approve": _act("Approve the proposal reviewed", "ApproveBody"),
        "/api/tasks/{task_id}/reject": _act("Reject the proposal with a reason code", "RejectBody"),
        "/api/tasks/{task_id}/evidence": _act(
            "Supply evidence (operator): an audited event; a proposal waiting for approval is built again, "
            "so an approval quoting the old hash is refused", "EvidenceBody"),
        "/api/tasks/{task_id}/retry": _act("Re-run a halted task's halted step (operator)", "ReasonBody"),
        "/api/tasks/{task_id}/cancel": _act("Cancel a task (operator)", "ReasonBody"),
        "/api/inbox": {"get": _task_list("Tasks waiting for an approval the caller may give")},
        "/api/halted": {"get": _task_list("Halted tasks: the operator queue")},
        "/api/runs": {"get": {
            "summary": "Outer-loop runs, newest first",
            "parameters": [_query("loop", {"type": "string"}, "Only runs of this loop"),
                           _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "At most (20)")],
            "responses": {"200": _json("RunList", "The runs"), **_errors("401", "422")},
        }},
        "/api/runs/{run_id}": {"get": {
            "summary": "One outer-loop run and its record",
            "parameters": [{"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json("RunDetail", "The run"), **_errors("401", "404")},
        }},
        "/api/hooks/{name}": {"post": {
            "summary": "Start a task of the hook's workflow, its input mapped from the JSON body",
            "description": "Signed, not bearer-authenticated: X-Statewright-Signature is sha256=HEX, the "
                           "HMAC-SHA256 of the raw body with the hook's secret. X-Statewright-Delivery names "
                           "the delivery: a repeat returns the same task; the id with a body that maps to "
                           "other input is 409.",
            "security": [],
            "parameters": [
                {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                {"name": "X-Statewright-Signature", "in": "header", "required": True, "schema": {"type": "string"}},
                {"name": "X-Statewright-Delivery", "in": "header", "required": True,
                 "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
            ],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
            "responses": {"201": _json("Submitted", "A task was started"),
                          "200": _json("Submitted", "This delivery started the task before"),
                          "401": _json("Error", "No signature, or one that does not match"),
                          "404": _json("Error", "No hook of that name"),
                          **_errors("409", "422")},
        }},
        "/api/agents/{queue}/claim": {"post": {
            "summary": "A remote agent claims the oldest parked attempt of its queue (long poll)",
            "description": "Needs an agent identity (role agent or agent:queue=NAME). 200: the brief and a "
                           "task token, given out once; 204: none came within wait seconds (capped at 30).",
            "parameters": [{"name": "queue", "in": "path", "required": True, "schema": {"type": "string"}},
                           _query("wait", {"type": "number", "minimum": 0, "maximum": 30},
                                  "Seconds to wait for work (0)")],
            "responses": {"200": _json("Object", "The work: task, step, attempt, brief, token"),
                          "204": {"description": "No work came"}, **_errors("401", "403", "422")},
        }},
        "/api/agents/heartbeat": {"post": {
            "summary": "The agent that claimed an attempt says it is still at work",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["token"], "properties": {"token": {"type": "string"}}}}}},
            "responses": {"200": _json("Object", "The new heartbeat deadline"),
                          **_errors("401", "403", "409", "422")},
        }},
        "/api/agents/report": {"post": {
            "summary": "The agent reports a verdict, or a failure with a reason code",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["token"],
                "properties": {"token": {"type": "string"}, "verdict": {"type": "object"},
                               "error": {"type": "string"}, "detail": {"type": "string"},
                               "note": {"type": "string"}}}}}},
            "responses": {"200": _json("Object", "How the task took it: status, repair turn, reason"),
                          **_errors("401", "403", "409", "422")},
        }},
    }
    for ops in paths.values():
        for op in ops.values():
            op["responses"]["503"] = _json("Error", "The database cannot be reached, or is not statewright's")
    paths["/openapi.json"] = {"get": {
        "summary": "This document", "security": [],
        "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}},
    }}
    if metrics:
        paths["/metrics"] = {"get": {
            "summary": "Prometheus metrics: tasks by status and age, approval queue time, step latency, "
                       "attempts, failures by reason code",
            "security": [],
            "responses": {"200": {"description": "Prometheus text format 0.0.4",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}},
                          "503": _json("Error", "The database cannot be reached")},
        }}
    return {
        "openapi": "3.1.0",
        "info": {"title": "statewright", "version": "1",
                 "description": "Tasks, approvals and the operator queue of one statewright store. Every "
                                "call but /openapi.json, /metrics and the signed hooks takes "
                                "'Authorization: Bearer TOKEN' (a token from 'statewright users token')."},
        "paths": paths,
        "components": {"schemas": _SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
