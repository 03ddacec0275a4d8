"""Statements of the documents that went stale (issue 42, item 8), held to what exists. The image size is
measured in tests/containers/test_image.py, which builds the image."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_names_the_power_and_clock_faults_the_chaos_runner_has():
    readme = (REPO / "README.md").read_text()
    assert "Not yet: clock and power-loss nemeses" not in readme
    assert "`--faults\n  power,clock`" in readme or "--faults power,clock" in readme.replace("\n  ", " ")
    chaos = (REPO / "deploy" / "chaos" / "README.md").read_text()
    faults = set(re.findall(r"^\| `(\w+)` \|", chaos, re.MULTILINE))
    assert {"power", "clock"} <= faults, faults


def test_kustomize_edit_says_it_needs_the_standalone_binary():
    text = (REPO / "deploy" / "k8s" / "README.md").read_text()
    for line_no, line in enumerate(text.splitlines()):
        if "kustomize edit" in line and not line.lstrip().startswith("#"):
            before = "\n".join(text.splitlines()[max(0, line_no - 3):line_no])
            assert "standalone kustomize binary" in before, line


def test_build_sh_says_what_it_leaves_behind_and_can_prune_it():
    script = (REPO / "deploy" / "image" / "build.sh").read_text()
    assert "--prune-build-stage" in script and "label=dev.kanal.stage=build" in script
    dockerfile = (REPO / "deploy" / "image" / "Dockerfile").read_text()
    build_stage = dockerfile.split("FROM python:3.11-slim AS build\n", 1)[1].split("\nFROM ", 1)[0]
    assert "LABEL dev.kanal.stage=build" in build_stage
