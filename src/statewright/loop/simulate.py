"""The lenient-check arithmetic of the design document, exact and by Monte Carlo.

A backlog of ``items``; each pass produces a correct change with probability ``p``
(``success``). The check wrongly rejects good work with probability ``fr``
(``false_reject``) and passes bad work with probability ``f`` (``false_pass``).
A rejected item is retried, up to ``attempts`` passes; then it is parked (escalated).

    accept per pass      a = p(1 - fr) + (1 - p) f
    reject per pass      r = 1 - a
    items closed         n (1 - r^k)               escalated  n r^k
    passes               n (1 + r + ... + r^(k-1))
    wrong share          (1 - p) f / a             (the same for every k: each retry
                                                    is another draw against one check)
    all of m right       (1 - wrong share)^m       (independent accepted items)
    even-odds chain      floor(ln 0.5 / ln(1 - wrong share))
    needed right share   0.5^(1/m)                 to keep even odds over m items

With the document's inputs (40 items, p = 0.7, fr = 0.05, k = 3) this gives a wrong
share of 18.4% at f = 0.50, about 57 vs 49 passes (f = 0.02 vs 0.50), 84% vs 1.7%
that 20 accepted items are all right, and even-odds chains of 77 vs 3.

Pure: the Monte-Carlo estimate takes a ``random.Random`` from its caller.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from statewright._errors import InputError
from statewright._record import record

if TYPE_CHECKING:
    import random


@record
class SimInputs:
    """The loop's numbers. Probabilities are between 0 and 1."""

    items: int = 40
    success: float = 0.7
    false_reject: float = 0.05
    false_pass: float = 0.5
    attempts: int = 3
    chain: int = 20
    target: float = 0.5

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name in ("success", "false_reject", "false_pass"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                problems.append(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")
        for name in ("items", "attempts", "chain"):
            value = getattr(self, name)
            if value < 1:
                problems.append(f"--{name} must be at least 1, got {value}")
        if not 0.0 < self.target < 1.0:
            problems.append(f"the target must be between 0 and 1 (exclusive), got {self.target}")
        if problems:
            raise InputError("; ".join(problems))

    @property
    def accept_per_pass(self) -> float:
        p, fr, f = self.success, self.false_reject, self.false_pass
        return p * (1.0 - fr) + (1.0 - p) * f

    @property
    def wrong_accept_per_pass(self) -> float:
        return (1.0 - self.success) * self.false_pass


@record
class Figures:
    """What a dashboard shows (closed, escalated, passes) and what it hides."""

    accept_per_pass: float
    expected_closed: float
    expected_escalated: float
    expected_passes: float
    expected_wrong_accepted: float
    wrong_share: float
    chain_all_right: float
    even_odds_chain: int | None
    required_right_share: float

    @property
    def right_share(self) -> float:
        return 1.0 - self.wrong_share

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "accept_per_pass": self.accept_per_pass,
            "expected_closed": self.expected_closed,
            "expected_escalated": self.expected_escalated,
            "expected_passes": self.expected_passes,
            "expected_wrong_accepted": self.expected_wrong_accepted,
            "wrong_share": self.wrong_share,
            "right_share": self.right_share,
            "chain_all_right": self.chain_all_right,
            "even_odds_chain": self.even_odds_chain,
            "required_right_share": self.required_right_share,
        }


def exact(inputs: SimInputs) -> Figures:
    """The closed-form figures."""
    a = inputs.accept_per_pass
    r = 1.0 - a
    n, k = inputs.items, inputs.attempts
    escalate = r**k
    closed = n * (1.0 - escalate)
    passes = n * sum(r**i for i in range(k))
    wrong_share = inputs.wrong_accept_per_pass / a if a > 0 else 0.0
    return Figures(
        accept_per_pass=a,
        expected_closed=closed,
        expected_escalated=n * escalate,
        expected_passes=passes,
        expected_wrong_accepted=closed * wrong_share,
        wrong_share=wrong_share,
        chain_all_right=(1.0 - wrong_share) ** inputs.chain,
        even_odds_chain=even_odds_chain(1.0 - wrong_share, inputs.target),
        required_right_share=inputs.target ** (1.0 / inputs.chain),
    )


def even_odds_chain(right_share: float, target: float = 0.5) -> int | None:
    """The longest chain n with right_share^n >= target; None when no chain is too long."""
    if right_share >= 1.0:
        return None
    if right_share <= 0.0:
        return 0
    return math.floor(math.log(target) / math.log(right_share))


def monte_carlo(inputs: SimInputs, runs: int, rng: random.Random) -> Figures:
    """Estimate the same figures by playing ``runs`` nights of the backlog.

    The chain estimate looks at the first ``chain`` accepted items of each night
    (drawing extra items past the backlog if the night accepted fewer).
    """
    if runs < 1:
        raise InputError(f"--runs must be at least 1, got {runs}")
    closed = escalated = passes = wrong = chains_right = 0
    can_accept = inputs.accept_per_pass > 0.0
    for _ in range(runs):
        accepted: list[bool] = []
        for _item in range(inputs.items):
            used, outcome = _work_item(inputs, rng)
            passes += used
            if outcome is None:
                escalated += 1
            else:
                closed += 1
                wrong += 0 if outcome else 1
                accepted.append(outcome)
        while can_accept and len(accepted) < inputs.chain:
            _used, outcome = _work_item(inputs, rng)
            if outcome is not None:
                accepted.append(outcome)
        chains_right += 1 if all(accepted[: inputs.chain]) else 0
    wrong_share = wrong / closed if closed else 0.0
    return Figures(
        accept_per_pass=inputs.accept_per_pass,
        expected_closed=closed / runs,
        expected_escalated=escalated / runs,
        expected_passes=passes / runs,
        expected_wrong_accepted=wrong / runs,
        wrong_share=wrong_share,
        chain_all_right=chains_right / runs,
        even_odds_chain=even_odds_chain(1.0 - wrong_share, inputs.target),
        required_right_share=inputs.target ** (1.0 / inputs.chain),
    )


def _work_item(inputs: SimInputs, rng: random.Random) -> tuple[int, bool | None]:
    """Passes used, and None if parked, else whether the accepted change is right."""
    for attempt in range(1, inputs.attempts + 1):
        correct = rng.random() < inputs.success
        accept = 1.0 - inputs.false_reject if correct else inputs.false_pass
        if rng.random() < accept:
            return attempt, correct
    return inputs.attempts, None
