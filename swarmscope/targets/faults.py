"""Fault injection: a small ``FaultInjector`` protocol and a registry of named faults.

    inj = make_fault("kill-lb-local", at_s=5.0, target=local_ingress)
    inj.arm(t0)        # schedules the fault at t0 + at_s (a thread), returns at once
    ...
    rec = inj.records  # [{"name", "at": wall time, "detail": {...}}]

Registered faults:

* ``kill-lb-local`` — SIGKILL the local nginx LB, master and workers (targets.ingress.local.LocalIngress);
  its supervisor restarts it after ``restart_delay_s``.
* ``kill-pod`` — delete a pod (the LB's) through the official ``kubernetes`` client with a
  grace period (``grace_period_s``; Kubernetes' default is 30 s, as in the ingress write-up's
  ``kubectl delete pod``); the cluster reschedules it. In a pod it uses the pod's service
  account (in-cluster config), else ``$KUBECONFIG``.

New faults register with ``@register("name")`` on a factory taking keyword arguments, the way
k6 registers outputs by name. Client-observed downtime is computed from the request timeline
by ``workers.http_stats.downtime`` — the injector only records *when* it struck.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from swarmscope.core.config import Config, Field
from swarmscope.core.errors import ConfigError, Problem, SwarmscopeError

log = logging.getLogger(__name__)

# Each API request of kill-pod (list, delete) gives up after this long: a stalled API server
# fails the fault with an error in its record instead of holding its thread for ever.
API_TIMEOUT_S = 10.0


class FaultInjector(Protocol):
    name: str
    at_s: float
    records: list[dict[str, Any]]

    def arm(self, t0: float) -> None:
        """Strike at ``t0 + at_s`` (wall clock) without blocking the caller."""

    def inject(self) -> dict[str, Any]:
        """Strike now; returns details for the report."""

    def cancel(self) -> None: ...


_REGISTRY: dict[str, Callable[..., FaultInjector]] = {}
# The options faults declare next to their code: a kind with faults takes every one of them
# (FAULT_FIELDS), typed by each fault's own Config class (FAULT_OPTIONS); ``fault_kwargs`` hands
# a fault its own, under its keyword names.
FAULT_FIELDS: list[Field] = []
FAULT_OPTIONS: dict[str, type[Config]] = {}
_KWARGS: dict[str, dict[str, str]] = {}  # fault -> {option key: keyword argument}


def register(
    name: str,
    fields: tuple[Field, ...] = (),
    options: type[Config] | None = None,
    kwargs: dict[str, str] | None = None,
) -> Callable[[Callable[..., FaultInjector]], Callable[..., FaultInjector]]:
    """Register a fault under ``name``, with the options it declares (``fields``, typed by
    ``options``) and the keyword each option is passed as (``kwargs``; default: its key)."""

    def deco(factory: Callable[..., FaultInjector]) -> Callable[..., FaultInjector]:
        _REGISTRY[name] = factory
        FAULT_FIELDS.extend(f for f in fields if f.key not in {g.key for g in FAULT_FIELDS})
        if options is not None:
            FAULT_OPTIONS[name] = options
        _KWARGS[name] = dict(kwargs or {f.key: f.key for f in fields})
        return factory

    return deco


def fault_kwargs(name: str, cfg: Any) -> dict[str, Any]:
    """The keyword arguments fault ``name`` takes from a run's config: its own options."""
    return {kw: getattr(cfg, key) for key, kw in _KWARGS.get(name, {}).items()}


def names() -> list[str]:
    return sorted(_REGISTRY)


def make_fault(name: str, **kwargs: Any) -> FaultInjector:
    if name not in _REGISTRY:
        raise ConfigError([Problem("fault", name, f"unknown fault; known: {', '.join(names())}")])
    return _REGISTRY[name](**kwargs)


