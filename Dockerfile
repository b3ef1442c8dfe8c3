# One image for the three roles the Helm chart runs: `swarmscope controller|worker|probe`.
#
#   docker build -t ghcr.io/swarmscope/swarmscope:0.1.0 .
#
# Debian bookworm (python3 3.11 and python3-bpfcc from Debian, as docs/platform.md#bcc-and-the-kernel-header-tree requires: the PyPI
# "bcc" is unrelated). tools/image-install.sh installs exactly what tools/setup.sh installs on
# a development machine. Controller and workers run as uid 10001; the probe runs as uid 0 with
# all capabilities dropped except BPF/PERFMON (see charts/swarmscope).
#
# Two parts, in this order so a code change reuses the cached base (Docker's layer cache here,
# tools/build_image.py's base cache without Docker): the base copies only what the Debian
# packages and pinned wheels depend on and installs them (the editable install's .pth points at
# /opt/swarmscope, so the venv does not depend on the code); the code is copied last and only
# the exec helpers, which are compiled from it, are built on top.

FROM debian:bookworm-slim

WORKDIR /opt/swarmscope
COPY pyproject.toml constraints.txt README.md /opt/swarmscope/
COPY tools/setup.sh tools/image-install.sh /opt/swarmscope/tools/
RUN tools/image-install.sh

COPY . /opt/swarmscope
# The exec-storm helpers and the neighbor agent's compiled list, prebuilt into
# /var/cache/swarmscope: worker pods run with a read-only root filesystem and find them there
# instead of compiling (a neighbor worker without its library would walk the list in Python).
RUN .venv/bin/python -c 'from swarmscope.workers.native import ensure_built; print(ensure_built())' \
 && .venv/bin/python -c 'from swarmscope.kinds.neighbor_writes.fastpath import agent_lib; assert agent_lib()' \
 && rm -rf .git results

ENV PATH=/opt/swarmscope/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

USER 10001
ENTRYPOINT ["swarmscope"]
CMD ["--help"]
