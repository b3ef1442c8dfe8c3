"""swarmscope workers."""
