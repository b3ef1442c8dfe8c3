"""The generated swarmscope.v1 modules match proto/ (regenerate with `make proto`)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_generated_modules_are_fresh(tmp_path: pathlib.Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "tools" / "genproto.py"), "--out", str(tmp_path)], check=True)
    fresh = sorted((tmp_path / "swarmscope" / "v1").glob("*_pb2*.py*"))
    assert fresh, "protoc generated nothing"
    for f in fresh:
        committed = ROOT / "swarmscope" / "v1" / f.name
        assert committed.exists(), f"{committed} missing: run `make proto`"
        assert committed.read_text() == f.read_text(), f"{committed.name} is stale: run `make proto`"


def test_importable_as_swarmscope_v1() -> None:
    from swarmscope.v1 import probe_pb2, probe_pb2_grpc

    msg = probe_pb2.Command(seq=1, open=probe_pb2.OpenWindow(run_id="r", window_id="w"))
    assert msg.WhichOneof("kind") == "open"
    assert hasattr(probe_pb2_grpc, "ProbeControlServicer")
