"""Exports of a workflow: Mermaid (renders on GitHub), SVG (the web console's drawing) and
Amazon States Language."""

from statewright.export.asl import to_asl
from statewright.export.mermaid import to_mermaid
from statewright.export.svg import to_svg

__all__ = ["to_asl", "to_mermaid", "to_svg"]
