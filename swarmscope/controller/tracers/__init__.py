"""Tracers under test: the "reported" number of a window (see base.py for the interface).

from swarmscope.controller.tracers import make_tracer, NodeKey, TRACER_FIELDS
"""

import dataclasses

from swarmscope.controller.tracers import command, presets, prometheus, stream
from swarmscope.controller.tracers.base import (
    TRACER_FIELDS,
    TRACERS,
    NodeKey,
    TracerResult,
    TracerUnderTest,
    make_tracer,
    tracer_cross_check,
)

__all__ = [
    "TRACERS",
    "TRACER_FIELDS",
    "NodeKey",
    "TracerResult",
    "TracerUnderTest",
    "command",
    "make_tracer",
    "presets",
    "prometheus",
    "stream",
    "tracer_cross_check",
]


def _choices_from_registry() -> None:
    """The ``tracer`` option's choices are the registry's names: importing this package
    registers every adapter first (importing ``.base`` runs this file too), so a new adapter
    is a choice as soon as it registers itself, with no list to keep in step."""
    names = ("none", *sorted(TRACERS))
    for i, f in enumerate(TRACER_FIELDS):
        if f.key == "tracer":
            TRACER_FIELDS[i] = dataclasses.replace(
                f, choices=names, help=f"tracer under test: none (reported is null), {', '.join(names[1:])}"
            )


_choices_from_registry()
