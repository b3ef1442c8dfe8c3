"""Systems under test that ship with swarmscope (reference implementations a scenario starts)."""
