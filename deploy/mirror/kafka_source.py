"""Any Kafka-protocol cluster (Apache Kafka, Confluent, Redpanda, MSK ...) as a flow's source, through
librdkafka (confluent_kafka). The protocols are source.py's; this is what each call asks the cluster:

    topics          Metadata for every topic, internal ones too (the policy filters)
    topic_configs   DescribeConfigs, keeping what is set on the topic (source DYNAMIC_TOPIC_CONFIG): not the
                    defaults, and not the broker-wide settings, which are the target's own business
    topic_acls      DescribeAcls of TOPIC resources, as kanal's entries ([] without an authorizer)
    groups          ListGroups
    group_offsets   OffsetFetch, the partitions with a committed offset
    end_offsets     ListOffsets latest, read_uncommitted: the high watermark
    reader()        a librdkafka consumer that assigns partitions and never joins its group nor commits

The command config is librdkafka's properties (`key=value` lines, `#` comments): security.protocol,
sasl.*, ssl.*, and any other client setting. It goes into every client; the reader's settings the
exactly-once copy depends on (`_READER_FIXED`) win over it.

Errors: every librdkafka error leaves this module as a KanalError found by name (kanal's codes carry
Kafka's names: broker/kafka/errors.py), so the flow retries a Kafka source as it does a kanal one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition

# confluent_kafka.admin has no __all__, so mypy --strict (no implicit re-export) refuses these names from
# it; they are imported from where confluent_kafka documents them all the same.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ConfigSource,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)

from kanal.deploy.mirror.source import SourceReader, SourceRecord, TopicPartition
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger("kanal.mirror")

T = TypeVar("T")

REQUEST_TIMEOUT_S = 15.0  # each admin call, as KanalSource's request_timeout_ms
POLL_RECORDS_MAX = 5_000  # per poll(), as KanalReader's max_poll_records

# The reader's settings the copy's correctness rests on, over anything the command config says.
_READER_FIXED: dict[str, str | bool] = {
    # A source transaction's records are copied once it commits, never when it aborts.
    "isolation.level": "read_committed",
    # Positions live in the flow's target transactions; a commit on the source would be a second truth
    # (and need a group ACL there). librdkafka still wants a group.id, which nothing is committed to.
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # A position below the log start (retention deleted what was not copied yet): copy what is left rather
    # than jump to the end.
    "auto.offset.reset": "earliest",
}

# None: any name, principal and host (the stub says str; librdkafka's filter takes NULL).
_TOPIC_ACLS = AclBindingFilter(
    ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
    AclOperation.ANY, AclPermissionType.ANY)
_PATTERNS = {ResourcePatternType.LITERAL: metadata_pb2.ACL_PATTERN_LITERAL,
             ResourcePatternType.PREFIXED: metadata_pb2.ACL_PATTERN_PREFIXED}
_PERMISSIONS = {AclPermissionType.ALLOW: metadata_pb2.ACL_PERMISSION_ALLOW,
                AclPermissionType.DENY: metadata_pb2.ACL_PERMISSION_DENY}

# librdkafka's names that are not kanal's: its own spellings of Kafka's errors and its local errors ("_"),
# each as the kanal code a caller acts on the same way. Any other name is kanal's or UNKNOWN_SERVER_ERROR.
_KANAL_NAME = {
    "UNKNOWN_TOPIC_OR_PART": "UNKNOWN_TOPIC_OR_PARTITION",
    "_UNKNOWN_TOPIC": "UNKNOWN_TOPIC_OR_PARTITION",
    "_UNKNOWN_PARTITION": "UNKNOWN_TOPIC_OR_PARTITION",
    "NOT_LEADER_FOR_PARTITION": "NOT_LEADER_OR_FOLLOWER",
    "REPLICA_NOT_AVAILABLE": "LEADER_NOT_AVAILABLE",
    "INVALID_MSG": "CORRUPT_MESSAGE",
    "_BAD_MSG": "CORRUPT_MESSAGE",
    "_BAD_COMPRESSION": "CORRUPT_MESSAGE",
    "MSG_SIZE_TOO_LARGE": "MESSAGE_TOO_LARGE",
    "INVALID_MSG_SIZE": "MESSAGE_TOO_LARGE",
    "RECORD_LIST_TOO_LARGE": "MESSAGE_TOO_LARGE",
    "_TIMED_OUT": "REQUEST_TIMED_OUT",
    "_TIMED_OUT_QUEUE": "REQUEST_TIMED_OUT",
    "_MSG_TIMED_OUT": "REQUEST_TIMED_OUT",
    "_TRANSPORT": "BROKER_NOT_AVAILABLE",
    "_ALL_BROKERS_DOWN": "BROKER_NOT_AVAILABLE",
    "_RESOLVE": "BROKER_NOT_AVAILABLE",
    "_UNKNOWN_BROKER": "BROKER_NOT_AVAILABLE",
    "NETWORK_EXCEPTION": "BROKER_NOT_AVAILABLE",
    "_AUTHENTICATION": "AUTHENTICATION_FAILED",
    "_SSL": "AUTHENTICATION_FAILED",
    "SASL_AUTHENTICATION_FAILED": "AUTHENTICATION_FAILED",
    "UNSUPPORTED_SASL_MECHANISM": "AUTHENTICATION_FAILED",
    "ILLEGAL_SASL_STATE": "AUTHENTICATION_FAILED",
    "KAFKA_STORAGE_ERROR": "STORAGE_ERROR",
    "_AUTO_OFFSET_RESET": "OFFSET_OUT_OF_RANGE",
    "TOPIC_EXCEPTION": "INVALID_TOPIC",
    "_UNKNOWN_GROUP": "GROUP_ID_NOT_FOUND",
    "_INVALID_ARG": "INVALID_REQUEST",
    "UNSUPPORTED_VERSION": "INVALID_REQUEST",
    # These say the flow's own (target) producer was fenced, which ends the flow (flow.FENCED); nothing on
    # the source may read as that.
    "PRODUCER_FENCED": "UNKNOWN_SERVER_ERROR",
    "INVALID_PRODUCER_EPOCH": "UNKNOWN_SERVER_ERROR",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": "UNKNOWN_SERVER_ERROR",
}
# Client-level errors (librdkafka's error_cb) that stop a reader: retrying cannot fix a rejected login or
# certificate. The others (a broker down, a connection lost) librdkafka recovers from by itself.
_READER_STOPS = frozenset((KafkaError._AUTHENTICATION, KafkaError._SSL,
                           KafkaError.SASL_AUTHENTICATION_FAILED))


def read_command_config(path: Path) -> dict[str, str]:
    """librdkafka's properties in a command-config file; ValueError naming the file and line of a line that
    is not `key=value` (its text is not repeated: it may hold a password)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"command-config {path}: cannot read it: {exc}") from exc
    props = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"command-config {path}, line {number}: not a `key=value` line")
        props[key.strip()] = value.strip()
    return props


