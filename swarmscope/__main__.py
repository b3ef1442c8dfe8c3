"""``python -m swarmscope …`` is the ``swarmscope`` command (how child processes start it)."""

from swarmscope.app.cli import main

raise SystemExit(main())
