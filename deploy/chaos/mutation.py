"""Mutants: a copy of the broker package with one deliberate bug, for the mutation check (a chaos run must
find the loss the bug causes). Nothing in kanal's own code changes and no switch in it can turn a bug on:
the run copies `kanal.broker` into a temporary directory, edits the copy (each edit must match exactly
once, so a mutation that no longer applies fails loudly instead of testing nothing) and starts its
brokers with `python -m kanal.deploy.chaos.mutant_main DIR broker ...`, which points the package
`kanal.broker` at the copy before anything of it is imported.

| mutation | the bug |
|---|---|
| `acks-all-as-1` | the leader answers an acks=all produce as acks=1: at once, without waiting for the ISR and without checking min.insync.replicas |
| `no-follower-truncation` | the follower's divergence truncation switched off: the follower takes its log for a prefix of the leader's. It fetches without naming the epoch of its last batch (so the leader never reports a divergence), never truncates when told of one, skips fetched batches that start below its log end (it "has" them), and only cuts a log longer than the leader's to the leader's length when a fetch is out of range (else it could never fetch again). A deposed leader thus keeps its unacknowledged tail and goes on appending the new leader's records after it, as a replica without KIP-101 truncation would |

Each mutation comes with the fault schedule that shows its loss (`MUTATION_RUNS`; tests/cluster/test_chaos.py):
`acks-all-as-1` loses what a leader cut from every other node acknowledged alone; `no-follower-truncation` needs
a leader deposed with a tail of records no one else has (it rejoins the ISR without dropping them) and then
a leader change that makes such a replica the leader: its tail replaces records the deposed leader's
successor acknowledged at the same offsets (lost, divergent).
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import kanal.broker

# name -> [(file in the broker package, text, replacement)]
MUTATIONS: dict[str, list[tuple[str, str, str]]] = {
    "acks-all-as-1": [
        ("replica_manager.py",
         "list(data.batches), request.acks, now_ms, out, timeout_ms=timeout_ms,",
         ("list(data.batches), 1 if request.acks == ACKS_ALL else request.acks, now_ms, out, "
         "timeout_ms=timeout_ms,")),
        ("replica_manager.py",
         "on_replicated=wait.answered if request.acks == ACKS_ALL else None,",
         "on_replicated=None,"),
    ],
    "no-follower-truncation": [
        ("partition.py",
         ("self.log.truncate_to(\n"
          "                    step.truncate_to, high_watermark=min(self.high_watermark, step.truncate_to)\n"
          "                )"),
         "pass  # mutant: keeps its log"),
        ("partition.py",
         "return self.log.log_end_offset, self.leader_epoch, -1 if latest is None else latest",
         "return self.log.log_end_offset, self.leader_epoch, -1  # mutant: never names its last epoch"),
        ("partition.py",
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
        ("storage/log.py",
         "                if suffix.base_offset < expected_min:\n",
         ("                if suffix.base_offset < self.log_end_offset:\n"
          "                    continue  # mutant: what it holds below its log end must be "
          "the leader's\n"
          "                if suffix.base_offset < expected_min:\n")),
    ],
}


@dataclass
class Mutant:
    name: str
    directory: Path  # holds `broker/`, the mutated copy

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "kanal.deploy.chaos.mutant_main", str(self.directory / "broker")]

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def make_mutant(name: str) -> Mutant:
    if name not in MUTATIONS:
        raise ValueError(f"unknown mutation {name!r}; known: {', '.join(MUTATIONS)}")
    directory = Path(tempfile.mkdtemp(prefix=f"kanal-mutant-{name}-"))
    try:
        source = Path(kanal.broker.__file__).parent
        shutil.copytree(source, directory / "broker", ignore=shutil.ignore_patterns("__pycache__"))
        for file, text, replacement in MUTATIONS[name]:
            path = directory / "broker" / file
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
