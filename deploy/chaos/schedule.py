"""The fault schedule of a chaos run: a pure function of the seed and the options, so the same seed and
options give the same faults at the same times (the nodes they hit are named by role and resolved when
the fault starts: "the leader of chaos-0 partition 1" is whoever leads it then).

A run is: `warmup_s` of quiet, then episodes, each followed by 2-5 s healed, until `cooldown_s` before the
end, when everything is healed and the cluster may recover before the final read. An episode is one fault
held for a random 3-8 s, or (`ScheduleOptions.overlap`, on by default) faults that overlap:

| episode | faults | needs |
|---|---|---|
| `isr-down` | every broker killed one after another, 2-3 s apart (so each dies after the ISR dropped the one before: the last holds writes the first never saw), then started again in the order they died, the stalest first: every partition of RF = brokers loses its whole ISR, and only unclean election could bring the stale replica back as leader | `kill` |
| `second-replica` | a broker killed, and while it is down (or just back and catching up) another | `kill` |
| `controller-cut-during-kill` | a broker killed, and a controller split from the others while it is down | `kill`, `partition` |

The first episodes of every run are, in an order drawn from the seed, a fault that isolates a partition
leader from its followers (`partition/leader-alone` or `partition/zombie-leader`, when `partition` is asked
for), `isr-down` (when `kill` is) and a power cut of every controller at once (`power/controllers`, when
`power` is: the fault that loses metadata a controller acknowledged without an fsync), so every run of the
default length (60 s) holds all three; the rest are drawn: an overlapping episode with probability
`OVERLAP_PROBABILITY`, else one fault. Faults of one
episode never share a kind of undo that would heal another early (at most one network fault at a time).

Faults and their variants (`Fault.kind` / `Fault.variant`, target roles):

| kind | variants |
|---|---|
| `kill` | SIGKILL a `broker-N` or `controller-N`, restarted when the fault ends |
| `pause` | SIGSTOP a node, SIGCONT when the fault ends |
| `disk` | `full`: a broker's data filesystem (a small tmpfs of its own) filled to the last byte, emptied when the fault ends |
| `power` | `node`: one node's power cut (SIGKILL, then every write it did not fsync dropped: its data directory is a power-loss filesystem), started again when the fault ends; `controllers`: every controller's power cut at once |
| `clock` | `forward` / `back`: a broker's wall clock stepped by `step_s` (`CLOCK_STEP_S`, either way) and the broker restarted on it; stepped back and restarted on the true clock when the fault ends |
| `remote` | the run's tiered topic's remote storage (remote_store.py): `down` (the S3 server unreachable), `503` (every request answered 503), `kill-mid-upload` (a broker SIGKILLed in the middle of an upload, restarted when the fault ends) |
| `mirror` | the flow of the run's topic into a second cluster (mirror_link.py): `link` (the mirror cut from both clusters), `kill` (the mirror SIGKILLed, started again when the fault ends) |
| `partition` | `isolate` (one node cut from everyone), `controller-split` (one controller alone, the others a majority; brokers stay with the majority), `zombie-leader` (the leader of a partition cut from every controller, not from clients or brokers), `leader-alone` (the leader of a partition cut from every other node, not from its clients: it may go on taking writes no one else sees), `one-way` (packets from one node dropped at another), `flaky` (30 % of one node's packets dropped) |
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import random
from dataclasses import dataclass

FAULT_KINDS = ("kill", "pause", "partition", "disk", "power", "clock", "remote", "mirror")
REMOTE_VARIANTS = ("down", "503", "kill-mid-upload")  # remote_store.py carries them out
MIRROR_VARIANTS = ("link", "kill")  # mirror_link.py
PARTITION_VARIANTS = ("isolate", "controller-split", "zombie-leader", "leader-alone", "one-way", "flaky")
HOLD_S = (3.0, 8.0)
HEALED_S = (2.0, 5.0)
# How far a clock fault steps a broker's wall clock: well past any heartbeat, session or lag bound, and
# below the hours-to-days bounds (producer-id expiry, retention) where a wrong clock is meant to act.
CLOCK_STEP_S = (10.0, 3600.0)
OVERLAP_PROBABILITY = 0.35
ISR_DOWN_GAP_S = (2.5, 3.5)  # between two kills of `isr-down`: past the ISR's lag bound (2 s here)
LEADER_ISOLATING = ("leader-alone", "zombie-leader")


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
    overlap: bool = True  # overlapping episodes and the two forced first episodes (see the docstring)

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
    forced = []
    if options.overlap and "partition" in kinds:
        forced.append("leader-isolating")
    if options.overlap and "kill" in kinds and options.brokers >= 2:
        forced.append("isr-down")
    if options.overlap and "power" in kinds:
        forced.append("controllers-power")
    rng.shuffle(forced)
    while True:
        if forced:
            episode = forced[0]
        elif (options.overlap and "kill" in kinds and options.brokers >= 2
              and rng.random() < OVERLAP_PROBABILITY):
            episode = rng.choice(["isr-down", "second-replica"]
                                 + (["controller-cut-during-kill"] if "partition" in kinds else []))
        else:
            episode = "single"
        faults = _episode(rng, episode, t, kinds, options)
        end = max(f.end_s for f in faults)
        if end > last:
            return out
        if forced:
            forced.pop(0)
        out.extend(faults)
        t = end + round(rng.uniform(*HEALED_S), 3)


def _episode(rng: random.Random, episode: str, t: float, kinds: list[str],
             options: ScheduleOptions) -> list[Fault]:
    brokers = [f"broker-{i}" for i in range(options.brokers)]
    if episode in ("single", "leader-isolating", "controllers-power"):
        hold = round(rng.uniform(*HOLD_S), 3)
        if episode == "leader-isolating":
            kind, variant = "partition", rng.choice(LEADER_ISOLATING)
            targets: tuple[str, ...] = (f"leader:{options.topic}:{rng.randrange(options.partitions)}",)
        elif episode == "controllers-power":
            kind, variant = "power", "controllers"
            targets = tuple(f"controller-{i}" for i in range(options.controllers))
        else:
            kind = rng.choice(kinds)
            variant, targets = _pick(rng, kind, options)
        step = 0.0
        if kind == "clock":
            step = round(rng.uniform(*CLOCK_STEP_S), 3) * (1 if variant == "forward" else -1)
        return [Fault(round(t, 3), round(t + hold, 3), kind, variant, targets, step)]
    if episode == "isr-down":
        order = rng.sample(brokers, len(brokers))
        starts = [t]
        for _ in order[1:]:
            starts.append(starts[-1] + rng.uniform(*ISR_DOWN_GAP_S))
        down_s = rng.uniform(2.0, 4.0)  # every broker down for this long before the first comes back
        first_back = starts[-1] + down_s
        ends = [first_back + i * rng.uniform(2.0, 3.0) for i in range(len(order))]
        return [Fault(round(s, 3), round(e, 3), "kill", "isr-down", (b,))
                for b, s, e in zip(order, starts, ends, strict=True)]
    first, second = rng.sample(brokers, 2)
    hold = rng.uniform(*HOLD_S)
    later = t + rng.uniform(1.0, hold + 1.0)  # while the first is down, or just back and catching up
    if episode == "second-replica":
        return [Fault(round(t, 3), round(t + hold, 3), "kill", "node", (first,)),
                Fault(round(later, 3), round(later + rng.uniform(*HOLD_S), 3), "kill", "node", (second,))]
    controller = f"controller-{rng.randrange(options.controllers)}"
    return [Fault(round(t, 3), round(t + hold, 3), "kill", "node", (first,)),
            Fault(round(min(later, t + hold - 0.5), 3), round(t + hold + rng.uniform(0.5, 3.0), 3),
                  "partition", "controller-split", (controller,))]


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
    if kind == "remote":  # aimed at the store; kill-mid-upload's broker is whichever is caught uploading
        return rng.choice(REMOTE_VARIANTS), ("remote-storage",)
    if kind == "mirror":
        return rng.choice(MIRROR_VARIANTS), ("mirror",)
    variant = rng.choice(PARTITION_VARIANTS)
    if variant in ("isolate", "flaky"):
        return variant, (rng.choice(nodes),)
    if variant == "controller-split":
        return variant, (rng.choice(controllers),)
    if variant in ("zombie-leader", "leader-alone"):
        return variant, (f"leader:{options.topic}:{rng.randrange(options.partitions)}",)
    src, dst = rng.sample(nodes, 2)
    return variant, (src, dst)
