"""The fault schedule of a chaos run: a pure function of the seed and the options, so the same seed and
options give the same faults at the same times (the nodes they hit are named by role and resolved when
the fault starts: "the leader of chaos-0 partition 1" is whoever leads it then).

A run is: `warmup_s` of quiet, then faults one at a time, each held for a random 3-8 s and followed by
2-5 s healed, until `cooldown_s` before the end, when everything is healed and the cluster may recover
before the final read. One fault at a time keeps every step undoable on its own and a history readable.

Faults and their variants (`Fault.kind` / `Fault.variant`, target roles):

| kind | variants |
|---|---|
| `kill` | SIGKILL a `broker-N` or `controller-N`, restarted when the fault ends |
| `pause` | SIGSTOP a node, SIGCONT when the fault ends |
| `disk` | `full`: a broker's data filesystem (a small tmpfs of its own) filled to the last byte, emptied when the fault ends |
| `power` | `node`: one node's power cut (SIGKILL, then every write it did not fsync dropped: its data directory is a power-loss filesystem), started again when the fault ends; `controllers`: every controller's power cut at once |
| `clock` | `forward` / `back`: a broker's wall clock stepped by `step_s` (`CLOCK_STEP_S`, either way) and the broker restarted on it; stepped back and restarted on the true clock when the fault ends |
| `partition` | `isolate` (one node cut from everyone), `controller-split` (one controller alone, the others a majority; brokers stay with the majority), `zombie-leader` (the leader of a partition cut from every controller, not from clients or brokers), `leader-alone` (the leader of a partition cut from every other node, not from its clients: it may go on taking writes no one else sees), `one-way` (packets from one node dropped at another), `flaky` (30 % of one node's packets dropped) |
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import random
from dataclasses import dataclass

FAULT_KINDS = ("kill", "pause", "partition", "disk", "power", "clock")
PARTITION_VARIANTS = ("isolate", "controller-split", "zombie-leader", "leader-alone", "one-way", "flaky")
HOLD_S = (3.0, 8.0)
HEALED_S = (2.0, 5.0)
# How far a clock fault steps a broker's wall clock: well past any heartbeat, session or lag bound, and
# below the hours-to-days bounds (producer-id expiry, retention) where a wrong clock is meant to act.
CLOCK_STEP_S = (10.0, 3600.0)


@dataclass(frozen=True)
class Fault:
    start_s: float
    end_s: float
    kind: str
    variant: str
    targets: tuple[str, ...]  # node names, or "leader:<topic>:<partition>"
    step_s: float = 0.0  # the clock fault's step of the wall clock (signed)

    def describe(self) -> str:
        step = f" step {self.step_s:+.0f}s" if self.step_s else ""
        return (
            f"{self.kind}/{self.variant} {','.join(self.targets)}{step} {self.start_s:.1f}-{self.end_s:.1f}s"
        )


@dataclass(frozen=True)
class ScheduleOptions:
    faults: tuple[str, ...]
    duration_s: float
    seed: int
    controllers: int = 3
    brokers: int = 3
    topic: str = "chaos"
    partitions: int = 3
    warmup_s: float = 3.0
    cooldown_s: float = 4.0

    def __post_init__(self) -> None:
        unknown = [f for f in self.faults if f not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown faults {unknown}; known: {', '.join(FAULT_KINDS)}")
        if self.duration_s < self.warmup_s + self.cooldown_s:
            raise ValueError(f"duration must be at least {self.warmup_s + self.cooldown_s:.0f}s")
        if self.controllers < 1 or self.brokers < 1:
            raise ValueError("a schedule needs at least one controller and one broker")


def schedule(options: ScheduleOptions) -> list[Fault]:
    # A string seed is hashed by SHA-512 (random.seed version 2): stable across runs and Python versions.
    rng = random.Random(
        f"kanal-chaos:{options.seed}:{','.join(sorted(options.faults))}:{float(options.duration_s)}:"
        f"{options.controllers}:{options.brokers}"
    )
    out: list[Fault] = []
    if not options.faults:
        return out
    kinds = sorted(options.faults)
    t = options.warmup_s
    last = options.duration_s - options.cooldown_s
    while True:
        hold = round(rng.uniform(*HOLD_S), 3)
        if t + hold > last:
            return out
        kind = rng.choice(kinds)
        variant, targets = _pick(rng, kind, options)
        step = 0.0
        if kind == "clock":
            step = round(rng.uniform(*CLOCK_STEP_S), 3) * (1 if variant == "forward" else -1)
        out.append(Fault(round(t, 3), round(t + hold, 3), kind, variant, targets, step))
        t += hold + round(rng.uniform(*HEALED_S), 3)


def _pick(rng: random.Random, kind: str, options: ScheduleOptions) -> tuple[str, tuple[str, ...]]:
    controllers = [f"controller-{i}" for i in range(options.controllers)]
    brokers = [f"broker-{i}" for i in range(options.brokers)]
    nodes = controllers + brokers
    if kind in ("kill", "pause"):
        return "node", (rng.choice(nodes),)
    if kind == "disk":
        return "full", (rng.choice(brokers),)
    if kind == "power":
        if rng.random() < 0.5:
            return "controllers", tuple(controllers)
        return "node", (rng.choice(nodes),)
    if kind == "clock":
        return rng.choice(("forward", "back")), (rng.choice(brokers),)
    variant = rng.choice(PARTITION_VARIANTS)
    if variant in ("isolate", "flaky"):
        return variant, (rng.choice(nodes),)
    if variant == "controller-split":
        return variant, (rng.choice(controllers),)
    if variant in ("zombie-leader", "leader-alone"):
        return variant, (f"leader:{options.topic}:{rng.randrange(options.partitions)}",)
    src, dst = rng.sample(nodes, 2)
    return variant, (src, dst)
