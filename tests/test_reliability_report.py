"""The reliability report is rendered from what campaign tests recorded, and only from that."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tally import tally

ROOT = Path(__file__).resolve().parents[1]


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reliability_report", ROOT / "scripts" / "reliability_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tally_appends_one_json_line_per_call_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With STATEWRIGHT_RELIABILITY_OUT set each call is one record; without it, none."""
    out = tmp_path / "records.jsonl"
    monkeypatch.delenv("STATEWRIGHT_RELIABILITY_OUT", raising=False)
    tally("tamper", "ignored", backend="sqlite", detected=True)
    assert not out.exists()
    monkeypatch.setenv("STATEWRIGHT_RELIABILITY_OUT", str(out))
    tally("tamper", "edit body", backend="sqlite", detected=True)
    tally("bypass", "no token", backend="postgres", refused=True)
    assert [r["case"] for r in _report().read_records(out)] == ["edit body", "no token"]
    with pytest.raises(ValueError, match="unknown tally category"):
        tally("typo", "x")


def test_the_report_counts_what_was_recorded() -> None:
    """Each section's figures are sums over the records, and a miss is listed by name."""
    records = [
        {"category": "crash", "case": "c", "backend": "sqlite", "point": "after_claim", "kills": 1,
         "effects_lost": 0, "effects_duplicated": 0},
        {"category": "crash", "case": "c", "backend": "sqlite", "point": "after_claim", "kills": 2,
         "effects_lost": 0, "effects_duplicated": 1},
        {"category": "tamper", "case": "edit type", "backend": "sqlite", "detected": True},
        {"category": "tamper", "case": "swap events", "backend": "sqlite", "detected": False},
        {"category": "malformed", "case": "alias bomb", "result": "clean_error"},
        {"category": "malformed", "case": "ok file", "result": "accepted"},
        {"category": "poison", "case": "surrogate", "backend": "sqlite", "outcome": "invalid_verdict",
         "worker_alive": True},
        {"category": "secrets", "case": "env", "where": "db", "found": 0},
    ]
    text = _report().render(records, when="2026-12-01 06:00 UTC", machine="m", commit="abc", summary="1 passed")
    assert "| sqlite | after_claim | 2 | 3 | 0 | 1 |" in text
    assert "Total: 3 kills in 2 runs; 0 effects lost, 1 duplicated." in text
    assert "| sqlite | 2 | 1 | 1 |" in text
    assert "- sqlite: swap events" in text
    assert "| 2 | 1 | 1 | 0 | 0 |" in text
    assert "| 1 | 1 | 1 |" in text
    assert "| db | 1 | 0 |" in text
