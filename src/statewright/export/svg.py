"""A workflow drawn as SVG: the steps in a line from start to done, each loop-back as an arc
back over the line, each early exit (``on_success: complete`` before the last step) as an arc
forward under it to done, and the step a task is at marked.

    (start) -> [build] -> [review] -> [approve] -> [ship] -> (done)
                  ^---fail, max 3------'     \\______ok: complete______/^

The same drawing is the web console's (``/tasks/{id}``) and ``statewright graph --format svg``'s.
Every name is escaped; the text is complete SVG 1.1 with no script and no style attribute, so
it can be inlined into a page under a strict Content-Security-Policy."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from statewright.definition.model import RouteKind, StepKind, Workflow

_BOX_W = 132
_BOX_H = 48
_GAP = 44
_END_R = 16
_ARCS = 70  # room above the line for the loop-back arcs
_SHAPE_RX = {StepKind.AI: 6, StepKind.CODE: 0, StepKind.HUMAN: 18, StepKind.WAIT: 24, StepKind.MAP: 2}


def _label(text: str, limit: int = 17) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def to_svg(wf: Workflow, *, current: str | None = None, title: str | None = None,
           progress: Mapping[str, str] | None = None) -> str:
    """The drawing as one ``<svg>`` element; ``current`` marks the step a task is at. A map
    step is drawn with its child workflow's name under it, and ``progress`` (step -> text,
    such as its children's standing) adds a line under a step."""
    below: dict[str, list[str]] = {s.id: [f"each item: {s.map.workflow}"] for s in wf.steps if s.map is not None}
    for step_id, text in (progress or {}).items():
        below.setdefault(step_id, []).append(text)
    n = len(wf.steps)
    start_cx = 20 + _END_R
    first_x = start_cx + _END_R + _GAP
    xs = [first_x + i * (_BOX_W + _GAP) for i in range(n)]
    done_cx = first_x + n * (_BOX_W + _GAP) + _END_R
    loops = [(i, wf.index_of(s.on_failure.target), s.on_failure.max_attempts)
             for i, s in enumerate(wf.steps)
             if s.on_failure.kind is RouteKind.LOOP_BACK and s.on_failure.target is not None]
    exits = [i for i, s in enumerate(wf.steps) if s.on_success.kind is RouteKind.COMPLETE and i < n - 1]
    top = _ARCS if loops else 16
    mid = top + _BOX_H // 2
    width = done_cx + _END_R + 20
    height = top + _BOX_H + (70 if exits else 16) + 14 * max((len(v) for v in below.values()), default=0)
    heading = title if title is not None else f"workflow {wf.name} v{wf.version}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="workflow" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-labelledby="wf-title">',
        f'<title id="wf-title">{escape(heading)}</title>',
        "<defs>"
        '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#444"/></marker>'
        '<marker id="arrow-back" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#b45309"/></marker>'
        '<marker id="arrow-exit" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#047857"/></marker>'
        "</defs>",
        f'<circle cx="{start_cx}" cy="{mid}" r="{_END_R}" fill="#fff" stroke="#444" stroke-width="2"/>',
        f'<text x="{start_cx}" y="{mid + 4}" text-anchor="middle" font-size="10" '
        'font-family="sans-serif">start</text>',
        f'<circle cx="{done_cx}" cy="{mid}" r="{_END_R}" fill="#fff" stroke="#444" stroke-width="4"/>',
        f'<text x="{done_cx}" y="{mid + 4}" text-anchor="middle" font-size="10" '
        'font-family="sans-serif">done</text>',
    ]
    # the straight line
    points = [start_cx + _END_R, *[v for x in xs for v in (x, x + _BOX_W)], done_cx - _END_R]
    for a, b in zip(points[0::2], points[1::2], strict=True):
        out.append(f'<line x1="{a}" y1="{mid}" x2="{b - 2}" y2="{mid}" stroke="#444" stroke-width="1.5" '
                   'marker-end="url(#arrow)"/>')
    for i, step in enumerate(wf.steps):
        x = xs[i]
        here = step.id == current
        cls = "step current" if here else "step"
        fill, stroke, stroke_w = ("#fde68a", "#b91c1c", 4) if here else ("#f8fafc", "#334155", 1.5)
        aria = ' aria-current="step"' if here else ""
        out.append(f'<g class="{cls}" data-step="{escape(step.id)}"{aria}>')
        out.append(f"<title>{escape(step.id)} ({step.kind.value}, owner {escape(step.owner)})"
                   f"{' - the task is here' if here else ''}</title>")
        out.append(f'<rect x="{x}" y="{top}" width="{_BOX_W}" height="{_BOX_H}" rx="{_SHAPE_RX[step.kind]}" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="{stroke_w}"/>')
        out.append(f'<text x="{x + _BOX_W // 2}" y="{top + 20}" text-anchor="middle" font-size="13" '
                   f'font-family="sans-serif" font-weight="bold">{escape(_label(step.id))}</text>')
        out.append(f'<text x="{x + _BOX_W // 2}" y="{top + 37}" text-anchor="middle" font-size="10" '
                   f'font-family="sans-serif" fill="#475569">{step.kind.value} \u00b7 '
                   f"{escape(_label(step.owner, 14))}</text>")
        for k, line in enumerate(below.get(step.id, ())):
            out.append(f'<text class="below" x="{x + _BOX_W // 2}" y="{top + _BOX_H + 14 + 13 * k}" '
                       'text-anchor="middle" font-size="10" font-family="sans-serif" fill="#1e3a8a">'
                       f"{escape(_label(line, 32))}</text>")
        out.append("</g>")
    for k, (src, dst, max_attempts) in enumerate(loops):
        x1 = xs[src] + _BOX_W // 2 + 10
        x2 = xs[dst] + _BOX_W // 2 - 10
        rise = 28 + 12 * (k % 3)
        label = f"fail: back, max {max_attempts}"
        peak = top - rise
        out.append(f'<g class="loop-back"><path d="M{x1},{top} C{x1},{peak} {x2},{peak} {x2},{top - 2}" '
                   'fill="none" stroke="#b45309" stroke-width="1.5" stroke-dasharray="5 3" '
                   'marker-end="url(#arrow-back)"/>'
                   f'<text x="{(x1 + x2) // 2}" y="{top - rise * 3 // 4 - 4}" text-anchor="middle" font-size="10" '
                   f'font-family="sans-serif" fill="#b45309">{escape(label)}</text></g>')
    for k, src in enumerate(exits):
        x1 = xs[src] + _BOX_W // 2
        y0 = top + _BOX_H
        dip = 34 + 10 * (k % 3)
        out.append(f'<g class="early-exit"><path d="M{x1},{y0} C{x1},{y0 + dip} {done_cx},{y0 + dip} '
                   f'{done_cx},{mid + _END_R + 2}" fill="none" stroke="#047857" stroke-width="1.5" '
                   'marker-end="url(#arrow-exit)"/>'
                   f'<text x="{(x1 + done_cx) // 2}" y="{y0 + dip - 2}" text-anchor="middle" font-size="10" '
                   'font-family="sans-serif" fill="#047857">ok: complete early</text></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
