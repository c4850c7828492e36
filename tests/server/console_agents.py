"""Agents and code steps the web console's tests run: one that writes hostile text into its
verdict and note, and a check that always fails (so a task loops back many times)."""

from __future__ import annotations

from typing import Any

#: Text an attacker might put into a task's input, an agent's verdict or its note, to run
#: script in an approver's browser. The console must show each of them as text.
PAYLOADS: tuple[str, ...] = (
    "<script>window.__xss=1</script>",
    "<img src=x onerror=\"window.__xss=1\">",
    "<svg onload=\"window.__xss=1\"></svg>",
    "\"><script>window.__xss=1</script>",
    "'><img src=x onerror=window.__xss=1>",
    "</pre><script>window.__xss=1</script><pre>",
    "</textarea><script>window.__xss=1</script>",
    "<iframe src=\"javascript:window.__xss=1\"></iframe>",
    "<a href=\"javascript:window.__xss=1\">click</a>",
    "<body onload=window.__xss=1>",
    "<details open ontoggle=window.__xss=1>",
    "<math><mtext><table><mglyph><style><img src=x onerror=window.__xss=1>",
    "<object data=\"javascript:window.__xss=1\"></object>",
    "<embed src=\"javascript:window.__xss=1\">",
    "<meta http-equiv=\"refresh\" content=\"0;url=javascript:window.__xss=1\">",
    "<link rel=stylesheet href=\"javascript:window.__xss=1\">",
    "<style>@import 'javascript:window.__xss=1';</style>",
    "<input autofocus onfocus=window.__xss=1>",
    "<video><source onerror=\"window.__xss=1\"></video>",
    "{{ 7*7 }}{% raw %}${7*7}{% endraw %}",
    "&lt;script&gt;window.__xss=1&lt;/script&gt;",
    "<scr<script>ipt>window.__xss=1</scr</script>ipt>",
    "\u202e<script>window.__xss=1</script>",
    "<base href=\"javascript:/\">",
)


def hostile_agent(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"verdict": {"approved": True, "summary": PAYLOADS[0], "findings": list(PAYLOADS)},
            "note": " | ".join(PAYLOADS)}


def eager_agent(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"verdict": {"approved": True, "summary": f"attempt {brief['attempt']}", "findings": []},
            "note": f"try {brief['attempt']}"}


def never_passes(ctx: Any) -> dict[str, Any]:
    return {"ok": False, "output": "the check still fails"}


def not_yet(ctx: Any) -> bool:
    return False
