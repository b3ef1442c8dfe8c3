"""docs/architecture.md's "To add X, touch these files" table is true: in a copy of the tree, a
throw-away kind, tracer and fault are added by writing exactly the files the table lists, and
each then works through the doors that ask the registries (a real embedded `swarmscope run` of
the kind, with its probe; `--explain`; the tracer built by `make_tracer`; the fault by
`make_fault` and in the ingress kind's choices; the chart's generated kind list)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = "tick"

KIND_PKG = '''
import os
import subprocess

from swarmscope.controller.options import RunConfig
from swarmscope.core.config import Field
from swarmscope.core.node import node_host
from swarmscope.kinds.base import Kind
from swarmscope.workers.nodes import create_sim_nodes, destroy_sim_nodes, joiner


class TickConfig(RunConfig):
    ticks: int


class TickDriver:
    """One simulated node (a cgroup) that runs /bin/true ``ticks`` times per window."""

    current_window = ""

    def __init__(self, prefix):
        self.group = f"tick-{prefix or 'e'}-{os.getpid()}"
        self.node = create_sim_nodes(self.group, ["t0"], pids_max=64)[0]

    def describe(self):
        return [self.node.describe(node_host())]

    def info(self):
        return {}

    def run_window(self, window_id, nodes, payload, environment):
        for _ in range(int(payload["ticks"])):
            subprocess.run(["/bin/true"], preexec_fn=joiner(self.node), check=True)
        return {n: {"generated": int(payload["ticks"])} for n in nodes}

    def stop_window(self, window_id):
        pass

    def take(self, window_id, node_names=None):
        return {}

    def close(self):
        destroy_sim_nodes(self.group)


class Tick(Kind[TickConfig]):
    name, metric, config_cls = "tick", "exec", TickConfig

    def fields(self):
        return [Field("ticks", int, 3, "execs per window", min=1, max=100)]

    def programs(self, cfg, shared):
        return {"exec_count": {}}

    def payload(self, cfg, point, iteration, shared):
        return {"ticks": cfg.ticks}

    def make_driver(self, cfg, sim_nodes, prefix):
        return TickDriver(prefix)


KIND = Tick()
'''

TRACER = """
from swarmscope.controller.tracers.base import TracerResult, register_tracer
from swarmscope.core.config import Config, Field

FIELDS = [Field("tracer_null_echo", int, 7, "null tracer: what it reports per node", min=0, max=99)]


class NullOptions(Config):
    tracer_null_echo: int


class NullTracer:
    name = "null"

    def __init__(self, echo):
        self.echo, self.nodes = echo, []

    def start(self, window_id, nodes):
        self.nodes = nodes

    def stop(self):
        return TracerResult({n: self.echo for n in self.nodes}, 0, 0, 0, [])


@register_tracer("tick", FIELDS, NullOptions)
def _make(cfg, sentinel):
    return NullTracer(cfg.tracer_null_echo)
"""

FAULT = """


class NoopOptions(Config):
    noop_marker: int


NOOP_FIELDS = (Field("noop_marker", int, 3, "noop: what it reports", min=0, max=9),)


@register("noop", NOOP_FIELDS, NoopOptions, {"noop_marker": "marker"})
class Noop(_Scheduled):
    name = "noop"

    def __init__(self, at_s: float, marker: int = 0, **_: Any):
        super().__init__(at_s)
        self.marker = marker

    def inject(self) -> dict[str, Any]:
        return {"noop": self.marker}
