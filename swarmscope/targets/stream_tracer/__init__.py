"""The reference per-event streaming exec tracer: node agent (agent.py) + central collector.

    python -m swarmscope.targets.stream_tracer.agent --collector 127.0.0.1:7000 --ringbuf-pages 8

The collector and the ``stream`` tracer adapter live in swarmscope.controller.tracers.stream.
"""
