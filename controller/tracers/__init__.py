"""Tracers under test: the "reported" number of a window (see base.py for the interface).

from swarmscope.controller.tracers import make_tracer, NodeKey, TRACER_FIELDS
"""

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
