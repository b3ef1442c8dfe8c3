"""Regenerate the Python modules of proto/swarmscope/v1/*.proto into swarmscope/v1/.

    python tools/genproto.py            # write swarmscope/v1/*_pb2.py, *_pb2.pyi, *_pb2_grpc.py
    python tools/genproto.py --out DIR  # write them elsewhere (the staleness test does this)

The .proto files are the single source of truth; the generated files are committed so an
install needs no protoc, and tests/test_proto.py fails when they are stale.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from grpc_tools import protoc  # type: ignore[import-untyped]

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto"


def generate(out: pathlib.Path) -> list[pathlib.Path]:
    """Generate every proto under proto/ into ``out``; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(p.relative_to(PROTO)) for p in PROTO.rglob("*.proto"))
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {protos}")
    return sorted((out / "swarmscope" / "v1").glob("*_pb2*.py*"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=ROOT)
    ns = ap.parse_args()
    files = generate(ns.out)
    init = ns.out / "swarmscope" / "v1" / "__init__.py"
    if not init.exists():
        init.write_text('"""Generated gRPC modules of proto/swarmscope/v1 (tools/genproto.py)."""\n')
    print("\n".join(str(f) for f in files), file=sys.stderr)


if __name__ == "__main__":
    main()
