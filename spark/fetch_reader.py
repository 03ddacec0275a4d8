"""FetchReader: a partition's stored batches read from a live cluster with the Fetch RPC, for jobs that run
where the data directories are not mounted (pods).

It speaks the public contract only (kanal.v1 stubs; spark/ never imports kanal.clients): Metadata from
any bootstrap broker for the partition list and leaders, then consumer Fetches (replica_id -1) from the
leader, from the log start to the high-water mark seen by the first fetch (read_committed: to the last
stable offset the first fetch answers, with each reply's aborted transactions handed to the caller's
transactions.AbortedFilter before that reply's batches). Fetch responses carry batches
in the same log-entry framing as segment files, so they go through the same checked walk
(kanal.v1.batch.iter_entries) and the same row builder. A leader change mid-read (NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH) refreshes the metadata and resumes at the next offset; every wait has a deadline.

A failed call is the KanalError kanal.v1.error_trailer.call_error makes of it (the server's error
trailer, else the gRPC status). A retriable one (a broker down or starting, a moved leader) is retried
until the deadline and then raised with its code; any other (an authorization refusal, an invalid
request) is raised at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from kanal.net.channel_options import channel_options
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.spark.segment_reader import SegmentDamage, StoredEntry
from kanal.spark.transactions import AbortedFilter
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.batch import CorruptEntry, iter_entries
from kanal.v1.error import ErrorCode, KanalError, error_name
from kanal.v1.error_trailer import call_error

# gRPC message limit for fetch replies (a reply holds at least one whole batch of up to ~1 MiB).
_MESSAGE_BYTES_MAX = 64 * 1024 * 1024
_CHANNEL_OPTIONS = channel_options(_MESSAGE_BYTES_MAX)
FETCH_BYTES_MAX = 8 * 1024 * 1024
REQUEST_TIMEOUT_S = 30.0
# How long a partition read keeps retrying retriable errors (leader elections) before it fails.
RETRY_DEADLINE_S = 60.0
_RETRY_PAUSE_S = 0.2


@dataclass(frozen=True, slots=True)
class FetchPartition:
    topic: str
    partition: int


def _channel(endpoint: str, security: ClientSecurity | None) -> grpc.Channel:
    return open_channel(endpoint, _CHANNEL_OPTIONS, security)


def cluster_metadata(bootstrap: str, topics: list[str] | None = None,
                     security: ClientSecurity | None = None) -> broker_pb2.MetadataResponse:
    """Metadata from the first bootstrap broker that answers; a refusal that is not retriable (credentials,
    an authorization) at once, as another broker would refuse the same."""
    problems: list[str] = []
    for endpoint in [e.strip() for e in bootstrap.split(",") if e.strip()]:
        with _channel(endpoint, security) as channel:
            try:
                return broker_pb2_grpc.BrokerStub(channel).Metadata(
                    broker_pb2.MetadataRequest(topics=topics or []), timeout=REQUEST_TIMEOUT_S)
            except grpc.RpcError as exc:
                error = call_error(exc)
                if not error.retriable:
                    raise KanalError(error.code, f"Metadata from {endpoint}: {error.message}") from None
                # One line per endpoint: the status and gRPC's own detail, not the exception's multi-line
                # repr.
                problems.append(f"{endpoint} ({error.message.split(chr(10), 1)[0]})")
    raise KanalError(
        ErrorCode.BROKER_NOT_AVAILABLE,
        f"no bootstrap broker of {bootstrap!r} answered: {'; '.join(problems) or 'no endpoints given'}",
    )


def list_partitions(bootstrap: str, topics: frozenset[str] | None, internal: bool,
                    security: ClientSecurity | None = None) -> list[FetchPartition]:
    """Every partition of the topics wanted (all, or internal ones too when `internal`)."""
    reply = cluster_metadata(bootstrap, sorted(topics) if topics else None, security)
    out: list[FetchPartition] = []
    for topic in reply.topics:
        if topic.error != ErrorCode.NONE:
            raise KanalError(topic.error, f"topic {topic.name}: {error_name(topic.error)}")
        if topic.is_internal and not internal and not topics:
            continue
        out.extend(FetchPartition(topic.name, p.partition) for p in topic.partitions)
    return sorted(out, key=lambda p: (p.topic, p.partition))


def _leader_endpoint(
    bootstrap: str, topic: str, partition: int, security: ClientSecurity | None
) -> str | None:
    reply = cluster_metadata(bootstrap, [topic], security)
    endpoints = {b.broker_id: b.endpoint for b in reply.brokers}
    for t in reply.topics:
        for p in t.partitions:
            if t.name == topic and p.partition == partition and p.leader >= 0:
                return endpoints.get(p.leader)
    return None


def fetch_partition(bootstrap: str, part: FetchPartition, security: ClientSecurity | None = None,
                    aborted: AbortedFilter | None = None) -> Iterator[StoredEntry | SegmentDamage]:
    """Every batch of one partition from its log start to the high-water mark at the first fetch; with
    `aborted` (read_committed), to the last stable offset, the filter told of every aborted transaction
    the replies name."""
    source = f"fetch://{part.topic}-{part.partition}"
    offset = 0
    end: int | None = None
    deadline = time.monotonic() + RETRY_DEADLINE_S
    endpoint: str | None = None
    while end is None or offset < end:
        if endpoint is None:
            endpoint = _leader_endpoint(bootstrap, part.topic, part.partition, security)
        try:
            if endpoint is None:
                raise KanalError(ErrorCode.LEADER_NOT_AVAILABLE, "no leader")
            data = _fetch_once(endpoint, part, offset, security, aborted is not None)
            if data.error == ErrorCode.OFFSET_OUT_OF_RANGE and offset < data.log_start_offset:
                offset = data.log_start_offset  # retention moved the start: read from there
                endpoint = None
                continue
            if data.error != ErrorCode.NONE:
                raise KanalError(data.error, data.error_message or error_name(data.error))
        except KanalError as error:
            endpoint = None  # ask again who leads
            if not error.retriable or time.monotonic() > deadline:
                raise KanalError(error.code, f"fetch {part.topic}-{part.partition} at {offset}: "
                                             f"{error.message}") from None
            time.sleep(_RETRY_PAUSE_S)  # a retry backoff, not a synchronisation
            continue
        if end is None:
            end = data.high_watermark if aborted is None else data.last_stable_offset
            offset = max(offset, data.log_start_offset)
        if aborted is not None:
            aborted.add((a.producer_id, a.first_offset) for a in data.aborted_transactions)
        if not data.records:
            break
        try:
            for entry in iter_entries(data.records, verify_crc=True):
                suffix = entry.suffix
                if suffix.last_offset >= end:
                    return
                if suffix.last_offset >= offset:
                    yield StoredEntry(
                        entry.position,
                        suffix.base_offset,
                        suffix.last_offset,
                        suffix.leader_epoch,
                        entry.batch,
                        entry.header,
                    )
                offset = suffix.last_offset + 1
        except CorruptEntry as exc:
            # A damaged batch on the leader: report it; the next fetch starts after it is impossible to
            # locate, so the rest of this partition is reported unread.
            yield SegmentDamage(source, exc.position, offset, len(data.records) - exc.position, exc.message)
            return
        deadline = time.monotonic() + RETRY_DEADLINE_S


def _fetch_once(endpoint: str, part: FetchPartition, offset: int, security: ClientSecurity | None,
                read_committed: bool = False) -> broker_pb2.FetchResponse.PartitionData:
    """The partition's answer to one Fetch; a failed call, or a reply without the partition, as a
    KanalError."""
    isolation = broker_pb2.READ_COMMITTED if read_committed else broker_pb2.READ_UNCOMMITTED
    request = broker_pb2.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=FETCH_BYTES_MAX, isolation_level=isolation,
        topics=[broker_pb2.FetchRequest.TopicRequest(topic=part.topic, partitions=[
            broker_pb2.FetchRequest.PartitionRequest(partition=part.partition, fetch_offset=offset,
                                                     max_bytes=FETCH_BYTES_MAX, current_leader_epoch=-1,
                                                     last_fetched_epoch=-1)])])
    with _channel(endpoint, security) as channel:
        try:
            reply = broker_pb2_grpc.BrokerStub(channel).Fetch(request, timeout=REQUEST_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise call_error(exc, f"Fetch from {endpoint}") from None
    for topic in reply.topics:
        for p in topic.partitions:
            return p
    raise KanalError(ErrorCode.LEADER_NOT_AVAILABLE, f"Fetch from {endpoint}: no answer for the partition")
