"""Reassignment plans as JSON, in kafka-reassign-partitions' format, and their checks against a cluster.

The file (what `kanal reassign generate|balance` write and `execute|verify|cancel --plan FILE` read):

    {"version": 1,
     "partitions": [{"topic": "orders", "partition": 0, "replicas": [4, 5, 6]}, ...]}

- `version` is 1 (the only version); `partitions` a list, possibly empty.
- Each entry: `topic` a string, `partition` an int >= 0, `replicas` a non-empty list of distinct broker
  ids (ints >= 0), preferred leader first. Kafka's optional `log_dirs` is accepted when every entry is
  "any" (kanal brokers have one data directory); other keys are refused, so a typo is not ignored.
- A partition appears at most once.

`parse_plan(text)` checks the shape and raises PlanFormatError naming the entry; `check_plan(plan,
partitions, brokers)` checks it against the cluster (unknown partitions, unknown brokers) and returns
every problem, so the CLI refuses a plan before sending anything. The controller checks the same again
when the plan is executed (kanal.metadata.reassignment): the cluster may have changed in between.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

PLAN_VERSION = 1
_ENTRY_KEYS = {"topic", "partition", "replicas", "log_dirs"}


class PlanFormatError(ValueError):
    """A plan file that is not a valid reassignment plan (said in one line)."""


@dataclass(frozen=True, slots=True)
class PlannedPartition:
    """One partition's target replicas, preferred leader first."""

    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_plan(text: str) -> list[PlannedPartition]:
    """The entries of a plan file's text; PlanFormatError for anything that is not a valid plan."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFormatError(f"the plan is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PlanFormatError("the plan must be a JSON object with 'version' and 'partitions'")
    unknown = set(doc) - {"version", "partitions"}
    if unknown:
        raise PlanFormatError(f"unknown key(s) in the plan: {', '.join(sorted(unknown))}")
    if doc.get("version") != PLAN_VERSION:
        raise PlanFormatError(f"plan version must be {PLAN_VERSION}, got {doc.get('version')!r}")
    entries = doc.get("partitions")
    if not isinstance(entries, list):
        raise PlanFormatError("'partitions' must be a list")
    out: list[PlannedPartition] = []
    seen: set[tuple[str, int]] = set()
    for i, entry in enumerate(entries):
        planned = _parse_entry(i, entry)
        if planned.key in seen:
            raise PlanFormatError(
                f"partitions[{i}]: {planned.topic}-{planned.partition} appears more than once"
            )
        seen.add(planned.key)
        out.append(planned)
    return out


def _parse_entry(i: int, entry: object) -> PlannedPartition:
    where = f"partitions[{i}]"
    if not isinstance(entry, dict):
        raise PlanFormatError(f"{where} must be an object with topic, partition and replicas")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise PlanFormatError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
    if not isinstance(topic, str) or not topic:
        raise PlanFormatError(f"{where}: 'topic' must be a non-empty string")
    if not _is_int(partition) or partition < 0:
        raise PlanFormatError(f"{where}: 'partition' must be an integer >= 0, got {partition!r}")
    where = f"{where} ({topic}-{partition})"
    if not isinstance(replicas, list) or not replicas:
        raise PlanFormatError(f"{where}: 'replicas' must be a non-empty list of broker ids")
    if not all(_is_int(b) and b >= 0 for b in replicas):
        raise PlanFormatError(f"{where}: replicas must be broker ids (integers >= 0), got {replicas!r}")
    duplicates = sorted({b for b in replicas if replicas.count(b) > 1})
    if duplicates:
        raise PlanFormatError(f"{where}: duplicate replica(s) {duplicates} in {replicas}")
    log_dirs = entry.get("log_dirs")
    if log_dirs is not None and (not isinstance(log_dirs, list) or any(d != "any" for d in log_dirs)
                                 or len(log_dirs) != len(replicas)):
        raise PlanFormatError(
            f"{where}: 'log_dirs' may only list \"any\" once per replica (kanal brokers have "
            "one data directory)"
        )
    return PlannedPartition(topic, partition, tuple(replicas))


def format_plan(assignment: Mapping[tuple[str, int], Sequence[int]]) -> str:
    """A plan file's text for `assignment`, partitions sorted, one entry per line."""
    lines = [
        json.dumps({"topic": topic, "partition": partition, "replicas": list(replicas)})
        for (topic, partition), replicas in sorted(assignment.items())
    ]
    body = ",\n  ".join(lines)
    return f'{{"version": {PLAN_VERSION}, "partitions": [\n  {body}\n]}}\n' if lines else \
        f'{{"version": {PLAN_VERSION}, "partitions": []}}\n'


def check_plan(plan: Sequence[PlannedPartition], partitions: Mapping[tuple[str, int], Sequence[int]],
               brokers: Sequence[int]) -> list[str]:
    """Problems of `plan` in a cluster with these partitions (key -> current replicas) and registered
    brokers, one line each; empty when the plan can be executed."""
    problems = []
    known = set(brokers)
    for planned in plan:
        name = f"{planned.topic}-{planned.partition}"
        if planned.key not in partitions:
            problems.append(f"{name}: no such partition")
        unknown = [b for b in planned.replicas if b not in known]
        if unknown:
            problems.append(f"{name}: unknown broker(s) {unknown} (registered: {sorted(known)})")
    return problems
