"""The fault schedule is a pure function of the seed and the options."""

from __future__ import annotations

import functools
import itertools
import json

import pytest

from kanal.deploy.chaos.cli import duration_s, main
from kanal.deploy.chaos.schedule import (
    CLOCK_STEP_S,
    FAULT_KINDS,
    PARTITION_VARIANTS,
    REMOTE_VARIANTS,
    ScheduleOptions,
    schedule,
)

# The schedules these tests pin were drawn before overlapping episodes (test_overlap below covers those).
OneAtATime = functools.partial(ScheduleOptions, overlap=False)

def test_same_seed_same_schedule_and_another_seed_another():
    options = OneAtATime(faults=FAULT_KINDS, duration_s=120, seed=7)
    assert schedule(options) == schedule(OneAtATime(faults=tuple(reversed(FAULT_KINDS)), duration_s=120,
                                                          seed=7))
    assert schedule(options) != schedule(OneAtATime(faults=FAULT_KINDS, duration_s=120, seed=8))


def test_a_known_seed_gives_a_known_schedule():
    # Pinned: a change here changes what every recorded seed means, so it must be deliberate.
    steps = schedule(OneAtATime(faults=("kill", "pause", "partition"), duration_s=25, seed=6))
    assert [f.describe() for f in steps] == [
        "kill/node broker-0 3.0-9.6s", "partition/zombie-leader leader:chaos:2 12.3-16.9s"]


def test_faults_come_one_at_a_time_inside_the_run_and_only_of_the_kinds_asked():
    for seed in range(50):
        options = OneAtATime(faults=("pause", "partition"), duration_s=90, seed=seed)
        steps = schedule(options)
        assert steps, seed
        assert steps[0].start_s == options.warmup_s
        assert all(a.end_s < b.start_s for a, b in itertools.pairwise(steps))
        assert steps[-1].end_s <= options.duration_s - options.cooldown_s
        assert {f.kind for f in steps} <= {"pause", "partition"}
        assert {f.variant for f in steps if f.kind == "partition"} <= set(PARTITION_VARIANTS)
    disk = schedule(OneAtATime(faults=("disk",), duration_s=90, seed=1))
    assert disk and all(f.variant == "full" and f.targets[0].startswith("broker-") for f in disk)


def test_every_partition_variant_is_reachable():
    seen = set()
    for seed in range(100):
        seen |= {
            f.variant for f in schedule(OneAtATime(faults=("partition",), duration_s=60, seed=seed))
        }
    assert seen == set(PARTITION_VARIANTS)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="unknown faults"):
        OneAtATime(faults=("meteor",), duration_s=60, seed=1)
    with pytest.raises(ValueError, match="duration"):
        OneAtATime(faults=("kill",), duration_s=5, seed=1)
    assert schedule(OneAtATime(faults=(), duration_s=60, seed=1)) == []


def test_durations_and_the_schedule_command(capsys):
    assert (duration_s("60s"), duration_s("2m"), duration_s("1500ms"), duration_s("30")) == (60, 120, 1.5, 30)
    assert main(["schedule", "--faults", "kill,pause,partition", "--duration", "25s", "--seed", "6",
            "--no-overlap"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "kill/node broker-0 3.0-9.6s", "partition/zombie-leader leader:chaos:2 12.3-16.9s"]
    argv = ["schedule", "--faults", "kill,pause,partition", "--duration", "25s", "--seed", "6",
            "--no-overlap"]
    assert main([*argv, "--output", "json"]) == 0
    steps = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(f["kind"], f["variant"], f["targets"], round(f["start_s"], 1)) for f in steps] == [
        ("kill", "node", ["broker-0"], 3.0), ("partition", "zombie-leader", ["leader:chaos:2"], 12.3)]
    with pytest.raises(SystemExit):
        main(["schedule", "--faults", "meteor"])


def test_power_and_clock_faults_aim_where_they_should():
    seen = set()
    for seed in range(60):
        for f in schedule(OneAtATime(faults=("power", "clock"), duration_s=60, seed=seed)):
            seen.add((f.kind, f.variant))
            if f.kind == "power" and f.variant == "controllers":
                assert f.targets == ("controller-0", "controller-1", "controller-2") and f.step_s == 0
            elif f.kind == "power":
                assert len(f.targets) == 1 and f.step_s == 0
            else:
                assert f.targets[0].startswith("broker-")
                assert CLOCK_STEP_S[0] <= abs(f.step_s) <= CLOCK_STEP_S[1]
                assert (f.step_s > 0) == (f.variant == "forward")
    assert seen == {("power", "node"), ("power", "controllers"), ("clock", "forward"), ("clock", "back")}
    # Pinned like the seed above: the fixed-seed tests of tests/cluster/test_chaos.py name what these give.
    assert [
        f.describe() for f in schedule(OneAtATime(faults=("power", "clock"), duration_s=25, seed=8))
    ] == [
        "power/controllers controller-0,controller-1,controller-2 3.0-10.0s",
        "clock/forward broker-0 step +2253s 12.5-16.2s",
    ]


