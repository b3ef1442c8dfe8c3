"""The Linux capabilities this process lacks for loading eBPF programs.

    missing_bpf_caps()   # [] as root; ["CAP_BPF", "CAP_PERFMON"] under capsh --drop=cap_bpf,cap_perfmon

Root's uid is not enough: a container or ``capsh --drop`` can take capabilities from uid 0, and
the kernel then answers EPERM, which BCC reports as "Failed to compile BPF module". Loading needs
CAP_BPF, and CAP_PERFMON for tracepoints (docs/security.md). Caveat: read from /proc/self/status
(CapEff).
"""

from __future__ import annotations

# Not CAP_SYS_RESOURCE: since 5.11 BPF memory is charged to the memory cgroup, not memlock
# (the project's machines give root no CAP_SYS_RESOURCE, and every program loads). Not
# CAP_SYS_ADMIN either: only BPF statistics need it, and the chart's probe may run without.
BITS = {"CAP_BPF": 39, "CAP_PERFMON": 38}
HOW = (
    "run as root with its capabilities (sudo; a container: privileged, or add CAP_BPF and "
    "CAP_PERFMON, and CAP_SYS_ADMIN for BPF statistics)"
)


def effective() -> int:
    """This process's effective capability set (0 when unreadable)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def missing_bpf_caps(tracing: bool = True) -> list[str]:
    """CAP_BPF, and CAP_PERFMON for tracing programs (not XDP), that this process lacks."""
    have = effective()
    names = ["CAP_BPF", "CAP_PERFMON"] if tracing else ["CAP_BPF"]
    return [n for n in names if not have >> BITS[n] & 1]
