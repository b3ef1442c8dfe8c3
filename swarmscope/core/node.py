"""The machine a node lives on: the probe that measures a node is the one with this name.

    node_host()   # $SWARMSCOPE_NODE_HOST, else $NODE_NAME (a cluster), else the hostname

``SWARMSCOPE_NODE_HOST`` lets several "hosts" share one machine in tests.
"""

from __future__ import annotations

import os
import socket


def node_host() -> str:
    return os.environ.get("SWARMSCOPE_NODE_HOST") or os.environ.get("NODE_NAME") or socket.gethostname()
