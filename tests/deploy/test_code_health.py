"""Strict checks that run with the suite (so in `.ci/run`): the layering rule of docs/architecture.md and its
rule of no cycles between sibling modules, held by import-linter's contracts in pyproject.toml; and that
the schema checks tests/strict_checks.py runs (buf lint, buf breaking) fail when they should."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tree))
    script = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(script), "--no-cache", str(REPO / "pyproject.toml")], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_layering_contracts_hold(package_tree):
    root, origin = package_tree
    assert len(origin) > 150  # every package was found
    result = lint_imports(root)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_a_server_importing_a_client_breaks_a_contract(package_tree):
    """The check can fail: the same contracts, one forbidden import added to the copy."""
    root, _ = package_tree
    with open(root / "kanal/raft/raft_node.py", "a") as f:
        f.write("\nfrom kanal.clients import producer  # noqa\n")
    result = lint_imports(root)
    assert result.returncode != 0
    assert "raft imports metadata, broker.storage and the shared packages only BROKEN" in result.stdout


def test_a_cycle_between_sibling_modules_breaks_the_acyclic_contract(package_tree):
    """The acyclic check can fail: the copy's partition imports the replica manager back, under
    TYPE_CHECKING (which counts), and the layer contracts, which a sibling import never breaks, stay kept."""
    root, _ = package_tree
    with open(root / "kanal/broker/partition.py", "a") as f:
        f.write("\nimport typing\n\nif typing.TYPE_CHECKING:\n"
                "    from kanal.broker.replica_manager import ReplicaManager  # noqa\n")
    result = lint_imports(root)
    assert result.returncode != 0
    assert "no import cycles between sibling modules or packages anywhere in kanal BROKEN" in result.stdout
    assert "No cycles are allowed in kanal.broker." in result.stdout
    assert "Contracts: 11 kept, 1 broken." in result.stdout, result.stdout[-3000:]


def _buf(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    buf = Path(sys.executable).with_name("buf")
    return subprocess.run(
        [str(buf), *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def _schema_copy(tmp_path: Path) -> Path:
    """The checkout's buf.yaml and proto/ in a directory of their own, to break without touching the tree."""
    copy = tmp_path / "schema"
    shutil.copytree(
        REPO / "proto", copy / "proto", ignore=shutil.ignore_patterns("*.py", "*.pyi", "*.c", "*.json")
    )
    shutil.copy2(REPO / "buf.yaml", copy / "buf.yaml")
    return copy


def test_buf_breaking_refuses_a_renumbered_field(tmp_path):
    """tests/strict_checks.py's buf breaking can fail: the same schema with one field renumbered."""
    copy = _schema_copy(tmp_path)
    assert _buf("breaking", "proto", "--against", str(REPO / "proto"), cwd=copy).returncode == 0
    broker = copy / "proto" / "kanal" / "v1" / "broker.proto"
    text = broker.read_text()
    changed = re.sub(r"int32 partition = (\d+);", "int32 partition = 99;", text, count=1)
    assert changed != text
    broker.write_text(changed)
    result = _buf("breaking", "proto", "--against", str(REPO / "proto"), cwd=copy)
    assert result.returncode != 0 and 'field "1" with name "partition"' in result.stdout, result.stdout


def test_buf_lint_refuses_what_buf_yaml_does_not_excuse(tmp_path):
    copy = _schema_copy(tmp_path)
    assert _buf("lint", cwd=copy).returncode == 0
    with open(copy / "proto" / "kanal" / "v1" / "errors.proto", "a") as f:
        f.write("\nmessage bad_name {}\n")
    result = _buf("lint", cwd=copy)
    assert result.returncode != 0 and "bad_name" in result.stdout, result.stdout
