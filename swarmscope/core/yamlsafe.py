"""YAML for scenario files with bounds: few aliases, shallow nesting, a bounded expansion.

    raw = load(text)          # as yaml.safe_load, or a yaml.YAMLError naming the bound
    root = compose(text)      # as yaml.compose, same bounds

Why: a 700-byte alias bomb (each level a list of aliases to the one before) expands to ~10^9
nodes when read, and 10 kB of nested ``[`` overflows the recursion limit. Both are refused
here while composing, before anything is expanded: at most ``MAX_ALIASES`` aliases, at most
``MAX_DEPTH`` levels, at most ``MAX_NODES`` nodes counting each alias as what it stands for.
Caveat: imports PyYAML (callers import this lazily; the probe never reads YAML).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError

MAX_ALIASES = 64
MAX_DEPTH = 32
MAX_NODES = 100_000


class _Bounded(yaml.SafeLoader):
    def __init__(self, stream: str):
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0
        self._sizes: dict[int, int] = {}  # node id -> nodes it expands to

    def _refuse(self, what: str) -> None:
        raise ComposerError(None, None, what, self.peek_event().start_mark)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                self._refuse(f"more than {MAX_ALIASES} aliases (*name)")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            self._refuse(f"nested deeper than {MAX_DEPTH} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if self._expanded(node) > MAX_NODES:
            self._refuse(f"expands to more than {MAX_NODES} values (aliases counted as what they repeat)")
        return node

    def _expanded(self, node: Any) -> int:
        """Nodes under ``node`` with aliases expanded, each node's size computed once."""
        size = self._sizes.get(id(node))
        if size is None:
            if isinstance(node, yaml.SequenceNode):
                size = 1 + sum(self._sizes.get(id(c), 1) for c in node.value)
            elif isinstance(node, yaml.MappingNode):
                size = 1 + sum(self._sizes.get(id(k), 1) + self._sizes.get(id(v), 1) for k, v in node.value)
            else:
                size = 1
            self._sizes[id(node)] = min(size, MAX_NODES + 1)
        return size


def load(text: str) -> Any:
    loader = _Bounded(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def compose(text: str) -> Any:
    loader = _Bounded(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()
