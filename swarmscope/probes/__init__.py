"""swarmscope probes."""
