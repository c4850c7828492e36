"""A workflow drawn as a Mermaid flowchart: the straight line, its loop-backs and exits."""

from __future__ import annotations

from statewright.definition.model import RouteKind, StepKind, Workflow

_SHAPES = {
    StepKind.AI: ('["', '"]'),
    StepKind.CODE: ('[/"', '"/]'),
    StepKind.HUMAN: ('{{"', '"}}'),
    StepKind.WAIT: ('(["', '"])'),
    StepKind.MAP: ('[/"', '"\\]'),
}


def _quoted(text: str) -> str:
    """Text safe inside a quoted Mermaid label."""
    return text.replace('"', "#quot;")


def _node(i: int) -> str:
    return f"s{i}"


def to_mermaid(wf: Workflow, *, current: str | None = None) -> str:
    """``flowchart TD`` text; ``current`` marks the step a task is at."""
    lines = ["flowchart TD", '  start(("start"))', '  done(("done"))', '  halted[["halted: operator queue"]]']
    for i, s in enumerate(wf.steps):
        left, right = _SHAPES[s.kind]
        label = f"{s.id}<br/><small>{s.kind.value} · {s.owner}</small>"
        if s.map is not None:  # one child task per item: what it maps, over which list, how many at once
            label += (f"<br/><small>each of {s.map.items} → {_quoted(s.map.workflow)}, "
                      f"{s.map.max_concurrency} at once</small>")
        lines.append(f"  {_node(i)}{left}{label}{right}")
        if s.map is not None:
            lines.append(f'  {_node(i)}c[["{_quoted(s.map.workflow)}: one task per item"]]')
            lines.append(f"  {_node(i)} -. child tasks .-> {_node(i)}c")
    lines.append(f"  start --> {_node(0)}")
    for i, s in enumerate(wf.steps):
        nxt = _node(i + 1) if i + 1 < len(wf.steps) else "done"
        if s.on_success.kind is RouteKind.COMPLETE:
            lines.append(f"  {_node(i)} -->|ok: complete| done")
        else:
            lines.append(f"  {_node(i)} -->|ok| {nxt}")
        r = s.on_failure
        if r.kind is RouteKind.LOOP_BACK and r.target is not None:
            lines.append(f"  {_node(i)} -.->|fail, max {r.max_attempts}| {_node(wf.index_of(r.target))}")
            lines.append(f"  {_node(i)} -.->|budget spent| halted")
        elif r.kind is RouteKind.CONTINUE:
            lines.append(f"  {_node(i)} -.->|fail: advisory| {nxt}")
        else:
            lines.append(f"  {_node(i)} -.->|fail| halted")
        if any(v.value == "halt" for v in s.outcomes.values()):
            lines.append(f"  {_node(i)} -.->|policy halt| halted")
    if current is not None:
        lines.append("  classDef current stroke-width:4px,stroke:#d33")
        lines.append(f"  class {_node(wf.index_of(current))} current")
    return "\n".join(lines) + "\n"
