"""Report sections: what a kind's renderer returns, and the registry of renderers by name.

    @register_section("steps")
    def render_steps(name, data, report) -> SectionHTML: ...

Kept apart from report.py so that renderers (the kinds', the waterfall) import this small
module, not the report that calls them. Only this process's registry is used: a section name
read from a results store never names code to run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swarmscope.controller.plots import Plot


@dataclass
class SectionHTML:
    """What a section renderer returns: an HTML fragment and plots (filename → Plot).

    Plots are saved in the run directory and inlined where the fragment contains
    ``{plot:<filename>}``, or after the fragment when it does not mention them.
    """

    html: str
    plots: list[Plot] = field(default_factory=list)


SectionRenderer = Callable[[str, Any, dict[str, Any]], SectionHTML]
_RENDERERS: dict[str, SectionRenderer] = {}


def register_section(name: str) -> Callable[[SectionRenderer], SectionRenderer]:
    """Decorator: draw report sections called ``name`` with this function."""

    def deco(fn: SectionRenderer) -> SectionRenderer:
        _RENDERERS[name] = fn
        return fn

    return deco
