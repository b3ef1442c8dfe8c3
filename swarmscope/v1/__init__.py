"""Generated gRPC modules of proto/swarmscope/v1 (tools/genproto.py)."""
