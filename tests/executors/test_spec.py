"""Spec shapes, durations and timeouts: what load time rejects, and how it says so."""

from __future__ import annotations

import pytest

from statewright.executors import (
    parse_duration,
    validate_agent_spec,
    validate_check_spec,
    validate_code_spec,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("10m", 600.0), ("2h", 7200.0), ("500ms", 0.5), ("1.5s", 1.5), (30, 30.0),
     (0.25, 0.25), ("1h30m", 5400.0), ("2d", 172800.0)],
)
def test_parse_duration_accepts_the_documented_forms(text: object, seconds: float) -> None:
    """Durations are seconds, minutes, hours, milliseconds or bare numbers of seconds."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["ten minutes", "10y", "45", "", "-5s", 0, "0s", True, None, [1]])
def test_parse_duration_rejects_other_values_and_shows_them(bad: object) -> None:
    """A bad duration (or a zero one: a timeout must leave time) is a ValueError."""
    with pytest.raises(ValueError, match=r"expected a duration like|greater than zero") as info:
        parse_duration(bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "command", "command": ["python", "agent.py"]},
        {"type": "command", "command": "claude -p 'review this'", "timeout": "10m"},
        {"type": "python", "callable": "pkg.agents:review"},
        {"type": "python", "callable": "pkg.agents:Reviewer.run", "timeout": 30},
        {"type": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "m",
         "api_key_env": "OPENAI_API_KEY"},
        {"type": "openai", "base_url": "https://api.example/v1", "model": "m", "temperature": 0,
         "max_tokens": 512, "tool_choice": "required", "timeout": "2m"},
    ],
)
def test_valid_agent_specs_have_no_problems(spec: dict[str, object]) -> None:
    """Every documented agent form passes."""
    assert validate_agent_spec(spec) == []


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("python agent.py", "agent must be a mapping"),
        ({"command": ["x"]}, "'type' must be one of command, openai, python"),
        ({"type": "opnai"}, "got 'opnai'"),
        ({"type": "command"}, "'command' must be a non-empty list"),
        ({"type": "command", "command": []}, "'command' must be a non-empty list"),
        ({"type": "command", "command": [True]}, "'command' must be a non-empty list"),
        ({"type": "command", "command": "unterminated 'quote"}, "cannot be split"),
        ({"type": "command", "command": ["x"], "timeout": "soon"}, "agent 'timeout'"),
        ({"type": "command", "command": ["x"], "comand": 1}, "unknown key(s) comand"),
        ({"type": "python", "callable": "no_colon"}, "'package.module:function'"),
        ({"type": "openai", "model": "m"}, "'base_url' must be an http(s) URL"),
        ({"type": "openai", "base_url": "ftp://x", "model": "m"}, "'base_url'"),
        ({"type": "openai", "base_url": "http://x/v1"}, "'model' must be a non-empty string"),
        ({"type": "openai", "base_url": "http://x/v1", "model": "m", "api_key_env": "sk-1 2"},
         "'api_key_env' must name an environment variable"),
        ({"type": "openai", "base_url": "http://x/v1", "model": "m", "tool_choice": "none"},
         "'tool_choice' must be one of"),
        ({"type": "openai", "base_url": "http://x/v1", "model": "m", "max_tokens": 0},
         "'max_tokens' must be a positive integer"),
    ],
)
def test_invalid_agent_specs_say_what_is_wrong(spec: object, fragment: str) -> None:
    """Each broken agent spec yields a problem naming the key and the fix."""
    problems = validate_agent_spec(spec)
    assert any(fragment in p for p in problems), problems


def test_an_api_key_pasted_into_api_key_env_is_not_echoed() -> None:
    """A secret put where a variable name belongs never appears in the problem text."""
    secret = "sk-live-abcdef0123456789"
    problems = validate_agent_spec(
        {"type": "openai", "base_url": "http://x/v1", "model": "m", "api_key_env": secret}
    )
    assert problems
    assert all(secret not in p for p in problems)


def test_code_specs() -> None:
    """A code step has exactly one of command or callable."""
    assert validate_code_spec({"command": ["pytest", "-q"], "timeout": "10m"}) == []
    assert validate_code_spec({"callable": "pkg.steps:publish"}) == []
    assert "found none" in validate_code_spec({"timeout": "1m"})[0]
    both = validate_code_spec({"command": ["x"], "callable": "a:b"})
    assert any("found command, callable" in p for p in both)
    assert "run must be a mapping" in validate_code_spec(["pytest"])[0]


def test_check_specs() -> None:
    """A check is a command, an HTTP probe with an optional JSON-path predicate, or a callable."""
    assert validate_check_spec({"command": ["true"]}) == []
    assert validate_check_spec({"callable": "pkg.checks:ok"}) == []
    good_http = {"http": "http://127.0.0.1:9/health", "expect_status": 204,
                 "json_path": "$.items[0]['state']", "equals": "green", "timeout": "5s"}
    assert validate_check_spec(good_http) == []
    problems = validate_check_spec({"http": "localhost:9", "expect_status": "200",
                                    "json_path": "state"})
    text = "\n".join(problems)
    assert "http:// or https:// URL" in text
    assert "'expect_status' must be an HTTP status" in text
    assert "must start with '$'" in text
    assert any("needs a 'json_path'" in p
               for p in validate_check_spec({"http": "http://x", "equals": 1}))
    assert any("only apply to 'http' checks" in p
               for p in validate_check_spec({"command": ["true"], "equals": 1}))
