"""The kernel's view of one window, written onto the probe's window span.

    annotate(span, readings, end_ns)     # before span.end(); readings are the window's pb.Readings

For every node: its counters as attributes ``swarmscope.kernel.<node>.<counter>`` and one
``reading`` event at close. For every per-event sample (map_update: one per BPF map-update call,
timed at sys_enter_bpf / sys_exit_bpf): one ``<series>`` event at the sys_exit_bpf time, with
the raw BPF-clock times (``bpf.enter_ns``, ``bpf.exit_ns``: bpf_ktime, CLOCK_MONOTONIC of this
host) and the entries it processed; per node, the first and last event times from the BPF clock
(``swarmscope.bpf.<node>.first_ns`` / ``last_ns``). An event's timestamp is the BPF time moved
onto the wall clock with this host's offset, so it lines up with the other processes' spans.

exec_count gives one ``exec.window`` sample per node (first and last exec of the window), so
its nodes get first/last the same way. Caveats: other counting programs keep no per-event
times, so their nodes have counters but no first/last. Events are bounded by the span limits
of the probe's spans (swarmscope.probes.spans allows EVENT_LIMIT);
``swarmscope.bpf.events_dropped`` says how many did not fit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from swarmscope.core.sys.otlpconf import EVENT_LIMIT
from swarmscope.probes.spans import WindowSpan


def annotate(span: WindowSpan, readings: Sequence[Any], end_ns: int) -> None:
    """Counters, per-event samples and first/last BPF times of ``readings`` onto ``span``."""
    off = time.time_ns() - time.monotonic_ns()
    budget = EVENT_LIMIT - len(readings)
    dropped = 0
    for r in readings:
        attrs: dict[str, str | int | float] = {
            "node": r.node,
            **{k: int(v) for k, v in r.counters.items()},
            **{k: float(v) for k, v in r.gauges.items()},
        }
        if r.error:
            attrs["error"] = r.error
        span.add_event("reading", attributes=attrs, timestamp=end_ns)
        for k, v in r.counters.items():
            span.set_attribute(f"swarmscope.kernel.{r.node}.{k}", int(v))
        if r.samples:
            span.set_attribute(f"swarmscope.bpf.{r.node}.first_ns", min(int(s.start_ns) for s in r.samples))
            span.set_attribute(f"swarmscope.bpf.{r.node}.last_ns", max(int(s.end_ns) for s in r.samples))
        for s in sorted(r.samples, key=lambda s: s.end_ns):
            if budget <= 0:
                dropped += 1
                continue
            budget -= 1
            span.add_event(
                s.series,
                attributes={
                    "node": r.node,
                    "bpf.enter_ns": int(s.start_ns),
                    "bpf.exit_ns": int(s.end_ns),
                    "entries": int(s.value),
                    **{f"label.{k}": v for k, v in s.labels.items()},
                },
                timestamp=int(s.end_ns) + off,
            )
    if dropped:
        span.set_attribute("swarmscope.bpf.events_dropped", dropped)
