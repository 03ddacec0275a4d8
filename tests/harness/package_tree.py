"""The `kanal` package laid out as a wheel installs it, built from the checkout into a directory.

pyproject.toml maps each top-level folder to a subpackage (`kanal.v1` = proto/kanal/v1, `kanal.raft` =
raft, ...), which an editable install resolves with an import hook. Tools that walk directories instead
of importing (grimp for import-linter; mypy) see only `deploy/_kanal` that way. They run on this tree:
every module (and stub) copied to `<root>/kanal/...` by the same mapping the build uses. `origin` maps a
path in the tree back to the checkout, for messages that name files.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def package_dirs(repo: Path = REPO) -> dict[str, Path]:
    """Subpackage name → its folder in the checkout, as pyproject.toml maps them."""
    config = tomllib.loads((repo / "pyproject.toml").read_text())
    return {name: repo / folder for name, folder in config["tool"]["setuptools"]["package-dir"].items()}


def build_package_tree(root: Path, repo: Path = REPO) -> dict[Path, Path]:
    """Copy every .py and .pyi of each mapped package to root/<package path>; returns tree path →
    checkout path."""
    origin: dict[Path, Path] = {}
    for name, folder in sorted(package_dirs(repo).items()):
        target = root.joinpath(*name.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted([*folder.glob("*.py"), *folder.glob("*.pyi"), *folder.glob("py.typed")]):
            shutil.copy2(source, target / source.name)
            origin[target / source.name] = source
    return origin
