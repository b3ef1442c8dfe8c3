"""Per-process limits a process that holds thousands of sockets must raise for itself.

    from swarmscope.core.sys.limits import raise_nofile
    soft, hard = raise_nofile()        # RLIMIT_NOFILE soft raised to the hard limit

Every TCP connection is a file descriptor. The soft RLIMIT_NOFILE a process inherits is often
1,024 (systemd's default, most login shells) while the hard limit is far higher (524,288 under
systemd, 1,048,576 in most container runtimes). A controller or relay holding more connections
than its soft limit cannot accept the next one: gRPC's accept fails with EMFILE, the connection
stays in the listen backlog until that fills, and probes past the limit time out their
handshake and retry, for ever. An unprivileged process may raise its soft limit up to the hard
one, so the processes that hold many sockets (the fleet's server, a relay, the fan-in bench's
simulated probes) do that at start. Caveat: only the hard limit bounds it; a hard limit below
the connections needed must be raised by whoever starts the process (``ulimit -Hn``, the
container runtime, systemd's ``LimitNOFILE=``).
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def raise_nofile() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; return (soft, hard) in force.

    Never lowers it, never fails: a limit it cannot change is logged and returned as it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        # Unlimited hard: leave the soft limit alone (an "infinite" soft one is refused by
        # the kernel above fs.nr_open, and select()-based code elsewhere would not cope).
        return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:
        log.warning("could not raise RLIMIT_NOFILE from %d to %d: %s", soft, hard, e)
        return soft, hard
    return hard, hard
