"""A headless controller's run happens at most once per id (the chart: once per install/upgrade).

    gate = RunOnce("/var/lib/swarmscope/results", "rel-r3")
    if not gate.claim():          # this id ran here before (a restart): no second run
        return gate.idle(9646)    # serves /healthz until SIGTERM
    ...run...; gate.finish(rc)

The chart's headless controller is a Deployment's pod: it restarts after its container exits,
after a crash and after a node reboot. Each restart ran the scenario again, so a kill-pod fault
struck again. ``swarmscope controller --run-once ID`` claims ``<out>/.run-once-<ID>.json`` with
O_EXCL before Locust starts, and records the exit code when the run ends. A controller that
finds the claim does not run: it logs why and idles, answering the kubelet's /healthz, until it
is stopped. Claimed *before* the run, not after: a run cut short by a restart is not repeated
either, because its fault may already have struck (at most once, where a Job's restarts would
give at least once). The chart's id is ``<release>-r<revision>``, so each install or upgrade
runs once.

Caveat: the claim lives in the results volume. The chart's default emptyDir survives container
restarts and node reboots of the same pod; a pod that is replaced (evicted, rescheduled)
starts empty and runs again unless ``controller.resultsClaimName`` names a persistent volume.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from swarmscope.core.errors import SetupError
from swarmscope.probes import selfmetrics

log = logging.getLogger("swarmscope.controller")


class RunOnce:
    """The claim file of one run id under ``out``."""

    def __init__(self, out: str | os.PathLike[str], run_id: str):
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise SetupError(f"--run-once {run_id!r}: give a plain name (no '/', not starting with '.')")
        self.run_id = run_id
        self.path = Path(out) / f".run-once-{run_id}.json"  # a file: run listings count dirs

    def claim(self) -> bool:
        """True when this process may run (the claim is now its own); False when it exists."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except OSError as e:
            raise SetupError(f"cannot claim run {self.run_id} at {self.path}: {e.strerror}") from e
        with os.fdopen(fd, "w") as f:
            json.dump({"run_id": self.run_id, "claimed_at": time.time(), "host": socket.gethostname()}, f)
            f.flush()
            os.fsync(f.fileno())
        return True

    def record(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.path.read_text()))
        except (OSError, ValueError):
            return {}  # claimed but cut short before the first write: still claimed

    def finish(self, exit_code: int) -> None:
        """Records the run's end (atomically: a restart never reads half a file)."""
        rec = {**self.record(), "finished_at": time.time(), "exit_code": exit_code}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        os.replace(tmp, self.path)

    def idle(self, health_port: int, bind: str = "0.0.0.0") -> int:  # every interface: the kubelet probes it
        """Logs why there is no run, serves /healthz on ``health_port`` and waits for SIGTERM or
        SIGINT; returns 0."""
        # Handlers set and /healthz bound before the log line: whoever acts on "claimed here"
        # finds /healthz answering and may stop it with SIGTERM.
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        # The probe's bounded server (one /healthz and /metrics server); /metrics is empty here.
        server = selfmetrics.serve(selfmetrics.TextRegistry(), health_port, bind)
        rec = self.record()
        if "exit_code" in rec:
            how = f"it ended with exit code {rec['exit_code']}"
        else:
            how = "it was cut short (a restart during the run)"
        log.warning(
            "controller: run %s was claimed here at %s and %s; not running it again (its faults "
            "would strike twice). Idle until stopped: the next helm upgrade starts a new run.",
            self.run_id,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(rec.get("claimed_at", 0)))),
            how,
        )
        try:
            while not stop.wait(0.5):  # short waits: signal handlers run between them
                pass
        finally:
            server.shutdown()
            server.server_close()
        return 0
