# One image for the three roles the Helm chart runs: `swarmscope controller|worker|probe`.
#
#   docker build -t ghcr.io/swarmscope/swarmscope:0.1.0 .
#
# Debian bookworm (python3 3.11 and python3-bpfcc from Debian, as docs/platform.md#bcc-and-the-kernel-header-tree requires: the PyPI
# "bcc" is unrelated). tools/image-install.sh installs exactly what tools/setup.sh installs on
# a development machine. Controller and workers run as uid 10001; the probe runs as uid 0 with
# all capabilities dropped except BPF/PERFMON (see charts/swarmscope).
FROM debian:bookworm-slim

WORKDIR /opt/swarmscope
COPY . /opt/swarmscope
RUN tools/image-install.sh && rm -rf .git results

ENV PATH=/opt/swarmscope/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

USER 10001
ENTRYPOINT ["swarmscope"]
CMD ["--help"]
