"""Sending notifications: a worker performs a Notify command and reports NotificationSent.

    Notify (outbox) -> worker: Notifier.send(body) -> delivered: NotificationSent(delivered)
                                                   -> Retry: released, due again after a backoff
                                                   -> GiveUp / tries used: NotificationSent(error)

A notification never blocks or fails its task: the reducer records its outcome and nothing
else. Everything a message needs that is not a fact of the task comes from the worker's
environment, read when it is sent:

    STATEWRIGHT_PUBLIC_URL     the review link is {URL}/tasks/{task id}; unset: the message
                               says which command shows the review
    STATEWRIGHT_SMTP_HOST      the SMTP server (email targets); STATEWRIGHT_SMTP_PORT (25),
    STATEWRIGHT_SMTP_FROM      STATEWRIGHT_SMTP_FROM (statewright@localhost),
    STATEWRIGHT_SMTP_STARTTLS  "1": STARTTLS before sending; STATEWRIGHT_SMTP_USER and
                               STATEWRIGHT_SMTP_PASSWORD: log in
    a webhook's secret_env     the HMAC-SHA256 key of its signature

A webhook's body is JSON, signed in ``X-Statewright-Signature: sha256=HEX`` (HMAC-SHA256 of the
body's bytes with the secret); ``X-Statewright-Idempotency-Key`` carries the key, which is also
in the body and, for email, in the Message-ID. Every connection has a timeout: a receiver that
hangs costs one try, never the worker."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import smtplib
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from statewright._time import duration, when
from statewright.definition.model import RetryPolicy
from statewright.definition.notify import NotifyEvent, NotifyKind, NotifyTarget, target_from_dict
from statewright.machine.events import Event, NotificationSent

SIGNATURE_HEADER = "X-Statewright-Signature"
KEY_HEADER = "X-Statewright-Idempotency-Key"
EVENT_HEADER = "X-Statewright-Event"
DEFAULT_TIMEOUT_SECONDS = 10.0
#: Tries of one notification and the waits between them: up to 30 s (jittered down to half),
#: doubling, at most an hour; 8 tries (at most about an hour of waiting) before it is given up.
DEFAULT_RETRY = RetryPolicy(max_attempts=8, initial_backoff_seconds=30.0, max_backoff_seconds=3600.0)
_MAX_ANSWER_BYTES = 4096  # of a receiver's answer, read for the error detail


class Retry(Exception):
    """A failure worth another try later (a timeout, a refused connection, a 5xx, 429)."""


class GiveUp(Exception):
    """A failure that another try cannot mend; ``reason`` is its code."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(detail)


