"""The embedded probe: on one machine the controller starts ``swarmscope probe`` itself.

    probe = EmbeddedProbe.start(fleet.address, token, log_path="results/run/probe.log")
    fleet.wait_for_probes(hosts={probe.host})  # or probe.wait_registered(fleet)
    ...
    probe.stop()

It is the same probe process a cluster runs as a DaemonSet, talking the same gRPC, so the
embedded default exercises the distributed code path. The token goes through the environment,
never the command line. If the probe dies before registering, its log tail is the error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import IO, Any

from swarmscope.core.errors import SetupError
from swarmscope.core.node import node_host
from swarmscope.core.sys import owners
from swarmscope.core.sys.trust import open_append


class EmbeddedProbe:
    def __init__(self, proc: subprocess.Popen[bytes], log_path: str, log_fh: IO[bytes], host: str):
        self.proc = proc
        self.log_path = log_path
        self._log_fh = log_fh
        self.host = host

    @classmethod
    def start(
        cls,
        controller: str,
        token: str,
        log_path: str,
        programs: list[str] | None = None,
        extra_args: list[str] | None = None,
    ) -> EmbeddedProbe:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        fh = os.fdopen(open_append(log_path), "ab")  # a symlink planted there: refused
        host = node_host()
        env = dict(os.environ, SWARMSCOPE_TOKEN=token, NODE_NAME=host)
        cmd = [
            sys.executable,
            "-m",
            "swarmscope",
            "probe",
            "--controller",
            controller,
            "--node",
            host,
        ]
        if programs:
            cmd += ["--programs", ",".join(programs)]
        cmd += extra_args or []
        try:
            proc = subprocess.Popen(
                owners.dying_with_us(cmd, env),  # its BPF goes when we go, even on SIGKILL
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as e:
            fh.close()
            raise SetupError(f"cannot start the embedded probe ({cmd[0]}): {e}") from e
        return cls(proc, log_path, fh, host)

    def wait_registered(self, fleet: Any, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.host == self.host for p in fleet.probes()):
                return
            if self.proc.poll() is not None:
                raise SetupError(
                    f"the embedded probe exited with code {self.proc.returncode}:\n{self.log_tail()}"
                )
            time.sleep(0.05)
        raise SetupError(f"the embedded probe did not register in {timeout_s:.0f}s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 15) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                lines = fh.read().decode(errors="replace").splitlines()
        except OSError:
            return "(no probe log)"
        return "\n".join("  " + ln for ln in lines[-n:])

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log_fh.close()
