"""The one YAML loader for workflow and loop files: safe tags only, and bounded.

PyYAML's ``safe_load`` shares an aliased node instead of copying it, so an alias bomb
(nine aliases of nine aliases of ..., a few hundred bytes) loads fast and then takes
minutes to walk, hash or store; an alias inside its own anchor makes a structure that
contains itself; and a few thousand nested ``[`` exhaust Python's stack. This loader
counts while it composes, so each of those is refused before a single object is built:

- every node counts once, and every alias counts again as all the nodes and scalar
  characters of the node it repeats (``MAX_YAML_NODES``, ``MAX_YAML_EXPANDED_CHARS``);
- an alias inside the node its anchor names is refused (recursive YAML);
- mappings and lists nest at most ``MAX_DEFINITION_DEPTH`` deep, aliases included;
- integers longer than 40 characters are refused before ``int()`` sees them;
- a key written twice in one mapping is refused (YAML would keep the last one silently,
  so a reader of the file and the loader could see different steps).

Aliases themselves are allowed: reusing one agent spec across steps (``agent: *fixer``)
is ordinary YAML, and the counting makes it safe. Events come from libyaml when it is
installed (the composing is Python either way, so the counting is the same).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.resolver import Resolver

from statewright.definition.limits import (
    MAX_DEFINITION_BYTES,
    MAX_DEFINITION_DEPTH,
    MAX_YAML_EXPANDED_CHARS,
    MAX_YAML_NODES,
)

if TYPE_CHECKING:
    from yaml.events import Event

_MAX_INT_CHARS = 40


class YamlLimitError(ComposerError):
    """The file breaks one of the bounds above (it may be valid YAML)."""


def _refuse(msg: str, mark: Any) -> NoReturn:
    raise YamlLimitError(None, None, msg, mark)


class _Counted:
    """What a subtree cost: nodes, scalar characters, and how many levels it nests."""

    __slots__ = ("chars", "height", "nodes")

    def __init__(self, nodes: int, chars: int, height: int) -> None:
        self.nodes, self.chars, self.height = nodes, chars, height


class _BoundedComposer(Composer):
    """PyYAML's composer, counting as it goes (see the module docstring)."""

    if TYPE_CHECKING:  # the parser it is mixed with provides the events

        def peek_event(self) -> Event | None: ...

    def __init__(self) -> None:
        Composer.__init__(self)
        self._nodes = 0
        self._chars = 0
        self._depth = 0
        self._deepest = 0
        self._open: set[str] = set()
        self._costs: dict[str, _Counted] = {}

    def _spend(self, nodes: int, chars: int, mark: Any) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > MAX_YAML_NODES:
            _refuse(f"more than {MAX_YAML_NODES:,} nodes once aliases are expanded (an alias "
                    "bomb?); write it out, or repeat less through aliases", mark)
        if self._chars > MAX_YAML_EXPANDED_CHARS:
            _refuse(f"more than {MAX_YAML_EXPANDED_CHARS:,} characters of text once aliases are "
                    "expanded; repeat less through aliases", mark)

    def _nest(self, levels: int, mark: Any) -> None:
        self._deepest = max(self._deepest, self._depth + levels)
        if self._depth + levels > MAX_DEFINITION_DEPTH:
            _refuse(f"mappings and lists nested deeper than {MAX_DEFINITION_DEPTH} levels", mark)

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            anchor = event.anchor
            if anchor is not None and anchor in self._open:
                _refuse(f"the alias *{anchor} is inside the node &{anchor} names; recursive YAML "
                        "is not allowed", event.start_mark)
            cost = self._costs.get(anchor) if anchor is not None else None
            if cost is not None:  # an unknown alias: PyYAML's own error follows
                self._spend(cost.nodes, cost.chars, event.start_mark)
                self._nest(cost.height, event.start_mark)
            return super().compose_node(parent, index)
        if event is None:
            return super().compose_node(parent, index)
        collection = isinstance(event, MappingStartEvent | SequenceStartEvent)
        chars = len(event.value) if isinstance(event, ScalarEvent) else 0
        start_nodes, start_chars, outer_deepest = self._nodes, self._chars, self._deepest
        self._spend(1, chars, event.start_mark)
        if collection:
            self._nest(1, event.start_mark)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open.add(anchor)
        self._depth += collection
        self._deepest = self._depth
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= collection
        height = self._deepest - self._depth
        self._deepest = max(outer_deepest, self._deepest)
        if anchor is not None:
            self._open.discard(anchor)
            self._costs[anchor] = _Counted(self._nodes - start_nodes, self._chars - start_chars, height)
        return node


    def compose_mapping_node(self, anchor: Any) -> MappingNode:
        node = Composer.compose_mapping_node(self, anchor)
        seen: dict[tuple[str, str], Any] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            first: Any = seen.setdefault((key.tag, key.value), key.start_mark)
            if first is not key.start_mark:
                shown = key.value if len(key.value) <= 40 else key.value[:37] + "..."
                _refuse(f"the key {shown!r} appears twice in one mapping (first at line {first.line + 1}); "
                        "YAML would silently keep only the last", key.start_mark)
        return node


class _BoundedConstructor(SafeConstructor):
    def construct_bounded_int(self, node: ScalarNode) -> int:
        value = str(node.value)
        if len(value.replace("_", "")) > _MAX_INT_CHARS:  # before int(): no 4300-digit ValueError
            _refuse(f"an integer written with {len(value):,} characters; numbers this big are not allowed",
                    node.start_mark)
        return self.construct_yaml_int(node)


_BoundedConstructor.add_constructor(
    "tag:yaml.org,2002:int", _BoundedConstructor.construct_bounded_int  # type: ignore[type-var]
)

try:
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(Reader, Scanner, Parser, _BoundedComposer, _BoundedConstructor, Resolver):
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            _BoundedComposer.__init__(self)
            _BoundedConstructor.__init__(self)
            Resolver.__init__(self)

        def dispose(self) -> None:
            Parser.dispose(self)

else:

    class _Loader(CParser, _BoundedComposer, _BoundedConstructor, Resolver):  # type: ignore[no-redef]
        """libyaml's events, composed and counted in Python."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            _BoundedConstructor.__init__(self)
            Resolver.__init__(self)

        # CParser composes in C; these put the counting composer back in its place.
        get_single_node = Composer.get_single_node
        compose_document = Composer.compose_document
        compose_scalar_node = Composer.compose_scalar_node
        compose_sequence_node = Composer.compose_sequence_node
        compose_mapping_node = _BoundedComposer.compose_mapping_node


def load_yaml(text: str) -> Any:
    """Parse one YAML document within the bounds, or raise ``yaml.YAMLError`` (a bound
    broken is a ``MarkedYAMLError`` whose ``problem`` says which, at which line)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_DEFINITION_BYTES:
        _refuse(f"the file is {size:,} bytes; the most is {MAX_DEFINITION_BYTES:,}", None)
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: what, and where."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if isinstance(exc, YamlLimitError):
        return f"refused{where}: {problem}"
    return f"not valid YAML{where}: {problem}"
