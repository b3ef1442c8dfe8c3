"""Tracers under test: the "reported" number of a window (see base.py for the interface).

    from swarmscope.controller.tracers import make_tracer, NodeKey, TRACER_FIELDS

Every module of this package is imported here, and an adapter registers itself on import
(``@register_tracer(name, fields, options, check)``, its options declared next to its code): a
new tracer is one module, with no list to keep in step.
"""

import dataclasses
import importlib
import pkgutil

from swarmscope.controller.tracers.base import (
    TRACER_FIELDS,
    TRACER_OPTIONS,
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
    "TRACER_OPTIONS",
    "NodeKey",
    "TracerResult",
    "TracerUnderTest",
    "make_tracer",
    "tracer_cross_check",
]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def _choices_from_registry() -> None:
    """The ``tracer`` option's choices are the registry's names."""
    names = ("none", *sorted(TRACERS))
    for i, f in enumerate(TRACER_FIELDS):
        if f.key == "tracer":
            TRACER_FIELDS[i] = dataclasses.replace(
                f, choices=names, help=f"tracer under test: none (reported is null), {', '.join(names[1:])}"
            )


_choices_from_registry()