"""


def _table(doc: str) -> dict[str, set[str]]:
    """The doc's rows: 'to add' -> the files named in 'touch' (backquoted paths only)."""
    section = doc.split("## To add X, touch these files", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("to add", "---"):
            paths = re.findall(r"`((?:swarmscope|scenarios)/[^`]+)`", cells[1])
            rows[cells[0]] = {p.replace("<name>", NAME) for p in paths}
    return rows


def _copy_tree(dst: pathlib.Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            (dst / rel).write_bytes(src.read_bytes())


def _add(tree: pathlib.Path) -> set[str]:
    """Write the throw-away kind, tracer and fault; return the files written or changed."""
    touched = {
        f"swarmscope/kinds/{NAME}/__init__.py": KIND_PKG,
        f"scenarios/{NAME}.yaml": f"scenario: {NAME}\nticks: 5\n",
        f"scenarios/{NAME}.py": f'from swarmscope.app import plugin\n\nplugin.install("{NAME}")\n',
        f"swarmscope/controller/tracers/{NAME}.py": TRACER,
    }
    for rel, text in touched.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    reg = tree / "swarmscope/kinds/__init__.py"
    text = reg.read_text()
    anchor = '    "ebpf_cost": "swarmscope.kinds.ebpf_cost",\n'
    assert anchor in text
    reg.write_text(text.replace(anchor, anchor + f'    "{NAME}": "swarmscope.kinds.{NAME}",\n'))
    faults = tree / "swarmscope/targets/faults.py"
    faults.write_text(faults.read_text() + FAULT)
    return {*touched, "swarmscope/kinds/__init__.py", "swarmscope/targets/faults.py"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    dst = tmp_path_factory.mktemp("tree")
    _copy_tree(dst)
    touched = _add(dst)
    rows = _table((ROOT / "docs/architecture.md").read_text())
    listed = rows["a scenario kind"] | rows["its `locust -f` door"] | rows["a tracer under test"]
    listed |= rows["a fault injector"]
    assert touched == listed
    return dst


def _py(tree: pathlib.Path, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_the_table_names_the_files_added(tree: pathlib.Path) -> None:
    rows = _table((ROOT / "docs/architecture.md").read_text())
    assert rows["a scenario kind"] == {
        f"swarmscope/kinds/{NAME}/__init__.py",
        "swarmscope/kinds/__init__.py",
        f"scenarios/{NAME}.yaml",
    }
    assert rows["a tracer under test"] == {f"swarmscope/controller/tracers/{NAME}.py"}
    assert rows["a fault injector"] == {"swarmscope/targets/faults.py"}


@pytest.mark.slow
def test_registries_see_the_additions(tree: pathlib.Path) -> None:
    out = _py(
        tree,
        "import json\n"
        "from swarmscope.kinds import get_kind\n"
        "from swarmscope.controller.tracers.base import make_tracer, tracer_config\n"
        "from swarmscope.targets.faults import make_fault\n"
        "t = make_tracer(tracer_config(tracer='tick', tracer_null_echo=4))\n"
        "t.start('w', ['n1'])\n"
        "from swarmscope.targets.faults import fault_kwargs\n"
        "data = {'scenario': 'ingress_flood', 'noop_marker': 7}\n"
        "cfg = get_kind('ingress_flood').schema.load(data=data, env={})\n"
        "f = make_fault('noop', at_s=0, **fault_kwargs('noop', cfg))\n"
        "choices = get_kind('ingress_flood').schema.fields['fault'].choices\n"
        "print(json.dumps({'kind': get_kind('tick').name, 'reported': t.stop().per_node,\n"
        "                  'fault': f.inject(), 'in_choices': 'noop' in choices}))\n",
    )
    assert json.loads(out) == {
        "kind": "tick",
        "reported": {"n1": 4},
        "fault": {"noop": 7},
        "in_choices": True,
    }
    explain = subprocess.run(
        [sys.executable, "-m", "swarmscope", "run", f"scenarios/{NAME}.yaml", "--explain"],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
    )  # fmt: skip
    assert explain.returncode == 0, explain.stderr[-2000:]
    assert re.search(r"^ticks\s+= 5\s+\(scenarios/tick\.yaml:2;", explain.stdout, re.M), explain.stdout


def test_the_chart_tool_lists_the_new_kind(tree: pathlib.Path) -> None:
    out = _py(
        tree, "import sys; sys.path.insert(0, 'tools'); import chart_kinds as c; print(c.fields()[1].keys())"
    )
    assert f"'{NAME}'" in out


@pytest.mark.slow
@pytest.mark.root
def test_the_kind_runs_end_to_end(tree: pathlib.Path, tmp_path: pathlib.Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "swarmscope", "run", f"scenarios/{NAME}.yaml", "--out", str(tmp_path)],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    runs = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert len(runs) == 1, r.stderr[-3000:]
    report = json.loads((runs[0] / "report.json").read_text())
    assert (report["scenario"], report["status"]) == (NAME, "ok"), r.stderr[-3000:]
    [window] = report["points"][0]["iterations"]
    assert [(n["node"], n["generated"], n["kernel"]) for n in window["per_node"]] == [("t0", 5, 5)]
