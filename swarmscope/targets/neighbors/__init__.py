"""Reference neighbor control plane + agent: gRPC store, XDP/kernel-table agent.

python -m swarmscope.targets.neighbors.server --db /tmp/n.db --listen 127.0.0.1:0
python -m swarmscope.targets.neighbors.agent --control-plane 127.0.0.1:PORT --pin-dir /sys/fs/bpf/ss
swarmscope run scenarios/neighbor_writes.yaml --set target=kernel   # the sweep: kinds/neighbor_writes
"""
