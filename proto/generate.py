"""Regenerate the Python stubs of the kanal.v1 contract: `python proto/generate.py`.

The stubs (`*_pb2.py`, `*_pb2.pyi`, `*_pb2_grpc.py`) are committed beside the `.proto` files so that an
install needs no code generator; `tests/proto/test_generated_stubs.py` regenerates them into a temporary
directory and fails when the committed copies are stale.

`--out DIR` writes the stubs under DIR instead of in place (the test uses it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PACKAGE_DIR = PROTO_ROOT / "kanal" / "v1"


def proto_files() -> list[Path]:
    """Every .proto of the contract, in a stable order."""
    return sorted(PACKAGE_DIR.glob("*.proto"))


def generate(out_root: Path) -> None:
    """Run protoc (from grpcio-tools) over every .proto, writing stubs under out_root/kanal/v1."""
    import importlib.resources

    from grpc_tools import protoc  # a build-time tool: imported here so the runtime never needs it

    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    (out_root / "kanal" / "v1").mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *[str(p.relative_to(PROTO_ROOT)) for p in proto_files()],
    ]
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PROTO_ROOT, help="root to write kanal/v1/ stubs under")
    args = parser.parse_args(argv)
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
