"""A run's checks, validated against its kind's report before anything runs.

    checks, cfg = load_checks(kind, cfg, ["loss_ratio.max < 0.01"])   # ConfigError if a path is off

Used by ``swarmscope run`` and by the Locust plug-in's ``--check``; it imports no Locust (so
it does not gevent-patch the process that calls it).
"""

from __future__ import annotations

from typing import Any

from swarmscope.controller.checks import Check, from_config
from swarmscope.core.errors import ConfigError


def load_checks(kind: Any, cfg: Any, extra: list[str]) -> tuple[list[Check], Any]:
    """The config's and ``extra`` checks, each path validated against ``kind``'s report before
    anything runs (a ConfigError, exit 2, with "did you mean"); ``cfg`` with all of them."""
    from swarmscope.kinds import KINDS, get_kind, scenario_text

    shape = kind.report_shape(cfg)
    try:
        checks = from_config(cfg, extra, read=scenario_text, shape=shape)
    except ConfigError:  # say which other kind's reports have a name this one's lack
        elsewhere = {}
        for name in KINDS:
            other = get_kind(name)
            if other.name != kind.name:
                base = set(other.report_shape(other.schema.load(env={}))) - set(shape)
                elsewhere.update(dict.fromkeys(sorted(base), other.name))
        checks = from_config(cfg, extra, read=scenario_text, shape=shape, elsewhere=elsewhere)
    return checks, cfg.replace(checks=[c.text for c in checks] or None)