class _Scheduled:
    """Shared timing: a thread waits until the fault time, then calls ``inject``."""

    name = "?"

    def __init__(self, at_s: float):
        self.at_s = at_s
        self.records: list[dict[str, Any]] = []
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    def inject(self) -> dict[str, Any]:
        raise NotImplementedError

    def arm(self, t0: float) -> None:
        def run() -> None:
            if self._cancel.wait(max(0.0, t0 + self.at_s - time.time())):
                return
            at = time.time()
            try:
                detail = self.inject()
                self.records.append({"name": self.name, "at": at, "detail": detail})
            except SwarmscopeError as e:  # reported, not raised in a thread nobody joins
                log.error("fault %s failed: %s", self.name, e)
                self.records.append({"name": self.name, "at": at, "error": str(e)})

        self._thread = threading.Thread(target=run, name=f"fault-{self.name}", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


@register("kill-lb-local")
class KillLocalLB(_Scheduled):
    name = "kill-lb-local"

    def __init__(self, at_s: float, target: Any, **_: Any):
        super().__init__(at_s)
        self.target = target

    def inject(self) -> dict[str, Any]:
        pid = self.target.lb_master_pid()
        t = self.target.kill_lb()
        return {"pid": pid, "killed_at": t, "restart_delay_s": self.target.restart_delay_s}


class KillPodOptions(Config):
    grace_period_s: int
    fault_namespace: str
    fault_selector: str


@register(
    "kill-pod",
    (
        Field(
            "grace_period_s",
            int,
            30,
            "kill-pod: the deletion's grace period in seconds (30 = kubectl delete pod's default)",
            min=0,
            max=3600,
        ),
        Field("fault_namespace", str, "ingress-nginx", "kill-pod: namespace of the pod to delete"),
        Field(
            "fault_selector",
            str,
            "app.kubernetes.io/component=controller",
            "kill-pod: label selector of the pod to delete (the first live match)",
        ),
    ),
    KillPodOptions,
    {"grace_period_s": "grace_period_s", "fault_namespace": "namespace", "fault_selector": "label_selector"},
)
class KillPod(_Scheduled):
    """Delete one pod matching ``label_selector`` in ``namespace`` with ``grace_period_s``.

    0 kills at once; 30 is ``kubectl delete pod``'s default, where the pod stays Terminating
    until its containers exit or the grace period ends (the ingress write-up's ~30 s)."""

    name = "kill-pod"

    def __init__(
        self,
        at_s: float,
        namespace: str = "ingress-nginx",
        label_selector: str = "app.kubernetes.io/component=controller",
        api: Any = None,
        grace_period_s: int = 0,
        **_: Any,
    ):
        super().__init__(at_s)
        self.namespace = namespace
        self.label_selector = label_selector
        self.grace_period_s = int(grace_period_s)
        self._api = api

    def api(self) -> Any:
        if self._api is None:
            try:
                from kubernetes import client, config
            except ImportError as e:
                raise SwarmscopeError("kill-pod needs the kubernetes client (pip install kubernetes)") from e
            try:
                config.load_incluster_config()
            except config.ConfigException:
                try:
                    # $KUBECONFIG read now: the client reads it once, when it is first imported
                    kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
                    config.load_kube_config(config_file=kubeconfig)
                except (config.ConfigException, OSError) as e:
                    raise SwarmscopeError(
                        f"kill-pod: no cluster to talk to (in-cluster or kubeconfig): {e}"
                    ) from e
            self._api = client.CoreV1Api()
        return self._api

    def inject(self) -> dict[str, Any]:
        api = self.api()
        try:
            pods = api.list_namespaced_pod(
                self.namespace, label_selector=self.label_selector, _request_timeout=API_TIMEOUT_S
            ).items
        except Exception as e:
            raise SwarmscopeError(f"kill-pod: listing pods in {self.namespace} failed: {e}") from e
        if not pods:
            raise SwarmscopeError(f"kill-pod: no pod matches {self.label_selector!r} in {self.namespace}")
        # A pod already Terminating (an earlier kill) is not the one serving: take a live one.
        live = [p for p in pods if getattr(p.metadata, "deletion_timestamp", None) is None] or pods
        victim = live[0].metadata.name
        try:
            api.delete_namespaced_pod(
                victim,
                self.namespace,
                grace_period_seconds=self.grace_period_s,
                _request_timeout=API_TIMEOUT_S,
            )
        except Exception as e:
            raise SwarmscopeError(f"kill-pod: deleting {victim} failed: {e}") from e
        return {"pod": victim, "namespace": self.namespace, "grace_period_s": self.grace_period_s}


class StallOptions(Config):
    stall_s: float


@register(
    "stall-backends-local",
    (Field("stall_s", float, 1.0, "stall-backends-local: how long the backends freeze", min=0.01, max=600),),
    StallOptions,
)
class StallLocalBackends(_Scheduled):
    """Freeze the local target's backends (SIGSTOP … SIGCONT) for ``stall_s``: a stalled server."""

    name = "stall-backends-local"

    def __init__(self, at_s: float, target: Any, stall_s: float = 1.0, **_: Any):
        super().__init__(at_s)
        self.target = target
        self.stall_s = stall_s

    def inject(self) -> dict[str, Any]:
        t = time.time()
        self.target.stall_backends(self.stall_s)
        return {"stalled_at": t, "stall_s": self.stall_s}
