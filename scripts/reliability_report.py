"""Write docs/RELIABILITY.md from a run of the test suite's reliability campaign.

    python scripts/reliability_report.py [--out docs/RELIABILITY.md] [pytest args...]

Runs pytest (the whole suite unless pytest arguments are given) with
``STATEWRIGHT_RELIABILITY_OUT`` set, so every campaign test records what it tried and what
happened (tests/tally.py), then renders those records. Nothing in the report is typed by
hand: a figure is what that run saw. A run with failing tests writes no report."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _by(records: list[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    return [r for r in records if r["category"] == category]


def _crash(records: list[dict[str, Any]]) -> list[str]:
    rows: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for r in _by(records, "crash"):
        row = rows[(r["backend"], r["point"])]
        row[0] += 1
        row[1] += int(r["kills"])
        row[2] += int(r["effects_lost"])
        row[3] += int(r["effects_duplicated"])
    lines = ["## Crashes", "", "Real worker processes SIGKILLed at each named crash point (and at random moments"
             " where the point says so); a new worker then finishes the work.", ""]
    lines += _table(["backend", "crash point", "runs", "kills", "effects lost", "effects duplicated"],
                    [(b, p, *v) for (b, p), v in sorted(rows.items())])
    total = [sum(v[i] for v in rows.values()) for i in range(4)]
    lines += ["", f"Total: {total[1]} kills in {total[0]} runs; {total[2]} effects lost, {total[3]} duplicated."]
    return lines


def _yes_no(records: list[dict[str, Any]], category: str, flag: str, title: str, intro: str,
            yes: str) -> list[str]:
    mine = _by(records, category)
    per_backend: dict[str, Counter[bool]] = defaultdict(Counter)
    for r in mine:
        per_backend[str(r.get("backend", "-"))][bool(r[flag])] += 1
    lines = [f"## {title}", "", intro, ""]
    lines += _table(["backend", "tried", yes, "not " + yes],
                    [(b, c[True] + c[False], c[True], c[False]) for b, c in sorted(per_backend.items())])
    missed = sorted({(r.get("backend", "-"), r["case"]) for r in mine if not r[flag]})
    cases = sorted({r["case"] for r in mine})
    lines += ["", f"{len(mine)} tried ({len(cases)} distinct cases), {sum(1 for r in mine if r[flag])} {yes}."]
    if missed:
        lines += ["", f"Not {yes}:"] + [f"- {b}: {c}" for b, c in missed]
    lines += ["", "<details><summary>cases</summary>", ""] + [f"- {c}" for c in cases] + ["", "</details>"]
    return lines


def _malformed(records: list[dict[str, Any]]) -> list[str]:
    mine = _by(records, "malformed")
    results = Counter(r["result"] for r in mine)
    lines = ["## Malformed definitions and inputs", "",
             "Generated and hand-written bad workflow files, loop files and task inputs, through"
             " the loader and the command line.", ""]
    lines += _table(["tried", "clean error", "accepted (valid after all)", "traceback", "hang"],
                    [(len(mine), results["clean_error"], results["accepted"], results["traceback"],
                      results["hang"])])
    return lines


def _poison(records: list[dict[str, Any]]) -> list[str]:
    mine = _by(records, "poison")
    outcomes = Counter(str(r["outcome"]) for r in mine)
    alive = sum(1 for r in mine if r["worker_alive"])
    backends = Counter(str(r.get("backend", "-")) for r in mine)
    lines = ["## Poison outputs", "", "Steps whose output is hostile or broken; each must end as a valid outcome or a"
             " failed attempt with a reason code, and the worker must live on.", ""]
    lines += _table(["tried", "worker still alive", *(f"ended as `{o}`" for o in sorted(outcomes))],
                    [(len(mine), alive, *(outcomes[o] for o in sorted(outcomes)))])
    lines += ["", "By backend: " + ", ".join(f"{b} {n}" for b, n in sorted(backends.items())) + "."]
    return lines


def _secrets(records: list[dict[str, Any]]) -> list[str]:
    mine = _by(records, "secrets")
    found: Counter[str] = Counter()
    searched: Counter[str] = Counter()
    for r in mine:
        searched[str(r["where"])] += 1
        found[str(r["where"])] += int(r["found"])
    lines = ["## Planted secrets", "", "Secret values planted in the worker's environment and in declared step"
             " secrets, printed and returned by hostile steps; then searched for.", ""]
    lines += _table(["where searched", "searches", "planted values found"],
                    [(w, searched[w], found[w]) for w in sorted(searched)])
    return lines


def render(records: list[dict[str, Any]], *, when: str, machine: str, commit: str, summary: str) -> str:
    parts = [
        "# Reliability",
        "",
        "What the test suite's reliability campaign tried against statewright, and what happened."
        " Written by `python scripts/reliability_report.py` from one run; never edited by hand.",
        "",
        f"- Run: {when}",
        f"- Machine: {machine}",
        f"- Commit: {commit}",
        f"- pytest: {summary}",
        "",
        *_crash(records), "",
        *_yes_no(records, "tamper", "detected", "Tampering with the history",
                 "Rows edited, deleted, swapped or rewritten behind the store's back; `verify` must report"
                 " each. What no chain can show is listed as not detected, by design (README, 'Verifying"
                 " the history'): without `STATEWRIGHT_CHAIN_KEY`, a rewrite recomputed with statewright's"
                 " own code verifies; with or without it, a log's last entries cut off with its tables"
                 " rolled back to match need a record kept elsewhere. Each recompute case has a keyed twin"
                 " that is detected.", "detected"), "",
        *_yes_no(records, "bypass", "refused", "Approval bypass attempts",
                 "Attempts to approve, reject, retry or cancel without the right person, token, role or"
                 " hash.", "refused"), "",
        *_malformed(records), "",
        *_poison(records), "",
        *_secrets(records), "",
    ]
    return "\n".join(parts)


def _machine() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores{', ' + cpu if cpu else ''};"
            f" Python {platform.python_version()}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "RELIABILITY.md"))
    args, pytest_args = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        records_path = Path(tmp) / "records.jsonl"
        env = dict(os.environ, STATEWRIGHT_RELIABILITY_OUT=str(records_path))
        started = datetime.datetime.now().astimezone()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        tail = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        summary = tail[-1].strip("= ") if tail else "no output"
        if proc.returncode != 0:
            sys.stdout.write(proc.stdout[-4000:])
            print(f"reliability_report: pytest failed ({summary}); no report written", file=sys.stderr)
            return 1
        records = read_records(records_path)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    text = render(records, when=started.strftime("%Y-%m-%d %H:%M %Z"), machine=_machine(), commit=commit,
                  summary=summary)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {args.out} from {len(records)} records ({summary})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
