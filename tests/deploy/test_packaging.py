"""The distribution: the sdist holds everything a build needs, a wheel built from it installs into a fresh
venv and works there, with the C extensions when a compiler is found and on the pure-Python paths when
none is (the build must not fail without one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NATIVE_MODULES = ("kanal/clients/_producer_fast", "kanal/clients/_consumer_fast", "kanal/broker/_batch_walk",
                  "kanal/spark/_record_columns", "kanal/spark/_metadata_columns")

# Runs inside the fresh venv, from an empty directory: the installed kanal end to end — a log written
# by the broker's storage, every batch checked by the produce-path validation, read back by `kanal
# dump-log`, and which paths (C or Python) each piece took.
SMOKE = r"""
import contextlib, io, json, sys, tempfile
from pathlib import Path
import kanal, kanal.clients.consumer as consumer, kanal.clients.producer_batch as producer
import kanal.broker.batch_validation as validation
from importlib import resources
from kanal.broker.dump_log import main as dump_log
from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.v1.batch import NewRecord, build_batch, scan_batch

assert Path(kanal.__file__).is_relative_to(sys.prefix), kanal.__file__  # the wheel's, not the repo's
directory = Path(tempfile.mkdtemp()) / "t-0"
log = Log.open(directory, LogConfig())
for i in range(3):
    raw = build_batch([NewRecord(value=b"v%d" % i, key=b"k", timestamp_ms=1000 + i)] * 2)
    validation.validate_produced_batch(raw, scan_batch(raw), 1 << 20)
    log.append(raw, leader_epoch=1, now_ms=0)
log.close()
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = dump_log([str(directory), "--print-data", "--output", "json"])
records = [json.loads(line) for line in out.getvalue().splitlines() if '"record"' in line]
files = {p.name for p in resources.files("kanal.v1").iterdir()}
files |= {p.name for p in resources.files("kanal").iterdir()}
print(json.dumps({"dump_exit": code, "values": [r["value"] for r in records],
                  "native": [producer.NATIVE, consumer.NATIVE, validation.NATIVE],
                  "has": sorted(f for f in files if f.endswith((".proto", ".json", ".pyi", "py.typed")))}))
"""


def run(args: list, *, cwd: Path, env: dict | None = None, timeout_s: float = 600) -> str:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout_s, check=False)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """sdist; a wheel built from it with the compiler; one built from it with no compiler at all."""
    root = tmp_path_factory.mktemp("packaging")
    source = (
        root / "source"
    )  # the checkout's files (tracked and new, not ignored): the build writes no file here
    listed = run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO)
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = root / "dist"
    run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir", out, source], cwd=root)
    sdist = next(out.glob("kanal-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        tar.extractall(root / "unpacked", filter="data")
    unpacked = next((root / "unpacked").iterdir())
    run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", out / "native", unpacked],
        cwd=root)
    shutil.rmtree(unpacked / "build", ignore_errors=True)
    # No compiler: `false` stands in for cc, so every optional extension fails to build and is left out.
    run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", out / "pure", unpacked],
        cwd=root, env=clean_env(CC="false", LDSHARED="false"))
    return {
        "sdist": sdist,
        "native": next((out / "native").glob("*.whl")),
        "pure": next((out / "pure").glob("*.whl")),
    }


def test_the_sdist_holds_sources_headers_protos_and_license(dists):
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("LICENSE", "README.md", "pyproject.toml", "setup.py", "clients/_producer_fast.c",
                   "clients/_producer_records.c", "clients/_producer_records.h", "clients/_consumer_fast.c",
                   "clients/_kanal_errors.h", "broker/_batch_walk.c", "spark/_record_columns.c",
                   "spark/_metadata_columns.c", "spark/_arrow_buffers.h",
                   "proto/kanal/v1/records.proto",
                   "proto/kanal/v1/crc_vectors.json", "deploy/_kanal/py.typed"):
        assert needed in names, needed


def test_the_wheels_differ_only_in_the_c_extensions(dists):
    native = set(zipfile.ZipFile(dists["native"]).namelist())
    pure = set(zipfile.ZipFile(dists["pure"]).namelist())
    for module in NATIVE_MODULES:
        assert any(n.startswith(module) and n.endswith(".so") for n in native), module
    assert not any(n.endswith(".so") for n in pure)
    code = {n for n in native if not n.endswith(".so") and ".dist-info/" not in n}
    assert code == {n for n in pure if ".dist-info/" not in n}
    assert "kanal/py.typed" in code and any(n.endswith("LICENSE") for n in native)


def test_both_wheels_install_into_a_fresh_venv_and_work(dists, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", dists["native"]], cwd=tmp_path, env=clean_env())
    import json

    native = json.loads(run([python, "-c", SMOKE], cwd=tmp_path, env=clean_env()))
    assert native["dump_exit"] == 0 and native["values"] == ["v0", "v0", "v1", "v1", "v2", "v2"]
    assert native["native"] == [True, True, True]
    assert (
        "records.proto" in native["has"]
        and "crc_vectors.json" in native["has"]
        and "py.typed" in native["has"]
    )
    assert "usage: kanal" in run([venv / "bin" / "kanal", "--help"], cwd=tmp_path, env=clean_env())

    run([python, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", dists["pure"]], cwd=tmp_path,
        env=clean_env())
    pure = json.loads(run([python, "-c", SMOKE], cwd=tmp_path, env=clean_env()))
    assert pure["native"] == [False, False, False]
    assert pure["values"] == native["values"] and pure["has"] == native["has"]
