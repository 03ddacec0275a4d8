"""The committed kanal.v1 stubs must be exactly what `python proto/generate.py` produces today."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "proto" / "kanal" / "v1"


def _load_generator():
    spec = importlib.util.spec_from_file_location("kanal_proto_generate", REPO / "proto" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_committed_stubs_match_the_proto_files(tmp_path):
    generate = _load_generator()
    generate.generate(tmp_path)
    fresh = {p.name: p.read_bytes() for p in (tmp_path / "kanal" / "v1").iterdir()}
    committed = {p.name: p.read_bytes() for p in PACKAGE.iterdir() if "_pb2" in p.name}
    assert fresh, "the generator produced nothing"
    stale = sorted(name for name in fresh if committed.get(name) != fresh[name])
    extra = sorted(set(committed) - set(fresh))
    assert not stale and not extra, (
        f"stubs are stale ({stale}) or left over ({extra}): run `python proto/generate.py` and commit"
    )


def test_every_proto_has_stubs():
    for proto in PACKAGE.glob("*.proto"):
        assert (PACKAGE / f"{proto.stem}_pb2.py").exists(), proto.name
