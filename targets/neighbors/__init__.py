"""Reference neighbor control plane + agent (issue 6): gRPC store, XDP/kernel-table agent, sweep.

python -m swarmscope.targets.neighbors.server --db /tmp/n.db --listen 127.0.0.1:0
python -m swarmscope.targets.neighbors.agent --control-plane 127.0.0.1:PORT --pin-dir /sys/fs/bpf/ss
python -m swarmscope.targets.neighbors.sweep scenarios/neighbor_writes.yaml
"""