@dataclass
class Notifier:
    """Sends one notification per call. ``env`` is the worker's environment (read at each
    send); ``retry`` bounds the tries of one notification and spaces them."""

    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    retry: RetryPolicy = DEFAULT_RETRY

    def send(self, task_id: str, body: Mapping[str, Any]) -> None:
        """Send the Notify command ``body``; raises Retry or GiveUp when it was not sent."""
        target = target_from_dict(body.get("target") or {})
        message = compose(task_id, body, self.env.get("STATEWRIGHT_PUBLIC_URL", ""))
        if target.kind is NotifyKind.EMAIL:
            self._email(target, message)
        elif target.kind is NotifyKind.SLACK:
            self._post(target, json.dumps({"text": slack_text(str(message["text"]))}).encode(), {})
        else:
            self._webhook(target, message)

    def _webhook(self, target: NotifyTarget, message: Mapping[str, Any]) -> None:
        secret = self.env.get(target.secret_env, "")
        if not secret:
            raise GiveUp("secret_missing", f"the worker's environment has no {target.secret_env} (the webhook's "
                                           "signing secret)")
        data = json.dumps(message, sort_keys=True).encode()
        signature = hmac.new(secret.encode(), data, hashlib.sha256).hexdigest()
        headers = {SIGNATURE_HEADER: f"sha256={signature}", KEY_HEADER: str(message["idempotency_key"]),
                   EVENT_HEADER: str(message["event"])}
        self._post(target, data, headers)

    def _post(self, target: NotifyTarget, data: bytes, headers: Mapping[str, str]) -> None:
        request = urllib.request.Request(
            target.address, data=data, method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "statewright", **headers},
        )
        where = target.describe()
        try:
            with _OPENER.open(request, timeout=self.timeout_seconds) as answer:
                answer.read(_MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as exc:
            status = exc.code
            text = _answer_text(exc)
            if status >= 500 or status in (408, 429):
                raise Retry(f"{where} answered {status}{text}") from None
            raise GiveUp("refused", f"{where} answered {status}{text}") from None
        except TimeoutError:
            raise Retry(f"{where} did not answer within {self.timeout_seconds:g} s") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Retry(f"{where}: {reason}") from None
        except http.client.HTTPException as exc:  # an answer that is not HTTP
            raise Retry(f"{where}: {type(exc).__name__}: {exc}") from None

    def _email(self, target: NotifyTarget, message: Mapping[str, Any]) -> None:
        host = self.env.get("STATEWRIGHT_SMTP_HOST", "")
        if not host:
            raise GiveUp("not_configured", "STATEWRIGHT_SMTP_HOST is not set in the worker's environment")
        try:
            port = int(self.env.get("STATEWRIGHT_SMTP_PORT", "25"))
        except ValueError:
            raise GiveUp("not_configured", "STATEWRIGHT_SMTP_PORT is not a port number") from None
        mail = EmailMessage()
        mail["From"] = self.env.get("STATEWRIGHT_SMTP_FROM", "statewright@localhost")
        mail["To"] = target.address
        mail["Subject"] = " ".join(str(message["subject"]).split())[:200]  # one line, whatever a reason holds
        key_hash = hashlib.sha256(str(message["idempotency_key"]).encode()).hexdigest()[:32]
        mail["Message-ID"] = f"<{key_hash}@statewright>"
        mail[KEY_HEADER] = str(message["idempotency_key"])
        mail.set_content(str(message["text"]))
        try:
            with smtplib.SMTP(host, port, timeout=self.timeout_seconds) as smtp:
                if self.env.get("STATEWRIGHT_SMTP_STARTTLS") == "1":
                    smtp.starttls()
                user = self.env.get("STATEWRIGHT_SMTP_USER", "")
                if user:
                    smtp.login(user, self.env.get("STATEWRIGHT_SMTP_PASSWORD", ""))
                smtp.send_message(mail)
        except smtplib.SMTPRecipientsRefused as exc:
            raise GiveUp("refused", f"the SMTP server refused {target.address}: {_smtp_text(exc)}") from None
        except smtplib.SMTPResponseException as exc:
            if 500 <= exc.smtp_code < 600:
                raise GiveUp("refused", f"the SMTP server answered {exc.smtp_code}: {_smtp_text(exc)}") from None
            raise Retry(f"the SMTP server answered {exc.smtp_code}: {_smtp_text(exc)}") from None
        except (smtplib.SMTPException, OSError) as exc:
            raise Retry(f"SMTP {host}:{port}: {exc or type(exc).__name__}") from None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A webhook is posted where it is configured, never where an answer points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def _answer_text(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(_MAX_ANSWER_BYTES).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f": {' '.join(text.split())[:200]}" if text else ""


def _smtp_text(exc: Exception) -> str:
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return "; ".join(f"{code} {msg.decode('utf-8', 'replace')}" for code, msg in exc.recipients.values())
    if isinstance(exc, smtplib.SMTPResponseException):
        error = exc.smtp_error
        return error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
    return str(exc)


def slack_text(text: str) -> str:
    """Text escaped as Slack reads it: ``&``, ``<`` and ``>`` are literal, so a step's output in
    a halt's detail cannot mention a channel (``<!channel>``) or hide a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def review_link(task_id: str, public_url: str) -> str | None:
    return f"{public_url.rstrip('/')}/tasks/{task_id}" if public_url else None


def compose(task_id: str, body: Mapping[str, Any], public_url: str) -> dict[str, Any]:
    """The message of a Notify command: a subject, a text for people, and the facts as JSON
    (a webhook's body). With no public URL, the text names the command that shows the review."""
    facts = dict(body.get("facts") or {})
    event, step, workflow = str(body.get("event", "")), str(body.get("step", "")), str(facts.get("workflow", ""))
    link = review_link(task_id, public_url)
    review = f"Review: {link}" if link else (
        f"Review it with: statewright review {task_id} (set STATEWRIGHT_PUBLIC_URL on the workers for a link)")
    if event == NotifyEvent.APPROVAL:
        subject = f"[statewright] task {task_id} waits for your approval at {step}"
        lines = [f"Task {task_id} ({workflow}) waits for an approval at step {step!r}"
                 + (f" by the role {facts['role']}." if facts.get("role") else "."),
                 f"Proposal sha256: {facts.get('proposal_hash', '')}"]
        if facts.get("expires_at_ms") is not None:
            lines.append(f"The approval window closes at {when(int(facts['expires_at_ms']))}.")
    elif event == NotifyEvent.HALTED:
        subject = f"[statewright] task {task_id} halted at {step}: {facts.get('reason', '')}"
        lines = [f"Task {task_id} ({workflow}) halted at step {step!r}: {facts.get('reason', '')}."]
        if facts.get("detail"):
            lines.append(str(facts["detail"]))
        lines.append(f"An operator may retry or cancel it: statewright retry {task_id} --reason TEXT")
    else:
        after = duration(float(facts.get("stuck_after_seconds") or 0))
        subject = f"[statewright] task {task_id} is stuck at {step}"
        lines = [f"Task {task_id} ({workflow}) has been at step {step!r} for more than {after} "
                 f"(since {when(int(facts.get('since_ms') or 0))}; it is {facts.get('status', '')})."]
    lines.append(review)
    return {
        "event": event, "task_id": task_id, "workflow": workflow, "step": step, "attempt": body.get("attempt"),
        "idempotency_key": body.get("idempotency_key", ""), "subject": subject, "text": "\n".join(lines),
        "review_url": link, "review_command": f"statewright review {task_id}", "facts": facts,
    }


def notification_lines(events: Sequence[Event]) -> list[str]:
    """One line per notification recorded in a task's log, for ``statewright show``:
    ``approval at review #1 -> webhook hooks.example.com: delivered (1 try) at 2026-12-02 10:42 UTC``."""
    out = []
    for ev in events:
        if not isinstance(ev, NotificationSent):
            continue
        tries = f"{ev.tries} {'try' if ev.tries == 1 else 'tries'}"
        how = f"delivered ({tries})" if ev.delivered else f"given up, {ev.error} ({tries}): {ev.detail[:200]}"
        out.append(f"{ev.event} at {ev.step} #{ev.attempt} -> {ev.target}: {how} at {when(ev.at_ms)}")
    return out
