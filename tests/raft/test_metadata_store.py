"""MetadataStore: committed entries applied to the image and the metadata log, judged, exactly once."""

from __future__ import annotations

import threading

import pytest

from kanal.metadata import MetadataInvariantError, image_to_snapshot
from kanal.metadata.log_codec import iter_batches
from kanal.raft.command import ProposalId, Verdict, encode_entry
from kanal.raft.metadata_log import MetadataLogGapError, read_all
from kanal.raft.metadata_store import MetadataStore
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError


def _store(tmp_path, log_factory, name="m") -> MetadataStore:
    return MetadataStore(log_factory(tmp_path / name))


def test_chain_of_commands_is_applied_and_logged(tmp_path, log_factory, chain):
    store = _store(tmp_path, log_factory)
    commands = [chain.noop(1), chain.register(1, 1), chain.register(2, 1)]
    results = [store.apply(c) for c in commands]
    assert [r.verdict for r in results] == [Verdict.APPLY] * 3
    assert [r.end_offset for r in results] == [1, 2, 3]
    assert store.flush() == 3
    image, head = store.copy_image()
    assert image == chain.image
    assert head == chain.last
    assert len(read_all(store._log)) == 3  # one RecordBatch per command


def test_command_decided_on_a_stale_image_is_skipped_everywhere(tmp_path, log_factory, chain):
    store = _store(tmp_path, log_factory)
    store.apply(chain.noop(1))
    head = chain.last
    store.apply(chain.register(1, 1))
    # A second decision for the same parent (a deposed controller's, or one decided before a failure):
    stale = chain.command([chain.stamp(no_op=metadata_pb2.NoOpRecord())], 1, parent=head, mirror=False)
    result = store.apply(stale)
    assert result.verdict is Verdict.STALE_PARENT
    store.flush()
    assert store.durable_end_offset == 2
    assert store.copy_image()[0] == chain.image


def test_command_of_a_deposed_controller_is_skipped_after_a_newer_epoch(tmp_path, log_factory, chain):
    store = _store(tmp_path, log_factory)
    store.apply(chain.noop(1))
    old_head = chain.last
    store.apply(chain.noop(2))  # a new controller became active
    # The old controller's proposal names the right parent only if nothing else came in between;
    # here it names the current head, and its epoch alone fences it.
    late = chain.command([chain.stamp(no_op=metadata_pb2.NoOpRecord())], 1, mirror=False)
    assert store.apply(late).verdict is Verdict.STALE_EPOCH
    late_unconditional = chain.noop(1, mirror=False)
    assert store.apply(late_unconditional).verdict is Verdict.STALE_EPOCH
    assert old_head != chain.last
    assert store.flush() == 2


def test_replay_after_a_restart_applies_again_but_writes_nothing_twice(tmp_path, log_factory, chain):
    store = _store(tmp_path, log_factory)
    commands = [chain.noop(1), chain.register(1, 1), chain.register(2, 1), chain.noop(2)]
    for c in commands:
        store.apply(c)
    store.flush()
    store.close()
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").glob("*.log")}

    restarted = _store(tmp_path, log_factory)
    # Readers see nothing Raft has not confirmed in this run (issue 18): the replay publishes it.
    assert restarted.durable_end_offset == 0
    assert restarted.fetch(0, 1 << 20, 0).entries == b""
    for c in commands[:2]:  # pysyncobj replays part of its journal before the leader is known ...
        restarted.apply(c)
    assert restarted.flush() == 2
    assert restarted.durable_end_offset == 2
    for c in commands[2:]:  # ... and the rest later
        restarted.apply(c)
    extra = chain.register(3, 2)
    restarted.apply(extra)
    restarted.flush()
    assert restarted.copy_image()[0] == chain.image
    after = {p.name: p.read_bytes() for p in (tmp_path / "m").glob("*.log")}
    for name, data in before.items():
        assert after[name].startswith(data)
    assert [b.base_offset for b in read_all(restarted._log)] == [0, 1, 2, 3, 4]


def test_a_record_that_does_not_fit_is_a_broken_invariant_and_changes_nothing(tmp_path, log_factory, chain):
    store = _store(tmp_path, log_factory)
    store.apply(chain.noop(1))
    store.flush()
    bad = chain.command(
        [chain.stamp(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id="no-such-topic"))], 1, mirror=False
    )
    with pytest.raises(MetadataInvariantError):
        store.apply(bad)
    assert store.flush() == 1
    assert store.copy_image()[0] == chain.image


def test_snapshot_install_fetches_the_batches_the_log_is_missing(tmp_path, log_factory, chain):
    leader = _store(tmp_path, log_factory, "leader")
    commands = [chain.noop(1), chain.register(1, 1), chain.register(2, 1), chain.register(3, 1)]
    for c in commands:
        leader.apply(c)
    snapshot, head = leader.snapshot()
    assert snapshot == image_to_snapshot(chain.image)

    follower = _store(tmp_path, log_factory, "follower")
    follower.apply(commands[0])
    follower.flush()
    asked = []

    def fetch_missing(start, end):
        asked.append((start, end))
        return [b for b in read_all(leader._log) if start <= b.base_offset < end]

    follower.install(snapshot, head, fetch_missing)
    assert asked == [(1, 4)]
    assert follower.copy_image() == (chain.image, head)
    assert read_all(follower._log) == read_all(leader._log)
    # The chain goes on from the snapshot's head.
    next_command = chain.register(4, 1)
    assert follower.apply(next_command).verdict is Verdict.APPLY


