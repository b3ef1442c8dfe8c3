"""swarmscope — distributed load-and-measure: Locust generates load, eBPF probes count it.

The role packages (``controller``, ``workers``, ``probes``) and the data directories (``bpf``,
``scenarios``) live at the top of the repository and are symlinked in here, so they import as
``swarmscope.controller`` and so on, from a checkout and from an installed wheel alike.
"""

__version__ = "0.1.0"