def test_the_mutation_seeds_cut_two_leaders_alone():
    # tests/cluster/test_chaos.py's no-follower-truncation check relies on these schedules (9 partitions):
    # two leader-alone cuts each, long enough for the controller to elect other leaders.
    for seed in (46, 120, 83, 172):
        steps = schedule(OneAtATime(faults=("partition",), duration_s=25, seed=seed, partitions=9))
        assert [f.variant for f in steps] == ["leader-alone", "leader-alone"], seed
        assert all(f.end_s - f.start_s >= 4.5 for f in steps), seed


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--partitions", "0", "invalid 1-1000 int value: '0'"),
    ("--producers", "65", "invalid 1-64 int value: '65'"),
    ("--producers", "two", "invalid 1-64 int value: 'two'"),
    ("--runs", "0", "invalid 1-100000 int value: '0'"),  # no run checks nothing: it must not pass
])
def test_workload_sizes_out_of_range_are_refused_before_anything_starts(capsys, flag, value, message):
    with pytest.raises(SystemExit) as exited:
        main(["run", "--target", "dev", "--duration", "10s", flag, value])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_every_default_length_run_isolates_a_leader_takes_a_whole_isr_down_and_cuts_every_controller():
    for seed in range(200):
        options = ScheduleOptions(faults=("kill", "pause", "partition", "power"), duration_s=60, seed=seed)
        steps = schedule(options)
        assert any(f.kind == "partition" and f.variant in ("leader-alone", "zombie-leader")
                   for f in steps), seed
        # The fault that loses what a controller acknowledged without an fsync (metadata durability).
        assert any(f.kind == "power" and f.variant == "controllers"
                   and f.targets == ("controller-0", "controller-1", "controller-2") for f in steps), seed
        isr_down = [f for f in steps if f.variant == "isr-down"]
        assert len(isr_down) >= 3, seed
        # Every broker down at once: the last kill before the first restart, the stalest back first.
        first_three = sorted(isr_down, key=lambda f: f.start_s)[:3]
        assert {f.targets[0] for f in first_three} == {"broker-0", "broker-1", "broker-2"}
        assert max(f.start_s for f in first_three) < min(f.end_s for f in first_three)
        assert [f.end_s for f in first_three] == sorted(f.end_s for f in first_three)
        assert all(0 <= f.start_s and f.end_s <= 56 for f in steps)
        # Overlapping faults never hold two network faults at once (healing one heals every cut).
        network = sorted((f for f in steps if f.kind == "partition"), key=lambda f: f.start_s)
        assert all(a.end_s <= b.start_s for a, b in itertools.pairwise(network))


def test_overlapping_episodes_kill_a_second_replica_and_cut_a_controller_during_a_kill():
    steps = [f for seed in range(100)
             for f in schedule(ScheduleOptions(faults=("kill", "partition"), duration_s=120, seed=seed))]
    kills = [f for f in steps if f.kind == "kill" and f.variant == "node"]
    assert any(a.targets != b.targets and a.start_s < b.start_s < a.end_s for a in kills for b in kills)
    splits = [f for f in steps if f.variant == "controller-split"]
    assert any(k.start_s < s.start_s < k.end_s for k in kills for s in splits)


def test_the_chaos_run_names_the_debian_packages_it_misses_before_starting_anything():
    from pathlib import Path

    from kanal.deploy.chaos.cli import preflight

    def none_there(tool):
        return None

    message = preflight("dev", ("kill", "power"), which=none_there, fuse_device=Path("/no/such/fuse"))
    assert "ip, iptables, fusermount3, /dev/fuse" in message
    assert "iproute2 iptables fuse3" in message and "bootstrap.sh chaos" in message
    assert "fuse" not in preflight("dev", ("kill",), which=none_there)
    assert preflight("127.0.0.1:9092", ("kill",), which=none_there) is None
    assert preflight("dev", ("power",)) is None  # this machine has them all
    assert preflight("dev", ("remote",)) is None  # moto is a test dependency
    assert "--target dev" in preflight("containers", ("kill", "remote"))


def test_remote_storage_faults_aim_at_the_store_and_every_variant_is_drawn():
    seen = set()
    for seed in range(40):
        for f in schedule(OneAtATime(faults=("remote",), duration_s=60, seed=seed)):
            assert f.kind == "remote" and f.targets == ("remote-storage",) and f.step_s == 0
            seen.add(f.variant)
    assert seen == set(REMOTE_VARIANTS)
