"""Generate the gRPC code from proto/ with the pinned grpcio-tools and mypy-protobuf.

``python -m muster.api.codegen [OUT]`` writes ``muster/api/v1/muster_pb2*.py{,i}`` under
OUT (default: libs/, next to this package). The output depends only on the .proto and
the pinned tool versions, so two runs give the same bytes (a test checks it).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTO_ROOT = ROOT / "proto"
PROTOS = ("muster/api/v1/muster.proto",)
GENERATED = ("muster_pb2.py", "muster_pb2.pyi", "muster_pb2_grpc.py", "muster_pb2_grpc.pyi")


def generate(out: Path) -> list[Path]:
    import grpc_tools
    from grpc_tools import protoc

    includes = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto
    (out / "muster" / "api" / "v1").mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent  # the venv's protoc-gen-mypy plugins
    args = [
        "grpc_tools.protoc",
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"-I{PROTO_ROOT}",
        f"-I{includes}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *(str(PROTO_ROOT / p) for p in PROTOS),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")
    return [out / "muster" / "api" / "v1" / name for name in GENERATED]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "libs"
    for path in generate(out):
        print(f"generated {path.relative_to(out)}")


if __name__ == "__main__":
    main()