def kanal_error(err: KafkaError, what: str) -> KanalError:
    """librdkafka's error as kanal's, `what` saying what failed."""
    name = _KANAL_NAME.get(err.name(), err.name())
    known = name in ErrorCode.keys()  # noqa: SIM118 - protobuf's enum wrapper, not a dict
    code = ErrorCode.Value(name) if known else ErrorCode.UNKNOWN_SERVER_ERROR
    return KanalError(code, f"{what}: {err.str()} (librdkafka {err.name()})")


def translated(exc: KafkaException, what: str) -> KanalError:
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        return kanal_error(error, what)
    return KanalError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: {exc}")


def _result(future: Future[T], what: str) -> T:
    """An admin call's answer (the call's request_timeout bounds the wait)."""
    try:
        return future.result()
    except KafkaException as exc:
        raise translated(exc, what) from exc


def acl_entry(binding: AclBinding) -> metadata_pb2.AccessControlEntry | None:
    """A Kafka topic ACL as kanal's entry; None for one kanal cannot express (an operation or pattern type
    newer than kanal's, which Kafka reports as UNKNOWN)."""
    # AclBinding turns its fields into the enums; the stub still says "or str or int".
    pattern_type, permission_type, operation = (
        binding.resource_pattern_type, binding.permission_type, binding.operation)
    pattern = _PATTERNS.get(pattern_type) if isinstance(pattern_type, ResourcePatternType) else None
    permission = _PERMISSIONS.get(permission_type) if isinstance(permission_type, AclPermissionType) else None
    operation_name = f"ACL_OPERATION_{operation.name}" if isinstance(operation, AclOperation) else ""
    if pattern is None or permission is None or operation in (AclOperation.UNKNOWN, AclOperation.ANY) \
            or operation_name not in metadata_pb2.AclOperation.keys():  # noqa: SIM118 - not a dict
        log.warning("kafka source: ACL %s has no kanal equivalent: not copied", binding)
        return None
    return metadata_pb2.AccessControlEntry(
        resource_type=metadata_pb2.ACL_RESOURCE_TOPIC, resource_name=binding.name, pattern_type=pattern,
        principal=binding.principal, host=binding.host,
        operation=metadata_pb2.AclOperation.Value(operation_name), permission=permission)


