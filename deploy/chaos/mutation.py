"""Mutants: a copy of kanal's server packages with one deliberate bug, for the mutation check (a chaos run
must find what the bug breaks). Nothing in kanal's own code changes and no switch in it can turn a bug on:
the run copies each package a mutation edits (`kanal.broker`, `kanal.raft`, `kanal.metadata`) into a
temporary directory, edits the copy (each edit must match exactly once, so a mutation that no longer
applies fails loudly instead of testing nothing) and starts every node with `python -m
kanal.deploy.chaos.mutant_main DIR ...`, which points each copied package at its copy before anything of it
is imported.

| mutation | class (issue 41) | the bug |
|---|---|---|
| `acks-all-as-1` | acks=all answered early | the leader answers an acks=all produce as acks=1: at once, without waiting for the ISR and without checking min.insync.replicas |
| `hw-to-log-end` | acks=all answered early | the leader advances the high-water mark to its own log end, not to the lowest in-sync log end |
| `no-idempotent-dedup` | idempotence | the producer-state duplicate check is off (a retried batch is appended again, not answered with its first offsets) and a sequence below the expected one is taken |
| `fetch-to-log-end` | reads | a consumer Fetch is served up to the leader's log end instead of the high-water mark |
| `unclean-election` | elections | the controller elects a live replica outside the ISR when no ISR member is live, whatever the topic's `unclean.leader.election.enable` |
| `raft-journal-no-fsync` | metadata durability | the Raft journal is never fsynced (as pysyncobj's own journal): a power cut of a majority can take back committed metadata |
| `no-follower-truncation` | replication | the follower's divergence truncation switched off: the follower takes its log for a prefix of the leader's. It fetches without naming the epoch of its last batch (so the leader never reports a divergence), never truncates when told of one, skips fetched batches that start below its log end (it "has" them), and only cuts a log longer than the leader's to the leader's length when a fetch is out of range (else it could never fetch again). A deposed leader thus keeps its unacknowledged tail and goes on appending the new leader's records after it, as a replica without KIP-101 truncation would |
| `stale-generation-commit` | groups | an offset commit from an older group generation is taken (generation fencing only refuses newer ones) |
| `abort-markers-ignored` | transactions | a read_committed Fetch names no aborted transactions, so consumers deliver aborted records |
| `compaction-keeps-older` | compaction | the cleaner keeps the first record of each key instead of the latest |

`MUTATION_CLASSES` maps each to its class. A mutant is caught when a run's check shows a violation.
`benchmarks/chaos_mutants.py` runs each over a list of seeds and prints the caught/missed table (the
workload's transactional producer and compacted topic are what the last two are caught by).
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# name -> [(file under the kanal package, text, replacement)]
MUTATIONS: dict[str, list[tuple[str, str, str]]] = {
    "acks-all-as-1": [
        ("broker/replica_manager.py",
         "batches, call.acks, now_ms, out, timeout_ms=timeout_ms,",
         "batches, 1 if call.acks == ACKS_ALL else call.acks, now_ms, out, timeout_ms=timeout_ms,"),
        ("broker/replica_manager.py",
         "on_replicated=wait.answered if call.acks == ACKS_ALL else None,",
         "on_replicated=None,"),
    ],
    "no-follower-truncation": [
        ("broker/partition.py",
         ("self.log.truncate_to(\n"
          "                    step.truncate_to, high_watermark=min(self.high_watermark, step.truncate_to)\n"
          "                )"),
         "pass  # mutant: keeps its log"),
        ("broker/partition.py",
         "return self.log.log_end_offset, self.leader_epoch, -1 if latest is None else latest",
         "return self.log.log_end_offset, self.leader_epoch, -1  # mutant: never names its last epoch"),
        ("broker/partition.py",
         ("                return 0\n            if p.error:\n                return 0\n"
          "            if p.diverging_epoch >= 0:"),
         ("                return 0\n"
          "            if p.error == ErrorCode.OFFSET_OUT_OF_RANGE and "
          "self.log.log_end_offset > p.log_end_offset:\n"
          "                self.log.truncate_to(p.log_end_offset, "
          "high_watermark=min(self.high_watermark, p.log_end_offset))  # mutant: length only\n"
          "                self.high_watermark = min(self.high_watermark, self.log.log_end_offset)\n"
          "                self.producers = self._replay_producer_state()\n"
          "                return 0\n"
          "            if p.error:\n                return 0\n            if p.diverging_epoch >= 0:")),
        ("broker/storage/log.py",
         "                if suffix.base_offset < expected_min:\n",
         ("                if suffix.base_offset < self.log_end_offset:\n"
          "                    continue  # mutant: what it holds below its log end must be "
          "the leader's\n"
          "                if suffix.base_offset < expected_min:\n")),
    ],
    "hw-to-log-end": [
        ("broker/leader_state.py",
         "            candidate = min(candidate, leo)\n",
         "            candidate = max(candidate, self._leo)  # mutant: the leader's own log end\n"),
    ],
    "no-idempotent-dedup": [
        ("broker/producer_state.py",
         "        if original is not None:\n            return Duplicate(",
         ("        if original is not None and False:  # mutant: no duplicate check\n"
          "            return Duplicate(")),
        ("broker/producer_state.py",
         "        if base_sequence != expected:\n",
         "        if base_sequence > expected:  # mutant: an older sequence is appended again\n"),
    ],
    "fetch-to-log-end": [
        ("broker/partition.py",
         "            limit = out.last_stable_offset if read_committed else self.high_watermark\n",
         ("            limit = out.last_stable_offset if read_committed else self.log.log_end_offset"
          "  # mutant\n")),
    ],
    "unclean-election": [
        ("metadata/election.py",
         "        elif unclean_allowed and unclean:\n",
         "        elif unclean:  # mutant: whatever the topic allows\n"),
    ],
    "raft-journal-no-fsync": [
        ("raft/raft_journal.py",
         "            else:\n                os.fdatasync(self._fd)\n",
         "            else:\n                pass  # mutant: never fsynced\n"),
    ],
    "stale-generation-commit": [
        ("broker/group.py",
         "        if generation_id != self.generation:\n",
         "        if generation_id > self.generation:  # mutant: an older generation may commit\n"),
    ],
    "abort-markers-ignored": [
        ("broker/partition.py",
         "                for aborted in self.transactions.aborted_between(preq.fetch_offset, limit):\n",
         "                for aborted in []:  # mutant: no aborted transactions named\n"),
    ],
    "compaction-keeps-older": [
        ("broker/storage/cleaner.py",
         "                    latest[record.key] = batch.base_offset + record.offset_delta\n",
         ("                    latest.setdefault(record.key, batch.base_offset + record.offset_delta)"
          "  # mutant\n")),
    ],
}
# The classes of bug each mutation stands for (the caught/missed table groups by them).
MUTATION_CLASSES: dict[str, str] = {
    "acks-all-as-1": "acks=all answered early",
    "hw-to-log-end": "acks=all answered early",
    "no-idempotent-dedup": "idempotence",
    "fetch-to-log-end": "reads",
    "unclean-election": "elections",
    "raft-journal-no-fsync": "metadata durability",
    "no-follower-truncation": "replication",
    "stale-generation-commit": "groups",
    "abort-markers-ignored": "transactions",
    "compaction-keeps-older": "compaction",
}


@dataclass
class Mutant:
    name: str
    directory: Path  # holds a copy of each package the mutation edits (`broker/`, `raft/`, `metadata/`)

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "kanal.deploy.chaos.mutant_main", str(self.directory)]

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def make_mutant(name: str) -> Mutant:
    """`name` is one mutation, or several joined by `+` (one cluster carrying bugs whose violations the
    checker tells apart, e.g. on different topics: the test tier's way to catch three in one run)."""
    parts = name.split("+")
    unknown = [part for part in parts if part not in MUTATIONS]
    if unknown:
        raise ValueError(f"unknown mutation {unknown[0]!r}; known: {', '.join(MUTATIONS)}")
    edits = [edit for part in parts for edit in MUTATIONS[part]]
    directory = Path(tempfile.mkdtemp(prefix=f"kanal-mutant-{parts[0]}-"))
    try:
        for package in sorted({file.split("/")[0] for file, _, _ in edits}):
            source = Path(str(importlib.import_module(f"kanal.{package}").__file__)).parent
            shutil.copytree(source, directory / package, ignore=shutil.ignore_patterns("__pycache__"))
        for file, text, replacement in edits:
            path = directory / file
            code = path.read_text()
            if code.count(text) != 1:
                raise RuntimeError(
                    f"mutation {name}: {file} holds {code.count(text)} copies of {text!r}, not 1"
                )
            path.write_text(code.replace(text, replacement))
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return Mutant(name, directory)
