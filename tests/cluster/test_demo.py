"""The README's first command: `kanal demo` runs the main job end to end and says it kept every record."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster


def test_demo_keeps_every_acknowledged_record_through_a_leader_kill(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kanal.deploy.cli",
            "demo",
            "--records",
            "20000",
            "--data-dir",
            str(tmp_path / "demo"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "acknowledged 20,000, failed 0, lost 0, duplicates 0" in result.stdout
    assert "read twice: 0" in result.stdout and "its lag is now 0" in result.stdout
    assert "stopped every process" in result.stdout


def test_demo_output_json_is_the_verdict(tmp_path):
    """`kanal demo --output json`: the verdict and its counts as one JSON object on stdout, the progress on
    stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "kanal.deploy.cli", "demo", "--records", "2000", "--data-dir",
         str(tmp_path / "demo"), "--output", "json"],
        check=False, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["ok"] is True and verdict["records"] == verdict["acknowledged"] == 2000
    assert (verdict["failed"], verdict["lost"], verdict["duplicates"], verdict["read_twice"],
            verdict["group_lag"]) == (0, 0, 0, 0, 0)
    assert str(verdict["killed_broker"]) == str(verdict["leaders_before"]["0"])
    assert "stopped every process" in result.stderr
    # every broker served Kafka's protocol too (issue 43), and the demo said where
    kafka = verdict["kafka_bootstrap"].split(",")
    assert len(kafka) == 3 and f"kafka bootstrap: {verdict['kafka_bootstrap']}" in result.stderr