def _headers(raw: Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None,
             ) -> tuple[tuple[str, bytes | None], ...]:
    if not raw:
        return ()
    items = raw.items() if isinstance(raw, Mapping) else raw
    return tuple((key, value.encode() if isinstance(value, str) else value) for key, value in items)


def _required(value: T | None, what: str) -> T:
    """A field librdkafka sets on every record it returns without an error."""
    if value is None:
        raise RuntimeError(f"librdkafka returned a record without its {what}")
    return value


class KafkaReader:
    """A read_committed librdkafka consumer over the partitions assign() names (source.py's SourceReader).
    One thread: librdkafka runs error_cb and its log lines inside poll()."""

    def __init__(self, config: Mapping[str, object], *, wall_ms: Callable[[], int]) -> None:
        self._wall_ms = wall_ms
        self._assigned: dict[TopicPartition, int | None] = {}
        # From error_cb, raised by every poll() after it: a failed reader stays failed (the flow replaces it).
        self._failure: KafkaError | None = None
        self._closed = False
        try:
            self._consumer = Consumer({**config, **_READER_FIXED, "error_cb": self._on_error,
                                       "logger": logging.getLogger("kanal.mirror.librdkafka")})
        except KafkaException as exc:  # a property librdkafka does not know, or a bad value
            raise ValueError(f"kafka source: {translated(exc, 'consumer config').message}") from exc

    def assign(self, positions: dict[TopicPartition, int | None]) -> None:
        for tp, offset in positions.items():
            # librdkafka reads -1 as "the end" and -2 as "the start": a negative position is a bug, not that.
            if offset is not None and offset < 0:
                raise KanalError(ErrorCode.INVALID_REQUEST, f"{tp[0]} [{tp[1]}]: position {offset}")
        partitions = [KafkaTopicPartition(topic, partition, OFFSET_BEGINNING if offset is None else offset)
                      for (topic, partition), offset in positions.items()]
        try:
            self._consumer.assign(partitions)  # replaces the assignment: exactly these partitions
        except KafkaException as exc:
            raise translated(exc, "assign") from exc
        self._assigned = dict(positions)

    def poll(self, timeout_s: float) -> list[SourceRecord]:
        try:
            messages = self._consumer.consume(num_messages=POLL_RECORDS_MAX, timeout=timeout_s)
        except KafkaException as exc:
            raise translated(exc, "poll") from exc
        if self._failure is not None:
            raise kanal_error(self._failure, "kafka source")
        records = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:  # news, not an error (enable.partition.eof)
                    continue
                # Records already taken from this batch are dropped: the flow rewinds on any error.
                raise kanal_error(error, f"reading {message.topic()} [{message.partition()}]")
            records.append(self._record(message))
        return records

    def _record(self, message: Message[bytes, bytes]) -> SourceRecord:
        timestamp_type, timestamp_ms = message.timestamp()
        if timestamp_type == TIMESTAMP_NOT_AVAILABLE:
            # A record from before message format v1 (Kafka < 0.10): none to copy. The copy gets the time it
            # is read, as MirrorMaker 2 gives it the time it is produced.
            timestamp_ms = self._wall_ms()
        return SourceRecord(_required(message.topic(), "topic"), _required(message.partition(), "partition"),
                            _required(message.offset(), "offset"), timestamp_ms, message.key(),
                            message.value(), _headers(message.headers()))

    def position(self, tp: TopicPartition, timeout_s: float) -> int:
        """librdkafka's position: the offset after the last record poll() returned, and past the
        transaction markers and aborted records it skipped after it. `timeout_s` is not waited: that
        position moves only inside poll(), so waiting here could not make it known."""
        if tp not in self._assigned:
            raise KanalError(ErrorCode.INVALID_REQUEST, f"{tp[0]} [{tp[1]}]: not assigned")
        (current,) = self._consumer.position([KafkaTopicPartition(*tp)])
        if current.error is not None:
            raise kanal_error(current.error, f"position of {tp[0]} [{tp[1]}]")
        if current.offset >= 0:
            return int(current.offset)
        # OFFSET_INVALID: nothing fetched since assign() (or nothing there to fetch). A partition assigned
        # at an offset is still there; one assigned at its log start has no known offset yet.
        assigned = self._assigned[tp]
        if assigned is not None:
            return assigned
        raise KanalError(ErrorCode.REQUEST_TIMED_OUT,
                         f"{tp[0]} [{tp[1]}]: position not known (nothing fetched from the log start yet)")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._consumer.close()  # commits nothing: auto commit is off

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal() or error.code() in _READER_STOPS:
            self._failure = self._failure or error
        else:
            log.warning("kafka source: %s (librdkafka %s; it retries)", error.str(), error.name())


