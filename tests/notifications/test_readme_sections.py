"""The README's Notifications and Schedules sections show configuration that loads, taken
from the examples, and the columns `schedule list` really prints."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from statewright import workflow_from_yaml
from statewright.cli import cli
from statewright.definition.notify import NotifyEvent, NotifyKind
from statewright.runtime.schedules import CatchUp, load_schedules

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    return README[start: README.index("\n## ", start + 1)]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def test_the_notifications_yaml_loads_and_is_the_examples() -> None:
    [shown] = blocks(section("Notifications"), "yaml")
    workflow = workflow_from_yaml(shown, "README.md")
    step = workflow.step("approve")
    assert [t.kind for t in step.notify] == [NotifyKind.WEBHOOK, NotifyKind.EMAIL]
    assert step.stuck_after_seconds == 86_400
    assert [t.kind for t in workflow.targets(NotifyEvent.STUCK)] == [NotifyKind.SLACK]
    example = (ROOT / "examples" / "expense-approval.yaml").read_text(encoding="utf-8")
    for line in shown.splitlines():
        assert line.strip() in example, line


def test_the_schedules_yaml_is_the_example_and_list_prints_its_columns() -> None:
    text = section("Schedules")
    shown = blocks(text, "yaml")[0]
    path = ROOT / "examples" / "schedules" / "month-end.yaml"
    assert shown in path.read_text(encoding="utf-8")
    schedules = load_schedules(path)
    assert [(s.name, s.catch_up) for s in schedules] == [("month-end-eu", CatchUp.ONE), ("month-end-us", CatchUp.SKIP)]
    after = text.split("`schedule list` (run on", 1)[1]
    printed = re.findall(r"```\n(.*?)```", after, re.S)[0].strip().splitlines()
    result = CliRunner().invoke(cli, ["schedule", "list", str(path)])
    assert result.exit_code == 0, result.output
    ran = result.output.strip().splitlines()
    assert [r.split("\t")[:5] for r in ran] == [p.split("\t")[:5] for p in printed]
