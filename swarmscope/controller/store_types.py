"""The types of what the results store reads back: a crafted swarmscope.sqlite is one clear error.

    rows = typed(path, "points", db_rows, ("idx", INT), ("params", DICT), ("iterations", INT))

SQLite keeps any value in any column (a text ``idx`` in an INTEGER column), and the JSON columns
hold whatever was written there; a store may come from someone else. Every row the store loads
is checked against the types the report and the renderers rely on, so a wrong one is a
:class:`ResultsError` naming the table, column and value, never a traceback from deep in the
report (nor a text point index in a plot's file name).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from swarmscope.core.errors import ResultsError

# A column kind: (name, Python types, JSON-decoded first?, element type of a JSON list).
Kind = tuple[str, tuple[type, ...], bool, type | None]
INT: Kind = ("an integer", (int,), False, None)
INT_OR_NULL: Kind = ("an integer or null", (int, type(None)), False, None)
NUM_OR_NULL: Kind = ("a number or null", (int, float, type(None)), False, None)
STR: Kind = ("text", (str,), False, None)
NAME: Kind = ("a name (text without '/')", (str,), False, None)  # a run id: also a file name
STR_OR_NULL: Kind = ("text or null", (str, type(None)), False, None)
DICT: Kind = ("a JSON object", (dict,), True, None)
STR_LIST: Kind = ("a JSON list of strings", (list,), True, str)
JSON: Kind = ("JSON", (object,), True, None)


def typed(
    path: str, table: str, rows: Iterable[tuple[Any, ...]], *cols: tuple[str, Kind]
) -> list[tuple[Any, ...]]:
    """``rows`` with every JSON column decoded, each value checked against its column's kind."""
    out = []
    for row in rows:
        values = []
        for value, (col, kind) in zip(row, cols, strict=True):
            what, types, is_json, item = kind
            if is_json:
                try:
                    value = json.loads(value) if isinstance(value, str | bytes) else _Bad
                except ValueError:
                    value = _Bad
            ok = value is not _Bad and isinstance(value, types)
            ok = ok and (types == (object,) or not isinstance(value, bool))
            if ok and item is not None:
                ok = all(isinstance(x, item) for x in value)
            if ok and kind is NAME:
                ok = value not in ("", ".", "..") and "/" not in value and "\0" not in value
            if not ok:
                shown = "not JSON" if value is _Bad else f"{type(value).__name__} {value!r:.60}"
                raise ResultsError(f"results store {path}: {table}.{col} holds {shown}, not {what}")
            values.append(value)
        out.append(tuple(values))
    return out


class _Bad:
    """A JSON column that does not decode."""
