"""Mutants: a copy of the broker package with one deliberate bug, for the mutation check (a chaos run must
find the loss the bug causes). Nothing in kanal's own code changes and no switch in it can turn a bug on:
the run copies `kanal.broker` into a temporary directory, edits the copy (each edit must match exactly
once, so a mutation that no longer applies fails loudly instead of testing nothing) and starts its
brokers with `python -m kanal.deploy.chaos.mutant_main DIR broker ...`, which points the package
`kanal.broker` at the copy before anything of it is imported.

| mutation | the bug |
|---|---|
| `acks-all-as-1` | the leader answers an acks=all produce as acks=1: at once, without waiting for the ISR and without checking min.insync.replicas |
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
         "on_replicated=wait.answered if request.acks == ACKS_ALL else None)",
         "on_replicated=None)"),
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
                raise RuntimeError(f"mutation {name}: {file} holds {code.count(text)} copies of {text!r}, not 1")
            path.write_text(code.replace(text, replacement))
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return Mutant(name, directory)
