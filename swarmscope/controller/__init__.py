"""swarmscope controller."""
