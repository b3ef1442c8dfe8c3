"""Systems under test that ship with swarmscope (reference tracers, not swarmscope itself).

    python -m swarmscope.targets.stream_tracer.agent --collector 127.0.0.1:7000

They are deliberately built the way the systems swarmscope measures are built (e.g. one
message per event), so a sweep has something that breaks in a known, explainable way.
"""