def test_snapshot_install_without_the_missing_batches_stops(tmp_path, log_factory, chain):
    leader = _store(tmp_path, log_factory, "leader")
    for c in [chain.noop(1), chain.register(1, 1)]:
        leader.apply(c)
    snapshot, head = leader.snapshot()
    follower = _store(tmp_path, log_factory, "follower")
    with pytest.raises(MetadataLogGapError):
        follower.install(snapshot, head, lambda start, end: [])
    assert follower.copy_image()[1] == ProposalId.NONE


def test_fetch_serves_durable_entries_and_long_polls_for_new_ones(tmp_path, log_factory, chain):
    store = _store(tmp_path, log_factory)
    store.apply(chain.noop(1))
    empty = store.fetch(0, 1 << 20, 0)
    assert empty.entries == b"" and empty.end_offset == 0  # applied but not yet durable
    store.flush()
    first = store.fetch(0, 1 << 20, 0)
    assert first.end_offset == 1 and len(read_all(store._log)) == 1 and first.entries
    with pytest.raises(KanalError) as info:
        store.fetch(-1, 100, 0)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    ahead = store.fetch(50, 100, 0)  # a follower of a controller that is further along
    assert ahead.entries == b"" and ahead.end_offset == 1

    got = {}
    poller = threading.Thread(target=lambda: got.setdefault("r", store.fetch(1, 1 << 20, 30.0)))
    poller.start()
    store.apply(chain.register(1, 1))
    store.flush()
    poller.join(30)
    assert not poller.is_alive()
    assert got["r"].end_offset == 2 and got["r"].entries


# -- a metadata log ahead of the Raft history (issue 18, finding 1) --------------------------------


def _lost_history(tmp_path, log_factory, chain):
    """A store whose log holds 2 confirmed batches and 2 more from a Raft history that a power cut
    erased; returns (restarted store, the confirmed commands, a chain forked after them)."""
    import copy

    store = _store(tmp_path, log_factory)
    confirmed = [chain.noop(1), chain.register(1, 1)]
    fork = copy.deepcopy(chain)
    for c in [*confirmed, chain.register(2, 1), chain.register(3, 1)]:  # the last two: the lost history
        store.apply(c)
    store.flush()
    store.close()
    return _store(tmp_path, log_factory), confirmed, fork


def test_a_log_ahead_of_raft_is_repaired_when_raft_commits_another_batch_there(tmp_path, log_factory, chain):
    restarted, confirmed, fork = _lost_history(tmp_path, log_factory, chain)
    for c in confirmed:
        restarted.apply(c)
    assert restarted.flush() == 2
    # Served: only what Raft confirmed, never the lost tail (the log itself still ends at 4).
    assert restarted._log.log_end_offset == 4
    fetched = restarted.fetch(0, 1 << 20, 0)
    assert fetched.end_offset == 2 and [b.end_offset for b in iter_batches(fetched.entries)] == [1, 2]
    assert restarted.fetch(2, 1 << 20, 0).entries == b""
    # The new leader decides another batch at offset 2: before the fix, MetadataLogGapError (exit 70).
    other = fork.register(7, 2)
    assert restarted.apply(other).verdict is Verdict.APPLY
    assert restarted.flush() == 3
    assert restarted.replaced_batches == 1
    assert restarted.copy_image()[0] == fork.image
    assert [b.base_offset for b in read_all(restarted._log)] == [0, 1, 2]
    assert restarted.copy_image()[0].brokers.keys() == {1, 7}


def test_a_new_leaders_noop_cuts_a_lost_tail(tmp_path, log_factory, chain):
    restarted, confirmed, fork = _lost_history(tmp_path, log_factory, chain)
    for c in confirmed:
        restarted.apply(c)
    restarted.apply(fork.noop(2))  # the new active controller's first batch
    assert restarted.flush() == 3
    assert restarted._log.log_end_offset == 3 and restarted.replaced_batches == 1


def test_a_group_entry_is_judged_command_by_command_like_separate_entries(tmp_path, log_factory, chain):
    grouped = _store(tmp_path, log_factory, "grouped")
    separate = _store(tmp_path, log_factory, "separate")
    first = [chain.noop(1), chain.register(1, 1)]
    _, head = chain.image, chain.last
    good = chain.register(2, 1)
    # Decided on an image without `good` (its parent is the head before it): stale once `good` applies,
    # and so is its child, in the same group.
    stale = chain.command([chain.stamp(no_op=metadata_pb2.NoOpRecord())], 1, parent=head, mirror=False)
    orphan = chain.command([chain.stamp(no_op=metadata_pb2.NoOpRecord())], 1,
                           parent=ProposalId(stale[4:20]), mirror=False)
    after = chain.register(3, 1)
    entries = [*first, encode_entry([good, stale, orphan, after])]
    results = [r for data in entries for r in grouped.apply_entry(data)]
    expected = [separate.apply(c) for c in [*first, good, stale, orphan, after]]
    assert [r.verdict for r in results] == [Verdict.APPLY, Verdict.APPLY, Verdict.APPLY, Verdict.STALE_PARENT,
                                            Verdict.STALE_PARENT, Verdict.APPLY]
    assert results == expected
    assert grouped.flush() == separate.flush() == 4
    assert grouped.copy_image() == separate.copy_image() == (chain.image, chain.last)
    assert [b.metadata_batch() for b in read_all(grouped._log)] == [
        b.metadata_batch() for b in read_all(separate._log)
    ]
    assert len(read_all(grouped._log)) == 4  # one RecordBatch per applied command, grouped or not
