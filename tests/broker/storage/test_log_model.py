"""The partition log against a simple model: random operation sequences (Hypothesis), every read checked.

The model is a list of batches (base offset, last offset, records). Rules drive the real Log and the model
side by side; after every step the whole log is read back and compared with the model, record by record.
"Crash" closes the log without the clean-shutdown marker, then cuts a segment file at a random byte or
flips a random byte in one (only in segments past the recovery point: everything before it was fsynced
when its segment rolled, so a crash cannot have damaged it). Recovery must keep exactly the batches that
were whole before the damage and drop the damaged one and everything after it.

The cleanup policy is drawn: delete, compact or both (compact,delete). Retention deletes exactly the
prefix of closed segments its rules name (by time, then by size; a segment compaction emptied goes only
with the next non-empty one), and the model drops the batches below the new log start; compaction keeps,
in the closed segments, the latest record of each key among the records still in the log, and tombstones
younger than delete.retention.ms. With both, `maintenance` runs them in one pass as the partition does
(retention first), so what retention deleted is gone and the rest obeys compaction's rule.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.metadata.cleanup_policy import COMPACT, COMPACT_DELETE, DELETE
from kanal.v1.batch import NewRecord, build_batch, decode_records, iter_entries, parse_batch
from kanal.v1.error import ErrorCode, KanalError

KEYS = st.sampled_from([None, b"a", b"b", b"c", b"d"])
VALUES = st.one_of(st.none(), st.binary(max_size=40))


@dataclass
class ModelBatch:
    base: int
    last: int
    max_ts: int
    # (offset, key, value, timestamp)
    records: list[tuple[int, bytes | None, bytes | None, int]] = field(default_factory=list)


def read_all(log: Log, start: int, limit: int | None = None, bytes_max: int = 1 << 20) -> list[tuple]:
    """Every record from `start` by repeated reads, the way a consumer would."""
    out: list[tuple] = []
    offset = start
    while offset < log.log_end_offset and (limit is None or offset < limit):
        result = log.read(offset, bytes_max, limit)
        if not result.data:
            break
        for entry in iter_entries(result.data):
            batch = parse_batch(entry.batch)
            for rec in decode_records(batch):
                off = batch.base_offset + rec.offset_delta
                if off >= offset:
                    out.append((off, rec.key if rec.HasField("key") else None,
                                rec.value if rec.HasField("value") else None,
                                batch.first_timestamp_ms + rec.timestamp_delta_ms))
            offset = max(offset, entry.suffix.last_offset + 1)
    return out


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # tmpfs where there is one: the model runs thousands of fsyncs, which cost nothing there.
        shm = Path("/dev/shm")
        self.tmp = Path(tempfile.mkdtemp(prefix="kanal-log-model-", dir=shm if shm.is_dir() else None))
        self.dir = self.tmp / "topic-0"
        self.batches: list[ModelBatch] = []
        self.now_ms = 1_000_000
        self.epoch = 0
        self.log: Log

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    @initialize(
        segment_bytes=st.integers(1024, 4096),
        index_interval=st.sampled_from([0, 100, 400, 4096]),
        policy=st.sampled_from([DELETE, COMPACT, COMPACT_DELETE]),
        retention_ms=st.one_of(st.none(), st.integers(0, 5000)),
        retention_bytes=st.one_of(st.none(), st.integers(0, 8000)),
        delete_retention_ms=st.integers(0, 3000),
        prefill_batches=st.integers(0, 16),
        roll_every=st.integers(1, 4),
    )
    def open_log(
        self, segment_bytes, index_interval, policy, retention_ms, retention_bytes, delete_retention_ms,
        prefill_batches, roll_every,
    ):
        self.config = LogConfig(
            segment_bytes_max=segment_bytes,
            batch_bytes_max=1000,
            index_interval_bytes=index_interval,
            cleanup_policy=policy,
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
            delete_retention_ms=delete_retention_ms,
        )
        self.log = Log.open(self.dir, self.config)
        # Batches 300 ms apart in a few closed segments to start from: retention and compaction act only on
        # closed segments, and the rules alone seldom build more than one before a run ends. A count (not a
        # list of drawn batches, which Hypothesis keeps short) and fixed contents: keys repeat, some
        # records have no key, some are tombstones.
        keys = [b"a", b"b", None, b"c", b"d"]
        for i in range(prefill_batches):
            records = [(keys[(i + j) % 5], None if (i + j) % 4 == 3 else b"p%d" % i)
                       for j in range(1 + i % 3)]
            self.append(records, 300)
            if i % roll_every == roll_every - 1:
                self.roll()

    # ---- model helpers ----

    @property
    def model_records(self) -> list[tuple]:
        return [r for b in self.batches for r in b.records]

    # ---- rules ----

    @rule(records=st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=6), advance_ms=st.integers(0, 700))
    def append(self, records, advance_ms):
        self.now_ms += advance_ms
        new = [NewRecord(key=k, value=v, timestamp_ms=self.now_ms + i) for i, (k, v) in enumerate(records)]
        info = self.log.append(build_batch(new), leader_epoch=self.epoch, now_ms=self.now_ms)
        base = info.base_offset
        assert info.last_offset == base + len(records) - 1
        self.batches.append(ModelBatch(base, info.last_offset, self.now_ms + len(records) - 1, [
            (base + i, r.key, r.value, r.timestamp_ms) for i, r in enumerate(new)
        ]))

    @rule()
    def new_leader_epoch(self):
        self.epoch += 1

    @rule()
    def roll(self):
        self.log.roll()

    @rule(data=st.data())
    def read_from_any_offset(self, data):
        start = data.draw(st.integers(self.log.log_start_offset, self.log.log_end_offset))
        bytes_max = data.draw(st.integers(1, 3000))
        result = self.log.read(start, bytes_max)
        expected = [r for r in self.model_records if r[0] >= start]
        got = []
        entries = list(iter_entries(result.data))
        for entry in entries:
            batch = parse_batch(entry.batch)
            got += [(batch.base_offset + r.offset_delta) for r in decode_records(batch)]
        got = [o for o in got if o >= start]
        if expected:
            assert result.data, f"read at {start} returned nothing though records follow"
            # A read returns whole batches from the batch holding `start`: its records are a prefix.
            assert got == [r[0] for r in expected[: len(got)]]
            # The reader always makes progress: the first batch ends at or after `start` (after
            # compaction it may hold no record at or after it, and the reader moves past it).
            assert entries[0].suffix.last_offset >= start
        assert len(result.data) <= bytes_max or len(list(iter_entries(result.data))) == 1

    @rule(data=st.data())
    def read_below_a_limit(self, data):
        start = data.draw(st.integers(self.log.log_start_offset, self.log.log_end_offset))
        # Limits at batch boundaries, as a high-water mark always is.
        ends = [b.last + 1 for b in self.batches if b.last + 1 >= start] or [start]
        limit = data.draw(st.sampled_from(ends))
        got = read_all(self.log, start, limit)
        assert got == [r for r in self.model_records if start <= r[0] < limit]

    @rule(data=st.data())
    def read_out_of_range(self, data):
        bad = data.draw(
            st.one_of(
                st.integers(self.log.log_end_offset + 1, self.log.log_end_offset + 100),
                st.integers(-100, self.log.log_start_offset - 1)
                if self.log.log_start_offset > -100
                else st.nothing(),
            )
        )
        with pytest.raises(KanalError) as err:
            self.log.read(bad, 1000)
        assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE

    @rule(data=st.data())
    def truncate(self, data):
        leo = self.log.log_end_offset
        target = data.draw(st.integers(self.log.log_start_offset, leo))
        hw = data.draw(st.integers(self.log.log_start_offset, leo))
        if target < hw:
            before = (self.log.log_end_offset, self.log.size_bytes)
            with pytest.raises(KanalError) as err:
                self.log.truncate_to(target, high_watermark=hw)
            assert err.value.code == ErrorCode.INVALID_TRUNCATION
            assert (self.log.log_end_offset, self.log.size_bytes) == before
            return
        self.log.truncate_to(target, high_watermark=hw)
        self.batches = [b for b in self.batches if b.last < target]
        assert self.log.log_end_offset <= target, "a truncated log ends at or below the target"

    def expected_deletions(self) -> int:
        """How many segments retention must delete now: Kafka's rules over the segments as they stand
        (their newest timestamps and sizes, after any compaction), never the active one; a segment
        compaction emptied goes only with the first non-empty one after it."""
        if not self.config.cleanup_policy.deletes:
            return 0
        # Units of deletion: runs of empty closed segments ended by a non-empty one, as (newest ts, bytes,
        # segments); the active segment and empty segments just before it belong to none.
        units, run = [], 0
        for seg in self.log.segments[:-1]:
            run += 1
            if seg.size:
                units.append((seg.max_timestamp_ms, seg.size, run))
                run = 0
        deleted = 0
        if self.config.retention_ms is not None:
            while deleted < len(units) and units[deleted][0] < self.now_ms - self.config.retention_ms:
                deleted += 1
        if self.config.retention_bytes is not None:
            size = sum(size for _, size, _ in units[deleted:]) + self.log.active_segment.size
            while deleted < len(units) and size - units[deleted][1] >= self.config.retention_bytes:
                size -= units[deleted][1]
                deleted += 1
        return sum(count for _, _, count in units[:deleted])

    def run_retention(self) -> None:
        before = [s.base_offset for s in self.log.segments]
        expected = self.expected_deletions()
        assert self.log.delete_old_segments(self.now_ms) == expected
        assert [s.base_offset for s in self.log.segments] == before[expected:], "a prefix, the active kept"
        start = self.log.log_start_offset
        if expected:
            assert start == before[expected], "the log starts where the first kept segment does"
        self.batches = [b for b in self.batches if b.last >= start]

    def run_compaction(self) -> None:
        active_base = self.log.active_segment.base_offset
        latest = {}
        for r in self.model_records:
            if r[1] is not None:
                latest[r[1]] = r[0]
        horizon = self.now_ms - self.config.delete_retention_ms
        for b in self.batches:
            if b.base >= active_base:
                continue
            b.records = [
                r for r in b.records
                if r[1] is None or (latest[r[1]] == r[0] and not (r[2] is None and b.max_ts <= horizon))
            ]
        self.log.compact(self.now_ms)

    @rule(advance_ms=st.integers(0, 6000))
    def retention(self, advance_ms):
        self.now_ms += advance_ms
        self.run_retention()

    @precondition(lambda self: self.config.cleanup_policy.compacts)
    @rule(advance_ms=st.integers(0, 4000))
    def compact(self, advance_ms):
        self.now_ms += advance_ms
        self.run_compaction()

    @rule(advance_ms=st.integers(0, 6000))
    def maintenance(self, advance_ms):
        """What Partition.maintenance does with a due compaction: retention, then compaction of the rest,
        each when the policy has it, at one time."""
        self.now_ms += advance_ms
        self.run_retention()
        if self.config.cleanup_policy.compacts:
            self.run_compaction()

    @rule(offset=st.integers(0, 10_000))
    def advance_log_start(self, offset):
        target = min(max(offset, self.log.log_start_offset), self.log.log_end_offset)
        self.log.advance_log_start(target)
        for b in self.batches:
            b.records = [r for r in b.records if r[0] >= target]
        self.batches = [b for b in self.batches if b.last >= target]

    @rule()
    def flush(self):
        self.log.flush()

    @rule()
    def close_and_reopen(self):
        self.log.close()
        self.log = Log.open(self.dir, self.config)
        assert self.log.recovered_bytes_cut == 0

    @rule(data=st.data(), flip=st.booleans())
    def crash(self, data, flip):
        """Unclean close, damage one segment past the recovery point, reopen."""
        segs = self.log.segments
        recovery_point = self.log.recovery_point
        damageable = [
            i
            for i, s in enumerate(segs)
            if s.size and (i == len(segs) - 1 or segs[i + 1].base_offset > recovery_point)
        ]
        locations = {i: list(segs[i].locations()) for i in damageable}
        self.log.close_unclean()
        if damageable:
            i = data.draw(st.sampled_from(damageable))
            seg = segs[i]
            pos = data.draw(st.integers(0, seg.size - 1))
            raw = bytearray(seg.log_path.read_bytes())
            if flip:
                raw[pos] ^= data.draw(st.integers(1, 255))
            else:
                del raw[pos:]
            seg.log_path.write_bytes(bytes(raw))
            # Batches in the damaged segment that ended before the damage survive, and nothing after.
            damaged_from = next(
                loc.suffix.base_offset for loc in locations[i] if loc.position + loc.size > pos
            )
            self.batches = [b for b in self.batches if b.base < damaged_from]
        self.log = Log.open(self.dir, self.config)

    # ---- invariants ----

    @invariant()
    def whole_log_matches_model(self):
        if not hasattr(self, "log"):
            return
        got = read_all(self.log, self.log.log_start_offset)
        assert got == self.model_records
        # Compaction can empty a batch; its offsets then exist only in the model. The log end covers at
        # least every batch that still holds a record.
        model_end = max((b.last + 1 for b in self.batches if b.records), default=0)
        assert self.log.log_end_offset >= model_end
        assert self.log.log_start_offset <= min(
            (b.base for b in self.batches), default=self.log.log_start_offset
        ) or all(r[0] >= self.log.log_start_offset for r in self.model_records)


TestLogModel = LogMachine.TestCase
TestLogModel.settings = settings(
    max_examples=250,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