class KafkaSource:
    """Any Kafka-protocol cluster, read through librdkafka (source.py's SourceCluster)."""

    kind = "kafka"

    def __init__(self, bootstrap: str, command_config: Path | None, *, client_id: str,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.bootstrap, self.command_config, self.client_id = bootstrap, command_config, client_id
        props = read_command_config(command_config) if command_config is not None else {}
        # The mirror config's bootstrap wins over one in the file; the file's client.id over the default.
        self._config: dict[str, str | int | float | bool] = {
            "client.id": client_id, **props, "bootstrap.servers": bootstrap}
        self._wall_ms = wall_ms
        try:
            self._admin = AdminClient(self._config)
        except KafkaException as exc:
            where = f"command-config {command_config}" if command_config is not None else "kafka source"
            raise ValueError(f"{where}: {translated(exc, 'client config').message}") from exc

    def topics(self, wanted: Callable[[str], bool] | None = None) -> dict[str, int]:
        try:
            metadata = self._admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise translated(exc, "list topics") from exc
        # A topic being deleted (or created) can be listed with an error and no partitions: left for later.
        return {name: len(topic.partitions) for name, topic in metadata.topics.items()
                if topic.partitions and (wanted is None or wanted(name))}

    def topic_configs(self, topic: str) -> dict[str, str]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        (future,) = self._admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT_S).values()
        entries = _result(future, f"describe configs of {topic}")
        # The source comes back as an int, the enum's value: ConfigSource() takes either.
        return {name: entry.value for name, entry in entries.items()
                if ConfigSource(entry.source) is ConfigSource.DYNAMIC_TOPIC_CONFIG
                and entry.value is not None}

    def topic_acls(self) -> list[metadata_pb2.AccessControlEntry]:
        try:
            bindings = _result(self._admin.describe_acls(_TOPIC_ACLS, request_timeout=REQUEST_TIMEOUT_S),
                               "describe ACLs")
        except KanalError as exc:
            # No authorizer: Kafka answers SECURITY_DISABLED (librdkafka 2.16 turns that into no ACLs).
            if exc.code == ErrorCode.SECURITY_DISABLED:
                return []
            raise
        return [entry for entry in map(acl_entry, bindings) if entry is not None]

    def groups(self) -> list[str]:
        listed = _result(self._admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S), "list groups")
        for error in listed.errors:
            # A broker that did not answer: its groups are left out of this round of checkpoints, the next
            # round lists again. Failing the flow (abort, rewind) for it would be out of proportion.
            log.warning("kafka source: listing groups: %s", error)
        return sorted(group.group_id for group in listed.valid)

    def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        request = [ConsumerGroupTopicPartitions(group)]
        futures = self._admin.list_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)
        (future,) = futures.values()
        try:
            answer = _result(future, f"offsets of group {group}")
        except KanalError as exc:
            if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:  # gone since groups(): it has no offsets
                return {}
            raise
        # -1001 (no offset committed) is left out, and so is a partition with an error (an offset still in
        # an open transaction: UNSTABLE_OFFSET_COMMIT), which the next checkpoint reads again.
        return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions
                if tp.error is None and tp.offset >= 0}

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark (read_uncommitted). A read_committed reader stops at the LSO; the HW is above it
        only while a source transaction is open, and the lag then counts the records waiting for its commit.
        Once it ends the reader's position moves past its marker, up to the HW."""
        if not partitions:
            return {}
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        specs = {KafkaTopicPartition(topic, partition): latest for topic, partition in partitions}
        futures = self._admin.list_offsets(specs, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                           request_timeout=REQUEST_TIMEOUT_S)
        ends = {}
        for tp, future in futures.items():
            answer = _result(future, f"end offset of {tp.topic} [{tp.partition}]")
            ends[(tp.topic, tp.partition)] = int(answer.offset)
        return ends

    def reader(self) -> SourceReader:
        # The group.id is never joined nor committed to; the command config may name one (a source whose
        # ACLs allow only some group names).
        config = {"group.id": f"{self.client_id}-reader", **self._config}
        return KafkaReader(config, wall_ms=self._wall_ms)

    def close(self) -> None:
        """Nothing to do: confluent_kafka's AdminClient has no close() (its connections end when the object
        is freed), and a flow closes the readers it made."""
