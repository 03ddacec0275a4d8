"""Strict checks that run with the suite (so in `.ci/run`): the layering rule of docs/architecture.md,
held by import-linter's contracts in pyproject.toml."""

from __future__ import annotations

import os
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
    with open(root / "kanal/raft/fatal.py", "a") as f:
        f.write("\nfrom kanal.clients import producer  # noqa\n")
    result = lint_imports(root)
    assert result.returncode != 0
    assert "raft imports metadata, kanal.v1 and broker.storage only BROKEN" in result.stdout
