"""The workflow drawn as SVG (the web console's drawing) and ``statewright graph``."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from statewright.cli import cli
from statewright.definition import load_workflow
from statewright.definition.loader import workflow_from_dict
from statewright.export import to_mermaid, to_svg

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NS = {"s": "http://www.w3.org/2000/svg"}


def test_steps_in_a_line_loop_backs_back_early_exits_forward_and_the_current_step_marked() -> None:
    """fix-bug: every step drawn left to right in order, one arc back per loop-back, one arc
    forward for the early exit, and only the current step marked."""
    wf = load_workflow(EXAMPLES / "fix-bug.yaml")
    root = ET.fromstring(to_svg(wf, current="review"))
    steps = root.findall("s:g[@data-step]", NS)
    assert [g.get("data-step") for g in steps] == [s.id for s in wf.steps]
    xs = [float(g.find("s:rect", NS).get("x")) for g in steps]  # type: ignore[union-attr]
    assert xs == sorted(xs)
    loops = [s for s in wf.steps if s.on_failure.kind.value == "loop_back"]
    assert len(root.findall("s:g[@class='loop-back']", NS)) == len(loops) == 2
    assert len(root.findall("s:g[@class='early-exit']", NS)) == 0  # its 'complete' is on the last step
    assert [g.get("data-step") for g in steps if g.get("aria-current") == "step"] == ["review"]
    triage = ET.fromstring(to_svg(load_workflow(EXAMPLES / "bug-triage.yaml")))
    assert len(triage.findall("s:g[@class='early-exit']", NS)) == 1
    assert not [g for g in triage.iter() if g.get("aria-current")]


def test_names_are_escaped_and_the_drawing_has_no_script_or_style_attribute() -> None:
    """A title with markup in it is text in the drawing (step ids and owners are names the
    loader checks; they are escaped all the same)."""
    wf = workflow_from_dict({"workflow": "w", "steps": [
        {"id": "a", "kind": "code", "owner": "o", "run": {"command": ["true"]}},
    ]}, "<w>")
    text = to_svg(wf, title='"><script>alert(1)</script>')
    root = ET.fromstring(text)
    assert all(e.tag != "{http://www.w3.org/2000/svg}script" and "style" not in e.attrib for e in root.iter())
    assert "<script>" not in text and "&lt;script&gt;" in text


def test_graph_writes_the_same_drawing_as_svg_or_mermaid(tmp_path: Path) -> None:
    """``statewright graph FILE --format svg|mermaid`` prints what to_svg / to_mermaid draw,
    or writes it to --out; an unknown --current step is one error line."""
    path = EXAMPLES / "fix-bug.yaml"
    wf = load_workflow(path)
    runner = CliRunner()
    svg = runner.invoke(cli, ["graph", str(path), "--current", "review"])
    assert svg.exit_code == 0 and svg.output == to_svg(wf, current="review")
    mermaid = runner.invoke(cli, ["graph", str(path), "--format", "mermaid"])
    assert mermaid.exit_code == 0 and mermaid.output == to_mermaid(wf)
    out = tmp_path / "fix-bug.svg"
    assert runner.invoke(cli, ["graph", str(path), "--out", str(out)]).exit_code == 0
    assert out.read_text(encoding="utf-8") == to_svg(wf)
    bad = runner.invoke(cli, ["graph", str(path), "--current", "nope"])
    assert bad.exit_code != 0 and bad.stderr.strip().splitlines() == [
        "error: --current 'nope': workflow 'fix-bug' has no such step; its steps are "
        + ", ".join(s.id for s in wf.steps)]


def test_a_map_step_is_drawn_with_its_child_workflow_and_its_childrens_progress() -> None:
    """review-files: the map step names the workflow each item runs, and the progress given
    for it (the console passes its children's standing) is a line under it, escaped."""
    wf = load_workflow(EXAMPLES / "review-files.yaml")
    [mapped] = [s for s in wf.steps if s.map is not None]
    root = ET.fromstring(to_svg(wf, current=mapped.id, progress={mapped.id: "2 completed, 1 running <b>"}))
    [g] = [g for g in root.findall("s:g[@data-step]", NS) if g.get("data-step") == mapped.id]
    lines = [t.text for t in g.findall("s:text[@class='below']", NS)]
    assert lines == [f"each item: {mapped.map.workflow}", "2 completed, 1 running <b>"]  # type: ignore[union-attr]


def test_graph_draws_a_workflow_with_a_map_step() -> None:
    result = CliRunner().invoke(cli, ["graph", str(EXAMPLES / "review-files.yaml"), "--format", "svg"])
    assert result.exit_code == 0, result.output
    assert "each item: " in result.output
