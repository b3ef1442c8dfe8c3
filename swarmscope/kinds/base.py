"""The scenario-kind plug-in interface: what a kind declares so one pipeline can run it.

    class ExecStorm(Kind):
        name, metric = "exec_storm", "exec"
        def fields(self): return [Field("nodes", list_of(int), [2], "...")]
        def points(self, cfg): ...
        def payload(self, cfg, point, iteration, shared): ...

Every run, whatever its kind, goes the same way (docs/architecture.md): the controller loads
the typed config (:attr:`Kind.schema`, validated once), sets up the workers over Locust's
messages (:meth:`make_driver` runs there, with the config the master sent), then per point and
iteration opens a window on the probes with the kind's programs and options, sends the kind's
payload to the workers, closes the window when their exact results are back and reconciles
with the kind's rule. At the end the kind turns its windows into its report sections.

A kind is an *app-layer* plug-in: it may use both the controller side (reconcile, report
sections) and the worker side (its driver, its Locust users), which never import each other.
Registered by name in :mod:`swarmscope.kinds` (one place). Caveat: a kind's driver runs in a
Locust worker process, gevent-patched; blocking calls there must be gevent-friendly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar, Generic, TypeVar

from swarmscope.controller.model import IterationResult, PointInfo, RunInfo, WindowOutcome
from swarmscope.controller.options import COMMON_FIELDS, RunConfig
from swarmscope.controller.tables import (
    THREE_NUMBER_COLUMNS,
    Columns,
    Rows,
    three_number_cells,
    three_number_rows,
)
from swarmscope.core.config import Config, Field, Schema

C = TypeVar("C", bound=RunConfig)  # a kind's config class

CrossCheck = Callable[[dict[str, Any]], list[tuple[str, str]]]


class Kind(Generic[C]):
    """Base class of a scenario kind. Override what differs; the defaults fit a counted load."""

    name: ClassVar[str] = ""
    metric: ClassVar[str] = ""  # what is counted: "exec", "requests", "neighbors"
    description: ClassVar[str] = ""
    config_cls: ClassVar[type[Config]] = RunConfig  # the typed class of cfg (one per kind)
    # Why the Helm chart cannot run this kind ("": it can). The chart refuses the kind at install
    # with this reason (tools/chart_kinds.py writes it into the chart).
    not_in_cluster: ClassVar[str] = ""

    # -- typed config ---------------------------------------------------------------------
    def fields(self) -> list[Field]:
        """The kind's own options (and those of the plug-ins it composes: tracers, faults)."""
        return []

    def cross_checks(self) -> list[CrossCheck]:
        """Checks across fields; each returns [(key, reason)] (every problem at once)."""
        return []

    @cached_property
    def schema(self) -> Schema:
        return Schema([*COMMON_FIELDS, *self.fields()], self.cross_checks(), self.config_cls)

    # -- controller side ------------------------------------------------------------------
    def programs(self, cfg: C, shared: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        """Probe programs of a window and their options (``OpenWindow.options``, per program)."""
        return {}

    def points(self, cfg: C) -> list[PointInfo]:
        """The sweep: one point per swept value, each with its iterations (= windows)."""
        return [PointInfo(0, {}, 1)]

    def sim_nodes(self, cfg: C) -> int:
        """Simulated nodes the whole run needs on one machine (split across workers)."""
        return 1

    def window_nodes(self, cfg: C, point: PointInfo, ordered: list[str]) -> list[str]:
        """The nodes a point's windows measure, from all nodes spread round-robin over workers."""
        return ordered

    def shared(self, cfg: C, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """What every window needs from the workers' set-up replies (e.g. the target's URL)."""
        return {}

    def payload(self, cfg: C, point: PointInfo, iteration: int, shared: Mapping[str, Any]) -> dict[str, Any]:
        """What the workers get for one window (plain types: it crosses the network)."""
        return {}

    def window_timeout_s(self, cfg: C, point: PointInfo) -> float:
        """How long the controller waits for the workers' results of one window."""
        return float(cfg.window_timeout_s)

    def pause_s(self, cfg: C) -> float:
        """Seconds to wait between windows: the kind's ``pause_s`` option when it has one, else 0."""
        return float(getattr(cfg, "pause_s", 0.0) or 0.0)

    def expected_per_node(self, cfg: C) -> float | None:
        """What a paced generator was asked for per node and window (None: unpaced); a node
        under 95 % of it is flagged generator-saturated."""
        return None

    def reconcile(self, cfg: C, outcome: WindowOutcome) -> IterationResult:
        """One window's three numbers per node (generated / kernel / reported) and its data."""
        from swarmscope.controller.reconcile import reconcile

        return reconcile(outcome, self.metric, self.expected_per_node(cfg))

    def sections(self, cfg: C, results: Sequence[IterationResult], run_dir: str) -> dict[str, Any]:
        """Report sections of the kind (name -> JSON data), built from every window's result.

        Called once at the end of a run, also a failed one (with what was measured)."""
        return {}

    # Sections its reports have beyond those of a run with no window (``sections(cfg, [])``):
    # checks may name them before the run (``report_shape``).
    section_names: ClassVar[tuple[str, ...]] = ()

    def report_shape(self, cfg: C) -> dict[str, Any]:
        """A report of this kind with one point of one window and its sections as a run with no
        window has them (the names ``section_names`` adds are open: any path below them goes):
        what ``--check`` paths are validated against before the run (controller.checks)."""
        import tempfile

        from swarmscope.controller.model import NodeCount
        from swarmscope.controller.report import build_report
        from swarmscope.controller.store import ResultStore

        with tempfile.TemporaryDirectory(prefix="swarmscope-shape-") as tmp:
            run = RunInfo("shape", self.name, self.metric, cfg.as_dict(), 0, tmp)
            point = (self.points(cfg) or [PointInfo(0, {}, 1)])[0]
            with ResultStore(f"{tmp}/shape.sqlite") as store:
                store.save_run(run)
                store.save_point(run.run_id, point)
                store.save_iteration(
                    IterationResult(
                        run.run_id, point.index, point.params, 1, "w", 0, 1, [NodeCount("n1", 1, 1, 1, 0)], 0
                    )
                )
                for name, data in self.sections(cfg, [], tmp).items():
                    store.add_section(run.run_id, name, data)
                shape = build_report(store, run.run_id)
        for name in self.section_names:
            shape.setdefault(name, _Open())
        return shape

    def register_renderers(self) -> None:
        """Register the HTML renderers of the kind's sections (controller.report)."""

    # -- what a person sees (web UI tab, terminal) -------------------------------------------
    live_columns: ClassVar[Columns] = THREE_NUMBER_COLUMNS
    # Columns a progress line leaves out: its "[params iter i]" prefix already says them.
    live_in_prefix: ClassVar[frozenset[str]] = frozenset()

    def live_rows(self, results: Sequence[IterationResult]) -> Rows:
        """The tab's rows (``live_columns``) of the windows reconciled so far."""
        return three_number_rows(results)

    def console_cells(self, result: IterationResult) -> str:
        """A window's progress-line cells: by default generated / kernel / reported per node; a
        kind with its own table gives that table's cells (its ``live_columns``)."""
        if self.live_columns is THREE_NUMBER_COLUMNS:
            return three_number_cells(result)
        return " | ".join(
            ", ".join(
                f"{title} {row[key]}" for key, title in self.live_columns if key not in self.live_in_prefix
            )
            for row in self.live_rows([result])
        )

    def console_summary(self, report: dict[str, Any]) -> str | None:
        """The one-screen table printed at the end of a run (from report.json's sections, so it
        works on a stored report too); None when the per-window lines say it all."""
        return None

    # -- worker side ----------------------------------------------------------------------
    def prepare(self, cfg: C) -> None:
        """Build or fetch what a run of ``cfg`` needs (k6, ig) before any window opens; called
        once by the controller's process, before its probe and workers start."""

    def make_driver(self, cfg: C, sim_nodes: int, prefix: str) -> Any:
        """The worker-side driver (workers.driver.Driver) with ``sim_nodes`` simulated nodes,
        or the real node this worker runs on when ``sim_nodes`` is 0 (a cluster)."""
        raise NotImplementedError

    def free_run_nodes(self, cfg: C) -> int:
        """Simulated nodes per worker in a plain ``locust -f`` run."""
        return 1


def shares(n: int, nodes: list[str]) -> dict[str, list[int]]:
    """Split N (flows, neighbors) over the nodes in name order: {node: [first, count]},
    disjoint blocks, the first ``n % len(nodes)`` one larger; a kind's payload sends it to every
    worker, and each driver takes its own node's block."""
    out, at = {}, 0
    for i, node in enumerate(sorted(nodes)):
        c = n // len(nodes) + (1 if i < n % len(nodes) else 0)
        out[node] = [at, c]
        at += c
    return out


class _Open(dict[str, Any]):
    """A section whose content is known only once windows ran: every name is in it."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        return _Open()
