"""Text for a terminal: control characters shown, never obeyed.

    print(printable(f"node {name}"))            # "node n1\\x1b[2J" prints as text, clears nothing

Node names, pods, parameters and flags reach the console from scenario files, workers, probes
and results stores someone else may have written; an ESC sequence among them could rewrite the
screen (hide a flag, forge a line) or, in some terminals, do worse. Every C0/C1 control
character (and DEL, and the bidirectional overrides that reorder what is shown) becomes ``\\xNN``
/ ``\\uNNNN``; line breaks are kept only where the caller says a text is several lines.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_NL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str, lines: bool = True) -> str:
    """``text`` with its control characters escaped; ``lines=False`` escapes newlines and tabs
    too (one line that must stay one line)."""
    return (_CONTROL if lines else _CONTROL_NL).sub(_shown, text)
