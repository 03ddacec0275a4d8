"""`kanal chaos --target containers`: the image (one container per node, each sharing the network namespace
of a sandbox container wired into the chaos network; needs root and a Docker engine) under a small fixed
set of seeds: every run passes the checker, and nothing of it is left behind (containers by label, the
network's namespaces and links by name)."""

from __future__ import annotations

import os
import subprocess

import pytest

from kanal.deploy.chaos import netns
from kanal.deploy.chaos.runner import RunOptions, run_once
from kanal.deploy.chaos.target import RUN_LABEL

pytestmark = pytest.mark.containers


# One 45 s schedule with every nemesis the containers target has, five faults (`kanal chaos schedule
# --faults kill,pause,partition,power,clock --duration 45s --seed 111`): a broker isolated, a controller
# paused (docker pause), the power of every controller cut at once, a broker's clock stepped forward, a
# broker killed (docker kill). The dev target's seed (tests/cluster/test_chaos.py) holds variants this one
# does not (every broker down, a leader alone, a full disk, a clock stepped back); the network faults are the
# same code on both targets.
@pytest.mark.parametrize(("seed", "faults"), [(111, ("kill", "pause", "partition", "power", "clock"))])
def test_fixed_seeds_pass_the_checker_on_containers(docker_image, tmp_path, seed, faults):
    reason = netns.available()
    if reason is not None:
        pytest.fail(f"kanal chaos --target containers needs network namespaces: {reason}")
    result = run_once(RunOptions(target="containers", overlap=False,
                                 image=docker_image, faults=faults, duration_s=45,
                                 seed=seed, history_path=tmp_path / "history.jsonl"))
    print(result.table())
    assert result.ok, result.table()
    assert result.report.acknowledged > 0 and result.report.unchecked == []
    assert len(result.injected) == 5
    run = f"kanal-chaos-{os.getpid()}"
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={RUN_LABEL}={run}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert left == []
    assert netns.leftovers(os.getpid()) == []
    assert (tmp_path / "history.logs" / "broker-0.log").stat().st_size > 0
