"""Broker-side schema validation (issue 45; broker/schema_validation.py): the policy a topic's leader takes
from the image, the scan of a batch's records (the C scan held to the Python reference), the refusals and
their messages, a real ReplicaManager refusing batches with nothing stored, and the recheck after the
image catches up (metadata_sync.py, with a fake controller and follower). No sockets."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kanal.broker import schema_validation as sv
from kanal.broker.batch_validation import walk_record_list
from kanal.broker.config import BrokerConfig
from kanal.broker.metadata_sync import MetadataSync
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.replica_manager import ReplicaManager
from kanal.broker.schema_validation import (
    SchemaRefusal,
    Side,
    check_schema_ids,
    scan_schema_ids_python,
    schema_validation_of,
)
from kanal.metadata import MetadataImage
from kanal.metadata.image import (
    CLUSTER_DEFAULT_BROKER,
    BrokerRegistration,
    PartitionState,
    SchemaId,
    SchemaVersion,
    StoredSchema,
    TopicId,
    TopicImage,
)
from kanal.schemas.framing import frame
from kanal.schemas.schema_types import SchemaType
from kanal.v1 import broker_pb2, records_pb2
from kanal.v1.batch import NewRecord, build_batch, decode_records, iter_entries, parse_batch
from kanal.v1.error import ErrorCode

VALUE_ON = {"value.schema.validation": "true"}
KEY_ON = {"key.schema.validation": "true"}
BOTH_ON = {**VALUE_ON, **KEY_ON}


def image_of(configs: dict[str, str] | None = None, *, topic: str = "orders",
             subjects: dict[str, dict[int, tuple[int, bool]]] | None = None,
             cluster_defaults: dict[str, str] | None = None) -> MetadataImage:
    """Broker 0 leading one partition of `topic` (replicas [0]); schemas 1..9 registered; `subjects`:
    subject -> version -> (schema id, soft-deleted)."""
    image = MetadataImage()
    image.brokers[0] = BrokerRegistration(0, "inc-0", 7, "127.0.0.1:1", "", False)
    topic_id = TopicId("11111111-1111-4111-8111-111111111111")
    t = TopicImage(topic, topic_id, [PartitionState(0, (0,), (0,), 0, 0, 1)], dict(configs or {}))
    image.topics[topic] = t
    image.topics_by_id[topic_id] = t
    for i in range(1, 10):
        image.schemas[SchemaId(i)] = StoredSchema(SchemaId(i), SchemaType.AVRO, f'"string{i}"', ())
    image.next_schema_id = SchemaId(10)
    for subject, versions in (subjects or {}).items():
        image.subjects[subject] = {v: SchemaVersion(SchemaId(i), deleted)
                                   for v, (i, deleted) in versions.items()}
    if cluster_defaults:
        image.broker_configs[CLUSTER_DEFAULT_BROKER] = dict(cluster_defaults)
    return image


REGISTERED = {"orders-value": {1: (1, False), 2: (2, False), 3: (3, True)},
              "orders-key": {1: (4, False)},
              "other-value": {1: (5, False)}}


def record_list(records: list[NewRecord]) -> bytes:
    """The (uncompressed) RecordList of a batch of `records`."""
    raw = build_batch(records)
    return records_pb2.RecordBatch.FromString(raw).records


def refusal(records: list[NewRecord], policy) -> SchemaRefusal:
    with pytest.raises(SchemaRefusal) as caught:
        check_schema_ids(record_list(records), policy)
    assert caught.value.code == ErrorCode.INVALID_RECORD
    return caught.value


# ---- the policy from the image ----

def test_off_by_default_and_on_per_topic_or_by_the_cluster_default():
    assert schema_validation_of(image_of(), "orders") is None
    assert schema_validation_of(image_of({"value.schema.validation": "false"}), "orders") is None
    policy = schema_validation_of(image_of(VALUE_ON, subjects=REGISTERED), "orders")
    assert policy is not None
    [rule] = policy.rules
    # Live versions only: version 3 (id 3) is soft-deleted.
    assert (rule.side, rule.subject, rule.ids, rule.deleted_ids) == (Side.VALUE, "orders-value", {1, 2}, {3})
    by_default = schema_validation_of(image_of(subjects=REGISTERED, cluster_defaults=BOTH_ON), "orders")
    assert by_default is not None
    assert [(r.side, r.subject, r.ids) for r in by_default.rules] == [
        (Side.KEY, "orders-key", {4}), (Side.VALUE, "orders-value", {1, 2})]
    # The topic's own false wins over the cluster default.
    both_off = {"value.schema.validation": "false", "key.schema.validation": "false"}
    assert schema_validation_of(image_of(both_off, cluster_defaults=BOTH_ON), "orders") is None


def test_a_brokers_own_defaults_are_not_read():
    image = image_of(subjects=REGISTERED)
    image.broker_configs["0"] = dict(VALUE_ON)  # refused at admission (topic_config_rules); ignored here
    assert schema_validation_of(image, "orders") is None


def test_internal_topics_are_never_validated():
    image = image_of(subjects=REGISTERED, cluster_defaults=BOTH_ON, topic="__consumer_offsets")
    assert schema_validation_of(image, "__consumer_offsets") is None


def test_a_subject_with_no_versions_allows_no_id():
    policy = schema_validation_of(image_of(VALUE_ON), "orders")
    assert policy is not None and policy.rules[0].ids == frozenset()
    refused = refusal([NewRecord(frame(1, b"x"))], policy)
    assert "not registered under subject 'orders-value'" in refused.message


# ---- the check ----

@pytest.fixture
def value_policy():
    policy = schema_validation_of(image_of(VALUE_ON, subjects=REGISTERED), "orders")
    assert policy is not None
    return policy


@pytest.fixture
def both_policy():
    policy = schema_validation_of(image_of(BOTH_ON, subjects=REGISTERED), "orders")
    assert policy is not None
    return policy


def test_registered_ids_and_null_values_pass(value_policy):
    check_schema_ids(record_list([NewRecord(frame(1, b"a")), NewRecord(frame(2, b"")), NewRecord(None, b"k"),
                                  NewRecord(frame(1, b"b"), b"raw key")]), value_policy)


@pytest.mark.parametrize(("value", "why", "stale"), [
    (b"raw bytes", "does not start with the schema registry's framing", False),
    (b"", "does not start with the schema registry's framing", False),  # empty is not null
    (b"\x00\x00\x00", "does not start with the schema registry's framing", False),  # too short for an id
    (b"\x01\x00\x00\x00\x01payload", "does not start with the schema registry's framing", False),
    (b"\x00\x00\x00\x00\x00", "names schema id 0, which no registry gives", False),
    (b"\x00\xff\xff\xff\xff", "names schema id 4294967295, which no registry gives", False),
    (frame(999, b"x"), "names schema id 999, which the schema registry does not know", True),
    (frame(5, b"x"), "names schema id 5, which is not registered under subject 'orders-value'", True),
    (frame(3, b"x"), "names schema id 3, which only soft-deleted versions of subject 'orders-value' hold",
     True),
])
def test_each_kind_of_refusal_names_the_record_and_why(value_policy, value, why, stale):
    refused = refusal([NewRecord(frame(1, b"ok")), NewRecord(None), NewRecord(value)], value_policy)
    assert refused.message.startswith(
        f"schema validation (value.schema.validation=true): record 2 of the batch: its value {why}")
    assert refused.record_index == 2
    assert refused.may_be_stale is stale


def test_the_first_refused_record_is_named_key_before_value(both_policy):
    records = [NewRecord(frame(1, b"ok"), frame(4, b"k")),
               NewRecord(frame(1, b"ok"), b"raw"),  # record 1: key unframed
               NewRecord(b"raw", frame(4, b"k"))]  # record 2: value unframed
    assert refusal(records, both_policy).record_index == 1
    refused = refusal([NewRecord(b"raw", b"raw")], both_policy)  # both sides at record 0: the key is named
    assert refused.message.startswith(
        "schema validation (key.schema.validation=true): record 0 of the batch: its key does not start")
    # An unknown id before an unframed record is the one named, and the other way round.
    assert refusal([NewRecord(frame(1, b"")), NewRecord(frame(9, b"")), NewRecord(b"raw")],
                   both_policy).record_index == 1
    assert refusal([NewRecord(b"raw"), NewRecord(frame(9, b""))], both_policy).record_index == 0
    # A key id registered for the value subject is not a key id.
    assert "not registered under subject 'orders-key'" in refusal(
        [NewRecord(frame(1, b""), frame(1, b""))], both_policy).message


def test_a_null_key_passes_key_validation(both_policy):
    check_schema_ids(record_list([NewRecord(frame(2, b"v")), NewRecord(None, None)]), both_policy)


# ---- the C scan against the Python reference ----

# One record's key or value: null, unframed bytes, or framed with an id (some allowed, some not, some odd).
FIELD = st.one_of(st.none(), st.binary(max_size=8),
                  st.builds(lambda i, p: i.to_bytes(5, "big") + p,
                            st.sampled_from([1, 2, 4, 5, 9, 0, 2**31, 2**32 - 1]), st.binary(max_size=4)))


def encoded_record(index: int, parts: list[tuple[bytes | None, bytes | None]]) -> bytes:
    """One Record as the concatenation of partial ones: a field given twice keeps its last value."""
    out = b""
    for n, (key, value) in enumerate(parts):
        r = records_pb2.Record(offset_delta=index if n == 0 else 0, timestamp_delta_ms=n,
                               headers=[records_pb2.RecordHeader(key="h", value=b"\x00")] if n else [])
        if key is not None:
            r.key = key
        if value is not None:
            r.value = value
        out += r.SerializeToString()
    return b"\x0a" + varint(len(out)) + out


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


@pytest.mark.skipif(sv._native is None, reason="the C extension is not built")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.tuples(FIELD, FIELD), min_size=1, max_size=3), min_size=1, max_size=12))
def test_the_c_scan_agrees_with_the_python_reference(records):
    raw = b"".join(encoded_record(i, parts) for i, parts in enumerate(records))
    walk_record_list(raw, len(records), 0)  # only what the walk accepts is ever scanned
    for tag in sv.FIELD_TAG.values():
        assert sv.scan_schema_ids(raw, tag) == scan_schema_ids_python(raw, tag)
        assert sv.scan_schema_ids(memoryview(raw), tag) == scan_schema_ids_python(memoryview(raw), tag)


def test_the_scan_reads_non_minimal_tags_and_lengths_as_the_walk_accepts_them():
    value = frame(7, b"payload")
    # Record: offset_delta 0 with its tag as two bytes (0x88 0x00), value with a two-byte length.
    record = b"\x88\x00\x00" + b"\x22" + bytes([len(value) | 0x80, 0x00]) + value
    raw = b"\x0a" + bytes([len(record)]) + record
    walk_record_list(raw, 1, 0)
    assert scan_schema_ids_python(raw, 0x22) == sv.scan_schema_ids(raw, 0x22) == (-1, {7: 0})


def test_one_distinct_id_is_one_entry_with_its_first_record():
    raw = record_list([NewRecord(b"raw")] + [NewRecord(frame(i % 2 + 1, b"x")) for i in range(100)])
    assert sv.scan_schema_ids(raw, 0x22) == (0, {})
    raw = record_list([NewRecord(None)] + [NewRecord(frame(i % 2 + 1, b"x")) for i in range(100)])
    assert sv.scan_schema_ids(raw, 0x22) == scan_schema_ids_python(raw, 0x22) == (-1, {1: 1, 2: 2})


# ---- a real replica manager ----

def manager(data_dir) -> ReplicaManager:
    config = BrokerConfig(broker_id=0, listen="127.0.0.1:1", controllers=("127.0.0.1:2",), data_dir=data_dir)
    return ReplicaManager(config, controllers=None, metrics=BrokerMetrics(), broker_epoch=lambda: 1)


@pytest.fixture
def rm(tmp_path):
    made = manager(tmp_path)
    yield made
    made.close()


def produce(rm: ReplicaManager, *batches: bytes, acks: int = 1) -> broker_pb2.ProduceResponse.PartitionResult:
    request = broker_pb2.ProduceRequest(acks=acks, timeout_ms=2_000)
    request.topics.add(topic="orders").partitions.add(partition=0).batches.extend(batches)
    return rm.produce(request).topics[0].partitions[0]


def stored_values(rm: ReplicaManager) -> list[bytes | None]:
    part = rm.partition("orders", 0)
    data = part.log.read(0, 1 << 20).data
    return [r.value if r.HasField("value") else None
            for entry in iter_entries(data) for r in decode_records(parse_batch(entry.batch))]


def test_a_refused_batch_stores_nothing_and_a_good_one_is_stored(rm):
    rm.on_metadata(MetadataImage(), image_of(VALUE_ON, subjects=REGISTERED))
    for bad in (b"raw bytes", frame(999, b"x"), frame(5, b"x")):
        out = produce(rm, build_batch([NewRecord(frame(1, b"fine")), NewRecord(bad)]))
        assert out.error == ErrorCode.INVALID_RECORD, out
        assert "record 1 of the batch" in out.error_message
        assert list(out.batch_base_offsets) == []
    assert rm.partition("orders", 0).log.log_end_offset == 0
    out = produce(rm, build_batch([NewRecord(frame(1, b"a")), NewRecord(None, b"tombstone")]))
    assert (out.error, out.base_offset) == (ErrorCode.NONE, 0)
    assert stored_values(rm) == [frame(1, b"a"), None]


def test_compressed_batches_are_checked_once_decompressed(rm):
    rm.on_metadata(MetadataImage(), image_of(VALUE_ON, subjects=REGISTERED))
    bad = build_batch([NewRecord(frame(1, b"x" * 100))] * 20 + [NewRecord(b"y" * 100)],
                      codec=records_pb2.COMPRESSION_ZSTD)
    out = produce(rm, bad)
    assert out.error == ErrorCode.INVALID_RECORD and "record 20 of the batch" in out.error_message
    good = build_batch([NewRecord(frame(2, b"x" * 100))] * 20, codec=records_pb2.COMPRESSION_ZSTD)
    assert produce(rm, good).error == ErrorCode.NONE


def test_batches_before_a_refused_one_stay_stored(rm):
    rm.on_metadata(MetadataImage(), image_of(VALUE_ON, subjects=REGISTERED))
    out = produce(rm, build_batch([NewRecord(frame(1, b"first"))]), build_batch([NewRecord(b"raw")]),
                  build_batch([NewRecord(frame(1, b"third"))]))
    assert out.error == ErrorCode.INVALID_RECORD
    assert list(out.batch_base_offsets) == [0]
    assert stored_values(rm) == [frame(1, b"first")]


def test_turning_it_on_and_off_takes_effect_with_the_image(rm):
    rm.on_metadata(MetadataImage(), image := image_of(subjects=REGISTERED))
    assert produce(rm, build_batch([NewRecord(b"raw")])).error == ErrorCode.NONE
    rm.on_metadata(image, on := image_of(VALUE_ON, subjects=REGISTERED))
    assert produce(rm, build_batch([NewRecord(b"raw")])).error == ErrorCode.INVALID_RECORD
    rm.on_metadata(on, image_of(subjects=REGISTERED))
    assert produce(rm, build_batch([NewRecord(b"raw")])).error == ErrorCode.NONE


def test_transaction_markers_are_not_checked(rm):
    rm.on_metadata(MetadataImage(), image_of(BOTH_ON, subjects=REGISTERED))
    reply = rm.write_txn_markers(broker_pb2.WriteTxnMarkersRequest(
        producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False,
        topics=[broker_pb2.TopicPartitions(topic="orders", partitions=[0])]))
    assert reply.results[0].error == ErrorCode.NONE, reply
    assert rm.partition("orders", 0).log.log_end_offset == 1  # stored: its key is no registry's framing


# ---- the recheck once the image has caught up ----

class FakeSync:
    """A MetadataSync whose catching up applies `newer` to the manager (what the follower would do)."""

    def __init__(self, rm: ReplicaManager, older: MetadataImage, newer: MetadataImage | None) -> None:
        self.rm, self.older, self.newer = rm, older, newer
        self.calls = 0

    def caught_up_since(self, since_s: float, timeout_s: float) -> bool:
        self.calls += 1
        if self.newer is None:
            return False
        self.rm.on_metadata(self.older, self.newer)
        return True


@pytest.mark.parametrize("acks", [1, -1])
def test_an_id_registered_after_the_leaders_image_passes_on_the_recheck(rm, acks):
    older = image_of(VALUE_ON, subjects=REGISTERED)
    newer = image_of(VALUE_ON, subjects={**REGISTERED, "orders-value": {**REGISTERED["orders-value"],
                                                                        4: (6, False)}})
    rm.on_metadata(MetadataImage(), older)
    rm.metadata_sync = sync = FakeSync(rm, older, newer)  # type: ignore[assignment]
    out = produce(rm, build_batch([NewRecord(frame(1, b"a"))]), build_batch([NewRecord(frame(6, b"b"))]),
                  acks=acks)
    assert (out.error, list(out.batch_base_offsets), sync.calls) == (ErrorCode.NONE, [0, 1], 1)
    assert stored_values(rm) == [frame(1, b"a"), frame(6, b"b")]


def test_framing_refusals_are_final_without_a_recheck(rm):
    rm.on_metadata(MetadataImage(), image := image_of(VALUE_ON, subjects=REGISTERED))
    rm.metadata_sync = sync = FakeSync(rm, image, image)  # type: ignore[assignment]
    assert produce(rm, build_batch([NewRecord(b"raw")])).error == ErrorCode.INVALID_RECORD
    assert sync.calls == 0


def test_the_refusal_stands_when_the_recheck_refuses_again_or_cannot_sync(rm):
    rm.on_metadata(MetadataImage(), image := image_of(VALUE_ON, subjects=REGISTERED))
    for newer in (image, None):
        rm.metadata_sync = sync = FakeSync(rm, image, newer)  # type: ignore[assignment]
        out = produce(rm, build_batch([NewRecord(frame(999, b"x"))]))
        assert out.error == ErrorCode.INVALID_RECORD and "schema id 999" in out.error_message
        assert sync.calls == 1
    assert rm.partition("orders", 0).log.log_end_offset == 0


# ---- MetadataSync ----

class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_sync_asks_once_for_every_caller_that_arrived_before_the_ask_started():
    clock = FakeClock()
    asked: list[float] = []
    waited: list[int] = []

    def ask(timeout_s: float) -> int:
        asked.append(clock.now)
        return 42

    def wait(offset: int, timeout_s: float) -> bool:
        waited.append(offset)
        return True

    sync = MetadataSync(ask, wait, clock)
    assert sync.caught_up_since(99.0, 1.0)
    clock.now = 100.5
    assert sync.caught_up_since(100.0, 1.0)  # the ask at 100.0 started after it arrived: no new ask
    assert sync.caught_up_since(100.2, 1.0) and len(asked) == 2  # arrived after that ask started
    assert waited == [42, 42, 42]


def test_sync_fails_when_no_controller_answers():
    from kanal.v1.error import KanalError

    def ask(timeout_s: float) -> int:
        raise KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE, "nobody")

    sync = MetadataSync(ask, lambda offset, timeout_s: True, FakeClock())
    assert sync.caught_up_since(0.0, 1.0) is False


def test_concurrent_callers_share_the_ask_in_flight():
    release = threading.Event()
    asks = []

    def ask(timeout_s: float) -> int:
        asks.append(1)
        release.wait(5)
        return 7

    sync = MetadataSync(ask, lambda offset, timeout_s: offset == 7)
    results: list[bool] = []
    first = threading.Thread(target=lambda: results.append(sync.caught_up_since(0.0, 5.0)))
    first.start()
    while not asks:
        threading.Event().wait(0.001)
    # Arrived (since 0.0) before the ask in flight started: it waits for that one.
    second = threading.Thread(target=lambda: results.append(sync.caught_up_since(0.0, 5.0)))
    second.start()
    release.set()
    first.join()
    second.join()
    assert results == [True, True] and len(asks) == 1
