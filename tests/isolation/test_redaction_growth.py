"""A redactor copied again and again knows the same forms: a long-running process that builds
many workers (each tells the log filter what it holds) does not slow down."""

from __future__ import annotations

from statewright.executors._isolation import RedactingFilter, Redactor


def test_copying_a_redactor_adds_no_forms() -> None:
    first = Redactor(["p@ss/word:1234"])
    again = first
    for _ in range(20):
        again = again.with_secrets(["p@ss/word:1234"])
    assert again._forms == first._forms
    assert again.text("x p@ss/word:1234 y p%40ss%2Fword%3A1234") == "x [redacted] y [redacted]"


def test_the_log_filter_told_the_same_secret_many_times_stays_the_same_size() -> None:
    log_filter = RedactingFilter()
    for _ in range(50):
        log_filter.know(["a-secret-value-xyz"])
    assert len(log_filter._redactor._forms) == len(Redactor(["a-secret-value-xyz"])._forms)
