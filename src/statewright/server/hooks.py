"""Webhooks that start tasks: ``POST /api/hooks/NAME`` with a signed JSON body.

A hooks file names each hook's workflow, the environment variable holding its secret, and
how the task's input is made from the body::

    hooks:
      new-order:
        workflow: order.yaml            # relative to the hooks file
        secret_env: ORDER_HOOK_SECRET   # read once, when the server starts
        input:                          # optional; without it the whole body is the input
          order_id: body.order.id
          amount: body.order.amount

A request is taken only when ``X-Statewright-Signature`` is ``sha256=HEX``, the HMAC-SHA256
of the raw body under the secret. ``X-Statewright-Delivery`` names the delivery; the task is
submitted under the key ``hook:NAME:DELIVERY``, so a repeat returns the same task and the
same id with a body that maps to other input is refused by the engine (KeyReusedError)."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

import yaml

from statewright._errors import AuthenticationError, DefinitionError, InputError
from statewright._record import record
from statewright.definition._yaml import load_yaml, yaml_problem
from statewright.definition.loader import load_workflow, read_definition_text
from statewright.definition.model import Workflow
from statewright.machine.paths import Ref, RefError, parse_ref, resolve

SIGNATURE_HEADER = "X-Statewright-Signature"
DELIVERY_HEADER = "X-Statewright-Delivery"
_MIN_SECRET_BYTES = 16


@record
class Hook:
    name: str
    workflow: Workflow
    secret_env: str
    secret: bytes = field(repr=False)
    input: Mapping[str, Ref] | None = None  # field -> reference into the body; None: the body itself

    def check_signature(self, body: bytes, header: str | None) -> None:
        """Raises AuthenticationError unless ``header`` signs ``body`` with this hook's secret."""
        if not header:
            raise AuthenticationError(f"hook {self.name!r}: the request has no {SIGNATURE_HEADER} header")
        algo, _, given = header.strip().partition("=")
        if algo != "sha256" or not given:
            raise AuthenticationError(f"hook {self.name!r}: {SIGNATURE_HEADER} must be sha256=HEX")
        expected = hmac.new(self.secret, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, given.lower()):
            raise AuthenticationError(f"hook {self.name!r}: the signature does not match the body")

    def task_input(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The task's input made from the body; InputError naming the reference that found nothing."""
        if self.input is None:
            return dict(body)
        out: dict[str, Any] = {}
        for name, ref in self.input.items():
            try:
                out[name] = resolve(ref, body, {})
            except RefError as exc:
                text = _in_body(str(exc))
                raise InputError(f"hook {self.name!r}: input {name!r}: {text}") from None
        return out

    def key(self, delivery: str) -> str:
        return f"hook:{self.name}:{delivery}"


def _in_body(text: str) -> str:
    """A reference's message in the hooks file's words: its root is ``body``, not ``input``."""
    return re.sub(r"(?<![\w.])input(?=[.:\s]|$)", "body", text)


def sign(secret: bytes, body: bytes) -> str:
    """The signature header's value for ``body`` (what a sender computes)."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def load_hooks(path: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, Hook]:
    """The hooks of a hooks file; DefinitionError naming the file and every problem."""
    env = os.environ if environ is None else environ
    source = str(path)
    text = read_definition_text(path)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise DefinitionError([yaml_problem(exc)], source) from None
    hooks = data.get("hooks") if isinstance(data, dict) else None
    if not isinstance(hooks, dict) or not hooks:
        raise DefinitionError(["expected 'hooks:' mapping each hook's name to {workflow, secret_env, input}"], source)
    problems: list[str] = []
    out: dict[str, Hook] = {}
    for name, spec in hooks.items():
        hook = _hook(str(name), spec, Path(path).parent, env, problems)
        if hook is not None:
            out[hook.name] = hook
    if problems:
        raise DefinitionError(problems, source)
    return out


def _hook(name: str, spec: object, base: Path, env: Mapping[str, str], problems: list[str]) -> Hook | None:
    where = f"hook {name!r}"
    if not isinstance(spec, dict):
        problems.append(f"{where}: expected a mapping with workflow, secret_env and input")
        return None
    unknown = sorted(set(spec) - {"workflow", "secret_env", "input"})
    if unknown:
        problems.append(f"{where}: unknown field {unknown[0]!r} (known: workflow, secret_env, input)")
    secret_env, file = spec.get("secret_env"), spec.get("workflow")
    if not isinstance(file, str) or not file:
        problems.append(f"{where}: 'workflow' must name a workflow file")
        return None
    if not isinstance(secret_env, str) or not secret_env:
        problems.append(f"{where}: 'secret_env' must name the environment variable holding the secret")
        return None
    secret = env.get(secret_env, "")
    if len(secret.encode()) < _MIN_SECRET_BYTES:
        have = "is not set" if not secret else f"holds {len(secret.encode())} bytes"
        problems.append(f"{where}: the secret in ${secret_env} {have}; it must hold at least {_MIN_SECRET_BYTES}")
        return None
    mapping = _mapping(spec.get("input"), where, problems)
    try:
        wf = load_workflow(base / file)
    except DefinitionError as exc:
        problems += [f"{where}: {exc.source}: {p}" for p in exc.problems]
        return None
    return Hook(name, wf, secret_env, secret.encode(), mapping)


def _mapping(raw: object, where: str, problems: list[str]) -> dict[str, Ref] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not raw:
        problems.append(f"{where}: 'input' must map each input field to a reference into the body (body.FIELD)")
        return None
    out: dict[str, Ref] = {}
    for field_name, text in raw.items():
        if not isinstance(text, str) or not (text == "body" or text.startswith("body.")):
            problems.append(f"{where}: input {field_name!r}: {text!r} is not a reference such as body.order.id")
            continue
        try:
            out[str(field_name)] = parse_ref("input" + text[len("body"):])
        except RefError as exc:
            problems.append(f"{where}: input {field_name!r}: {_in_body(str(exc))}")
    return out
