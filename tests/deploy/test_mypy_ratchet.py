"""tests/strict_checks.py's mypy side without running mypy: the strict modules' override must carry every
flag of --strict, and the ratchet fails on a higher count, passes a lower one, and records only counts that
did not rise, the same bytes for the same counts."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("strict_checks", REPO / "tests" / "strict_checks.py")
assert _spec is not None and _spec.loader is not None
sc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sc)

OUTPUT = """\
clients/cli.py:10: error: Function is missing a type annotation  [no-untyped-def]
clients/cli.py:20: error: Missing type arguments for generic type "dict"  [type-arg]
raft/raft_node.py:5: error: Returning Any from function declared to return "int"  [no-any-return]
Found 3 errors in 2 files (checked 9 source files)"""


def errors(by_file: dict[str, int]) -> object:
    return sc.StrictErrors(Counter(by_file), OUTPUT)


@pytest.fixture
def ratchet(tmp_path, monkeypatch):
    path = tmp_path / "mypy_strict_ratchet.json"
    monkeypatch.setattr(sc, "RATCHET", path)

    def measured(by_file: dict[str, int]) -> None:
        monkeypatch.setattr(sc, "strict_errors", lambda: errors(by_file))

    return path, measured


def test_the_checked_in_config_puts_the_strict_modules_under_every_flag_of_strict():
    assert sc.strict_config_gaps() == []


def test_an_override_missing_one_strict_flag_is_named(monkeypatch):
    config = sc.mypy_config()
    strict = next(o for o in config["overrides"] if o.get("disallow_untyped_defs"))
    del strict["warn_return_any"]
    monkeypatch.setattr(sc, "mypy_config", lambda: config)
    (gap,) = sc.strict_config_gaps()
    assert "kanal.metadata" in gap and "lacks warn_return_any = true" in gap


def test_errors_are_counted_per_package_from_the_checkout_paths():
    counted = sc.StrictErrors(Counter({"clients/cli.py": 2, "broker/storage/log.py": 1,
                                       "broker/service.py": 1, "proto/kanal/v1/batch.py": 1}), "")
    assert counted.by_package() == {"kanal.clients": 2, "kanal.broker.storage": 1, "kanal.broker": 1,
                                    "kanal.v1": 1}


def test_copy_paths_become_checkout_paths_whole(tmp_path):
    tree = sc.PackageTree(tmp_path, {tmp_path / "kanal/v1/x_pb2.py": REPO / "proto/kanal/v1/x_pb2.py",
                                     tmp_path / "kanal/v1/x_pb2.pyi": REPO / "proto/kanal/v1/x_pb2.pyi"})
    out = tree.checkout_paths("kanal/v1/x_pb2.pyi:3: error: a\nkanal/v1/x_pb2.py:4: note: kanal/v1/x_pb2.py")
    assert out == ("proto/kanal/v1/x_pb2.pyi:3: error: a\n"
                   "proto/kanal/v1/x_pb2.py:4: note: proto/kanal/v1/x_pb2.py")


def test_a_higher_count_fails_and_shows_the_errors_of_the_files_that_rose(ratchet):
    path, measured = ratchet
    measured({"clients/cli.py": 1, "raft/raft_node.py": 1})
    assert sc.update_ratchet() == 0
    measured({"clients/cli.py": 2, "raft/raft_node.py": 1})
    outcome = sc.check_mypy_ratchet()
    assert not outcome.ok and outcome.note.startswith("3 > 2")
    assert "kanal.clients: 1 -> 2" in outcome.output
    assert "clients/cli.py:20: error" in outcome.output and "raft_node" not in outcome.output
    assert sc.update_ratchet() == 1  # refused
    assert json.loads(path.read_text())["errors"] == 2


def test_a_lower_count_passes_says_how_to_record_it_and_records_the_same_bytes(ratchet):
    path, measured = ratchet
    measured({"clients/cli.py": 2, "raft/raft_node.py": 1})
    assert sc.update_ratchet() == 0
    measured({"clients/cli.py": 1})
    outcome = sc.check_mypy_ratchet()
    assert outcome.ok and "2 fewer than the 3 recorded" in outcome.note and "--update-ratchet" in outcome.note
    assert sc.update_ratchet() == 0
    first = path.read_bytes()
    assert json.loads(first)["by_package"] == {"kanal.clients": 1}
    assert sc.update_ratchet() == 0 and path.read_bytes() == first
    assert sc.check_mypy_ratchet().ok


def test_a_missing_ratchet_file_fails(ratchet):
    _, measured = ratchet
    measured({})
    outcome = sc.check_mypy_ratchet()
    assert not outcome.ok and "--update-ratchet" in outcome.output
