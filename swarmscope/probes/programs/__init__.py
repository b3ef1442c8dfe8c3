"""Measurement programs a probe can load: a closed registry of what ships in bpf/."""
