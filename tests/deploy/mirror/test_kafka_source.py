"""KafkaSource and KafkaReader (deploy/mirror/kafka_source.py) against a real Apache Kafka 4.x broker: what
a flow reads of a Kafka source (topics, configs set on them, ACLs, groups' offsets, ends) and the reader's
read_committed copy (records intact, aborted transactions left out, positions past the markers).

One broker (KRaft, broker+controller, no authorizer) for the module, started by benchmarks/apache_kafka.py
from the jars of `bash deploy/kafka_jars.sh .kafka-jars server`; each test makes its own topics."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kanal.deploy.mirror.kafka_source import (
    KafkaReader,
    KafkaSource,
    acl_entry,
    kanal_error,
    read_command_config,
)
from kanal.deploy.mirror.source import SourceReader, SourceRecord
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError
from tests.harness.apache_kafka_broker import apache_kafka
from tests.harness.waiting import wait_until

pytestmark = pytest.mark.cluster

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def kafka(tmp_path_factory) -> Iterator[str]:
    """The broker's bootstrap address; the broker is stopped by PID at the end."""
    with apache_kafka(tmp_path_factory.mktemp("apache-kafka")) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="module")
def admin(kafka) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": kafka})


@pytest.fixture(scope="module")
def source(kafka) -> Iterator[KafkaSource]:
    kafka_source = KafkaSource(kafka, None, client_id="kanal-mirror-test")
    yield kafka_source
    kafka_source.close()


@pytest.fixture
def readers() -> Iterator[list[SourceReader]]:
    """Readers to close after the test, whatever it did."""
    made: list[SourceReader] = []
    yield made
    for reader in made:
        reader.close()


