"""The lenient-check arithmetic: the document's figures, exact and by Monte Carlo."""

from __future__ import annotations

import random

import pytest

from statewright._errors import InputError
from statewright.loop.simulate import SimInputs, even_odds_chain, exact, monte_carlo

STRICT = SimInputs(items=40, success=0.7, false_reject=0.05, false_pass=0.02, attempts=3)
LENIENT = SimInputs(items=40, success=0.7, false_reject=0.05, false_pass=0.50, attempts=3)


def test_wrong_share_is_18_4_percent_for_the_lenient_check() -> None:
    """(1 - p) f / (p (1 - fr) + (1 - p) f) = 0.15 / 0.815."""
    assert round(100 * exact(LENIENT).wrong_share, 1) == 18.4
    assert round(exact(LENIENT).right_share, 3) == 0.816
    assert round(exact(STRICT).right_share, 3) == 0.991


def test_wrong_share_does_not_depend_on_attempts() -> None:
    """Retries are more draws against the same check: the share stays 18.4%."""
    for k in (1, 2, 3, 10):
        inputs = SimInputs(false_pass=0.5, attempts=k)
        assert exact(inputs).wrong_share == pytest.approx(0.15 / 0.815)


def test_the_dashboard_favours_the_lenient_loop() -> None:
    """About 57 vs 49 passes; the lenient loop closes more and escalates less."""
    strict, lenient = exact(STRICT), exact(LENIENT)
    assert round(strict.expected_passes) == 57
    assert round(lenient.expected_passes) == 49
    assert strict.expected_passes == pytest.approx(40 * (1 + 0.329 + 0.329**2))
    assert lenient.expected_closed > strict.expected_closed
    assert lenient.expected_escalated < strict.expected_escalated
    assert strict.expected_escalated == pytest.approx(40 * 0.329**3)
    assert round(lenient.expected_wrong_accepted) == 7  # "ships seven wrong items a night"


def test_chance_twenty_accepted_items_are_all_right() -> None:
    """84% with the strict check, 1.7% with the lenient one."""
    assert round(100 * exact(STRICT).chain_all_right) == 84
    assert round(100 * exact(LENIENT).chain_all_right, 1) == 1.7
    assert round(100 * exact(LENIENT).required_right_share, 2) == 96.59


def test_longest_even_odds_chain() -> None:
    """floor(ln 0.5 / ln right share): 77 strict (unrounded) vs 3 lenient."""
    assert exact(STRICT).even_odds_chain == 77
    assert exact(LENIENT).even_odds_chain == 3
    assert even_odds_chain(0.991) == 76  # the document's rounded 0.991 gives 76.7
    assert even_odds_chain(1.0) is None and even_odds_chain(0.0) == 0


def test_monte_carlo_agrees_with_the_exact_figures() -> None:
    """A seeded Monte Carlo lands near the closed forms, and repeats exactly for one seed."""
    for inputs in (STRICT, LENIENT):
        e = exact(inputs)
        m = monte_carlo(inputs, 4000, random.Random(7))
        assert m.expected_passes == pytest.approx(e.expected_passes, rel=0.02)
        assert m.expected_closed == pytest.approx(e.expected_closed, rel=0.01)
        assert m.wrong_share == pytest.approx(e.wrong_share, abs=0.01)
        assert m.chain_all_right == pytest.approx(e.chain_all_right, abs=0.03)
    again = monte_carlo(LENIENT, 500, random.Random(1))
    assert again == monte_carlo(LENIENT, 500, random.Random(1))
    assert monte_carlo(LENIENT, 4000, random.Random(7)).even_odds_chain == 3


def test_bad_inputs_are_refused() -> None:
    """Probabilities outside [0, 1] or counts below 1 raise InputError naming the option."""
    with pytest.raises(InputError, match="--success must be between 0 and 1"):
        SimInputs(success=1.5)
    with pytest.raises(InputError, match="--attempts must be at least 1"):
        SimInputs(attempts=0)
    with pytest.raises(InputError, match="--runs"):
        monte_carlo(SimInputs(), 0, random.Random(0))


def test_a_check_that_accepts_nothing() -> None:
    """Edge: nothing is ever accepted; every item escalates and no chain forms."""
    inputs = SimInputs(success=0.0, false_pass=0.0)
    e = exact(inputs)
    assert e.expected_closed == 0 and e.expected_escalated == 40 and e.even_odds_chain is None
    m = monte_carlo(inputs, 10, random.Random(0))
    assert m.expected_closed == 0
