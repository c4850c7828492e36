"""What the worker counts as a secret, and how redaction treats text and values."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from statewright._errors import PermanentError
from statewright.executors._isolation import Redactor, secrets_in, step_env


def test_credentials_are_told_from_settings() -> None:
    """Names with a credential word count, and so do passwords inside URLs and DSNs;
    settings in such variables, short values and ordinary names do not."""
    environ = {
        "OPENAI_API_KEY": "sk-live-123456", "PGPASSWORD": "pg-secret-pw", "GITHUB_TOKEN": "ghp_abcdef",
        "STATEWRIGHT_DB": "postgresql://sw:url%40pw@db/sw", "LIBPQ": "host=db password='dsn pw'",
        "USE_AUTH": "true", "API_KEY_ID": "1234", "SECRET_SHORT": "abc",
        "PWD": "/home/me", "GIT_AUTHOR_NAME": "Alice Example", "SSH_AUTH_SOCK": "/tmp/agent.sock",
    }
    found = secrets_in(environ)
    assert {"sk-live-123456", "pg-secret-pw", "ghp_abcdef", "url%40pw", "url@pw", "dsn pw"} <= found
    assert {"true", "1234", "abc", "/home/me", "Alice Example", "/tmp/agent.sock"}.isdisjoint(found)


def test_redaction_covers_escaped_forms_and_nested_values() -> None:
    """A secret is replaced as written, JSON-escaped and URL-escaped, in strings inside
    dicts, lists and tuples; keys too; other values are kept."""
    r = Redactor(['pa"ss/word'])
    assert r.text('x pa"ss/word y') == "x [redacted] y"
    assert r.text('{"v": "pa\\"ss/word"}') == '{"v": "[redacted]"}'
    assert r.text("u=pa%22ss%2Fword") == "u=[redacted]"
    value = {"a": ['pa"ss/word', 3, True], 'pa"ss/word': ('pa"ss/word', None)}
    assert r.value(value) == {"a": ["[redacted]", 3, True], "[redacted]": ("[redacted]", None)}


def test_records_keep_their_identifiers() -> None:
    """An event's ids are never rewritten, only what it carries."""

    @dataclass(frozen=True)
    class Reported:
        event_id: str
        step: str
        note: str

    r = Redactor(["s3cr3t-value"])
    got = r.record(Reported("s3cr3t-value:result", "s3cr3t-value", "said s3cr3t-value"))
    assert got == Reported("s3cr3t-value:result", "s3cr3t-value", "said [redacted]")


def test_a_missing_declared_secret_is_a_permanent_error_naming_it() -> None:
    """step_env takes declared secrets from the environment; a missing one names itself."""
    assert step_env({"A": "1"}, ["TOK"], {"TOK": "v", "OTHER": "x"}) == {"A": "1", "TOK": "v"}
    with pytest.raises(PermanentError) as err:
        step_env({}, ["TOK", "KEY2"], {}, step="deploy")
    assert err.value.reason == "missing_credential"
    assert "step 'deploy' declares secret(s) TOK, KEY2" in str(err.value)
