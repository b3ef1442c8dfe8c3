"""swarmscope — distributed load-and-measure: Locust generates load, eBPF probes count it.

The role packages (``controller``, ``workers``, ``probes``) and the data directories (``bpf``,
``scenarios``) live at the top of the repository and are symlinked in here, so they import as
``swarmscope.controller`` and so on, from a checkout and from an installed wheel alike.
"""

__version__ = "0.1.0"

import os as _os

# grpc reads these when it is first imported. Our processes fork only to exec (bursts, tracers,
# probes), never to use grpc in the child, so grpc's fork handlers are not needed — and with
# them on, every fork while a stream is open logs "skipping fork() handlers".
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