def new_topic(admin: AdminClient, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    name = f"src-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(TIMEOUT_S)
    return name


def produce(bootstrap: str, topic: str, records: list[dict]) -> None:
    """Each record's fields as confluent_kafka's produce() takes them; all acknowledged on return."""
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for record in records:
        producer.produce(topic, **record)
    assert producer.flush(TIMEOUT_S) == 0


def read_to(reader: SourceReader, tp: tuple[str, int], end: int) -> list[SourceRecord]:
    """What `reader` returns until its position of `tp` is `end` (every partition it holds, in order)."""
    records: list[SourceRecord] = []

    def at_end() -> bool:
        records.extend(reader.poll(0.2))
        try:
            return reader.position(tp, timeout_s=0) == end
        except KanalError:
            return False

    wait_until(at_end, TIMEOUT_S, f"{tp} read to {end}")
    records.extend(reader.poll(0.2))  # anything else already fetched
    return records


# ---- the cluster's metadata ----


def test_topics_are_every_topic_with_its_partition_count(source, admin):
    one, three = new_topic(admin, 1), new_topic(admin, 3)
    # The broker learns of a topic from the controller's log, a moment after CreateTopics answers.
    def listed() -> dict[str, int] | None:
        topics = source.topics()
        return topics if one in topics and three in topics else None

    topics = wait_until(listed, TIMEOUT_S, "the new topics listed")
    assert topics[one] == 1
    assert topics[three] == 3


def test_topic_configs_are_those_set_on_the_topic_not_defaults(source, admin):
    topic = new_topic(admin, config={"retention.ms": "3600000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    configs = source.topic_configs(topic)
    # Neither a default (cleanup.policy) nor what the cluster sets for every topic (min.insync.replicas,
    # set in the broker's properties) is the topic's own.
    assert configs == {"retention.ms": "3600000", "max.message.bytes": "200000"}
    assert source.topic_configs(new_topic(admin)) == {}


def test_topic_acls_without_an_authorizer_are_none(source):
    assert source.topic_acls() == []


def test_groups_and_their_committed_offsets(source, admin, kafka):
    topic = new_topic(admin, 2)
    produce(kafka, topic, [{"value": b"v", "partition": 0}] * 5)
    group = f"app-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer({"bootstrap.servers": kafka, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign([KafkaTopicPartition(topic, 0), KafkaTopicPartition(topic, 1)])
        # The first commit creates __consumer_offsets: NOT_COORDINATOR until its partitions are led.
        wait_until(lambda: consumer.commit(offsets=[KafkaTopicPartition(topic, 0, 3)], asynchronous=False),
                   TIMEOUT_S, "a commit", tolerate=(KafkaException,))
    finally:
        consumer.close()
    assert group in source.groups()
    assert source.group_offsets(group) == {(topic, 0): 3}  # partition 1: nothing committed
    assert source.group_offsets(f"no-such-group-{uuid.uuid4().hex[:8]}") == {}
    assert source.topics()["__consumer_offsets"] > 0  # internal topics are listed too


def test_end_offsets_are_the_high_watermarks(source, admin, kafka):
    topic = new_topic(admin, 2)
    produce(kafka, topic, [{"value": b"v", "partition": 0}] * 3)
    assert source.end_offsets([(topic, 0), (topic, 1)]) == {(topic, 0): 3, (topic, 1): 0}
    assert source.end_offsets([]) == {}


# ---- the reader ----


def test_reader_returns_records_intact_from_the_start_and_from_a_position(source, admin, kafka, readers):
    topic = new_topic(admin, 2)
    written = [
        {"key": b"k0", "value": b"v0", "headers": [("h", b"1"), ("h", b"2"), ("empty", None)],
         "timestamp": 1_700_000_000_000},
        {"key": None, "value": b"v1", "timestamp": 1_700_000_000_001},
        {"key": b"k2", "value": None, "headers": [("only", b"")], "timestamp": 1_700_000_000_002},
        {"key": b"k3", "value": b"v3" * 1000, "timestamp": 1_700_000_000_003},
    ]
    produce(kafka, topic, [{**r, "partition": 0} for r in written])
    produce(kafka, topic, [{"value": b"other", "partition": 1}] * 2)

    expected = [SourceRecord(topic, 0, offset, r["timestamp"], r["key"], r["value"],
                             tuple(r.get("headers", ()))) for offset, r in enumerate(written)]
    reader = source.reader()
    readers.append(reader)
    assert isinstance(reader, KafkaReader)
    reader.assign({(topic, 0): None})  # only partition 0, from its log start
    assert read_to(reader, (topic, 0), 4) == expected

    reader = source.reader()
    readers.append(reader)
    reader.assign({(topic, 0): 2, (topic, 1): None})
    records = read_to(reader, (topic, 0), 4)
    records += read_to(reader, (topic, 1), 2)
    assert [r for r in records if r.partition == 0] == expected[2:]
    assert [(r.partition, r.offset, r.value) for r in records if r.partition == 1] == [
        (1, 0, b"other"), (1, 1, b"other")]


def test_reader_leaves_aborted_transactions_out_and_moves_past_their_markers(source, admin, kafka, readers):
    topic = new_topic(admin)
    producer = KafkaProducer({"bootstrap.servers": kafka, "transactional.id": f"txn-{topic}"})
    producer.init_transactions(TIMEOUT_S)
    # Offsets: c0 0, c1 1, commit marker 2; a0 3, abort marker 4; c2 5, commit marker 6; a1 7, a2 8, abort
    # marker 9. The log ends with an aborted transaction: only markers and aborted records after c2.
    transactions = (([b"c0", b"c1"], True), ([b"a0"], False), ([b"c2"], True), ([b"a1", b"a2"], False))
    for values, commit in transactions:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value, partition=0)
        producer.flush(TIMEOUT_S)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
    tp = (topic, 0)
    # EndTxn answers once the coordinator decided; it writes the markers after: the last one comes soon.
    wait_until(lambda: source.end_offsets([tp]) == {tp: 10}, TIMEOUT_S, "the last abort marker")

    for start, expected in ((None, [(0, b"c0"), (1, b"c1"), (5, b"c2")]), (3, [(5, b"c2")]), (7, [])):
        reader = source.reader()
        readers.append(reader)
        reader.assign({tp: start})
        records = read_to(reader, tp, 10)  # the position reaches the end past the last abort marker
        assert [(r.offset, r.value) for r in records] == expected, start


def test_reader_position_before_anything_is_fetched(source, admin, readers):
    topic = new_topic(admin, 2)
    reader = source.reader()
    readers.append(reader)
    reader.assign({(topic, 0): None, (topic, 1): 0})
    assert reader.poll(0.5) == []
    # From the log start of an empty partition nothing is fetched, so no position is known; a partition
    # assigned at an offset is at that offset until a fetch moves it.
    with pytest.raises(KanalError) as unknown:
        reader.position((topic, 0), timeout_s=0.1)
    assert unknown.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert reader.position((topic, 1), timeout_s=0) == 0
    with pytest.raises(KanalError) as unassigned:
        reader.position((topic, 2), timeout_s=0)
    assert unassigned.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KanalError) as negative:
        reader.assign({(topic, 0): -1})  # librdkafka would read -1 as "the end"
    assert negative.value.code == ErrorCode.INVALID_REQUEST


# ---- the command config ----


def test_command_config_goes_into_every_client(kafka, admin, tmp_path, readers):
    config = tmp_path / "client.properties"
    config.write_text("# librdkafka's properties\n\n"
                      "client.id = from-the-file\n"
                      "socket.timeout.ms=20000\n"
                      "enable.partition.eof=true\n"  # the reader gets _PARTITION_EOF events: not errors
                      "isolation.level=read_uncommitted\n")  # the reader's own settings win over the file
    assert read_command_config(config)["client.id"] == "from-the-file"
    source = KafkaSource(kafka, config, client_id="kanal-mirror-test")
    topic = new_topic(admin)
    producer = KafkaProducer({"bootstrap.servers": kafka, "transactional.id": f"txn-{topic}"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", partition=0)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    assert topic in source.topics()
    reader = source.reader()
    readers.append(reader)
    reader.assign({(topic, 0): None})
    assert read_to(reader, (topic, 0), 2) == []  # read_committed all the same
    assert reader.poll(0.5) == []  # at the end: an EOF event, skipped


def test_command_config_lines_and_properties_are_checked(tmp_path, kafka):
    malformed = tmp_path / "malformed.properties"
    malformed.write_text("security.protocol=PLAINTEXT\n# a comment\nsasl.password hunter2\n")
    with pytest.raises(ValueError, match=r"malformed\.properties, line 3") as bad_line:
        read_command_config(malformed)
    assert "hunter2" not in str(bad_line.value)  # a malformed line may hold a secret
    unknown = tmp_path / "unknown.properties"
    unknown.write_text("no.such.property=1\n")
    with pytest.raises(ValueError, match=r"unknown\.properties.*no\.such\.property"):
        KafkaSource(kafka, unknown, client_id="kanal-mirror-test")


# ---- conversions ----


def test_kafka_topic_acls_as_kanal_entries():
    literal = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    prefixed = AclBinding(ResourceType.TOPIC, "pay-", ResourcePatternType.PREFIXED, "User:bob", "10.0.0.1",
                          AclOperation.DESCRIBE_CONFIGS, AclPermissionType.DENY)
    assert acl_entry(literal) == metadata_pb2.AccessControlEntry(
        resource_type=metadata_pb2.ACL_RESOURCE_TOPIC, resource_name="orders",
        pattern_type=metadata_pb2.ACL_PATTERN_LITERAL, principal="User:alice", host="*",
        operation=metadata_pb2.ACL_OPERATION_READ, permission=metadata_pb2.ACL_PERMISSION_ALLOW)
    assert acl_entry(prefixed) == metadata_pb2.AccessControlEntry(
        resource_type=metadata_pb2.ACL_RESOURCE_TOPIC, resource_name="pay-",
        pattern_type=metadata_pb2.ACL_PATTERN_PREFIXED, principal="User:bob", host="10.0.0.1",
        operation=metadata_pb2.ACL_OPERATION_DESCRIBE_CONFIGS, permission=metadata_pb2.ACL_PERMISSION_DENY)
    unknown = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:carol", "*",
                         AclOperation.UNKNOWN, AclPermissionType.ALLOW)
    assert acl_entry(unknown) is None  # an operation newer than kanal's: not copied


@pytest.mark.parametrize(("kafka_code", "kanal_code"), [
    (KafkaError.UNKNOWN_TOPIC_OR_PART, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (KafkaError.SECURITY_DISABLED, ErrorCode.SECURITY_DISABLED),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    (KafkaError._TRANSPORT, ErrorCode.BROKER_NOT_AVAILABLE),
    (KafkaError._TIMED_OUT, ErrorCode.REQUEST_TIMED_OUT),
    (KafkaError._AUTHENTICATION, ErrorCode.AUTHENTICATION_FAILED),
    # A source error never reads as the flow's producer being fenced (which ends the flow).
    (KafkaError.PRODUCER_FENCED, ErrorCode.UNKNOWN_SERVER_ERROR),
    (KafkaError.DELEGATION_TOKEN_EXPIRED, ErrorCode.UNKNOWN_SERVER_ERROR),
])
def test_librdkafka_errors_as_kanal_errors(kafka_code, kanal_code):
    error = kanal_error(KafkaError(kafka_code), "reading t [0]")
    assert error.code == kanal_code
    assert error.message.startswith("reading t [0]: ")
