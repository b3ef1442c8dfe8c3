"""The system layer: the only code that talks to the kernel and OTel setup directly.

    from swarmscope.core.sys import bpf, cgroups, otel, sentinel

``bpf`` (raw bpf() commands through libbpf1), ``cgroups`` (mounts, ids, throw-away children),
``sentinel`` (the numbered execs tracers are drained with) and ``otel`` (provider, exporter,
traceparent). It sits with config/errors/events/auth in the core: it imports none of probes,
targets, workers or controller (.importlinter enforces that), and all of them use it.
"""
