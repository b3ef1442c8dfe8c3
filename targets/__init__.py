"""Systems under test that swarmscope can start itself (local targets)."""
