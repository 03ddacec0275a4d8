"""Options and offsets of the `kanal` Spark source and sink (Structured Streaming and batch), typed and
validated, and the pure offset arithmetic the stream reader does on the driver.

The option names are the Spark–Kafka connector's where they apply, so a Kafka job changes its format name
and little else: `kafka.bootstrap.servers` (or kanal's own `bootstrap`), `subscribe` (comma-separated
topics), `subscribePattern` (a regular expression over topic names), `assign` (JSON `{"topic":[0,1]}`),
`startingOffsets` / `endingOffsets` (`earliest`, `latest` or JSON `{"topic":{"0":23,"1":-2}}`, -2 meaning
earliest and -1 latest), `startingTimestamp` (ms since the epoch, every partition),
`maxOffsetsPerTrigger`, `failOnDataLoss`, `kafka.isolation.level`; the sink's `topic`. TLS and credentials
as the other sources (`source_options.SECURITY_OPTIONS`). Unknown options are refused.

Offsets, the stream's checkpointed offset format (as the Kafka connector's JSON): `{"topic": {"0": 23}}`,
the next offset to read of each partition. A partition that appears later (a partition increase, a new
topic matching the pattern) is read from its earliest offset: in a range, its start is EARLIEST.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from kanal.security.channel_security import ClientSecurity
from kanal.spark.source_options import SECURITY_OPTIONS
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import TopicPartition

EARLIEST = -2
LATEST = -1
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")

Offsets = dict[str, dict[str, int]]  # topic -> str(partition) -> next offset to read

_READ_OPTIONS = {"kafka.bootstrap.servers", "bootstrap", "subscribe", "subscribepattern", "assign",
                 "startingoffsets", "endingoffsets", "startingtimestamp", "maxoffsetspertrigger",
                 "failondataloss", "kafka.isolation.level", *SECURITY_OPTIONS}
# Spark hands a stream writer the query's checkpointLocation among its options: Spark's, not the sink's.
_WRITE_OPTIONS = {
    "kafka.bootstrap.servers",
    "bootstrap",
    "topic",
    "transactionalidprefix",
    "checkpointlocation",
    *SECURITY_OPTIONS,
}


def _bad(message: str) -> KanalError:
    return KanalError(ErrorCode.INVALID_CONFIG, f"kanal source: {message}")


def _lowered(options: Mapping[str, str], known: set[str]) -> dict[str, str]:
    given = {k.lower(): v for k, v in options.items()}
    unknown = sorted(set(given) - known)
    if unknown:
        raise _bad(f"unknown options {unknown}; known: {sorted(known)}")
    return given


def _bootstrap(given: dict[str, str]) -> str:
    both = [given[k] for k in ("kafka.bootstrap.servers", "bootstrap") if k in given]
    if not both or not both[0].strip():
        raise _bad("give the brokers: option kafka.bootstrap.servers (or bootstrap) = host:port[,host:port]")
    if len(both) == 2 and both[0] != both[1]:
        raise _bad("kafka.bootstrap.servers and bootstrap differ: give one")
    return both[0].strip()


def _security(given: dict[str, str]) -> ClientSecurity | None:
    fields = {name: given[option] for option, name in SECURITY_OPTIONS.items() if option in given}
    return ClientSecurity(**fields) if fields else None


def _int(given: dict[str, str], key: str, name: str, low: int) -> int | None:
    if key not in given:
        return None
    try:
        value = int(given[key])
    except ValueError:
        raise _bad(f"{name} must be an integer, got {given[key]!r}") from None
    if value < low:
        raise _bad(f"{name} must be >= {low}, got {value}")
    return value


def _bool(given: dict[str, str], key: str, name: str, default: bool) -> bool:
    value = given.get(key, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise _bad(f"{name} must be true or false, got {given[key]!r}")
    return value == "true"


def parse_offsets_spec(text: str, name: str) -> str | Offsets:
    """`earliest`, `latest`, or per-partition JSON {"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest)."""
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return stripped.lower()
    try:
        raw = json.loads(stripped)
    except json.JSONDecodeError:
        raise _bad(
            f'{name} must be earliest, latest or JSON like {{"topic":{{"0":23}}}}, got {text!r}'
        ) from None
    if not isinstance(raw, dict):
        raise _bad(f"{name} JSON must be an object of topics, got {text!r}")
    out: Offsets = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise _bad(f"{name}: topic {topic!r} must map partitions to offsets")
        out[topic] = {}
        for partition, offset in parts.items():
            if (
                not str(partition).isdigit()
                or isinstance(offset, bool)
                or not isinstance(offset, int)
                or offset < -2
            ):
                raise _bad(
                    f"{name}: {topic}/{partition} -> {offset!r} is not a partition and an offset >= -2"
                )
            out[topic][str(int(partition))] = offset
    return out


@dataclass(frozen=True, slots=True)
class ReadOptions:
    bootstrap: str
    subscribe: tuple[str, ...] = ()
    pattern: str = ""
    assign: tuple[TopicPartition, ...] = ()
    starting: str | Offsets = "latest"
    starting_timestamp_ms: int | None = None
    ending: str | Offsets = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    isolation_level: str = "read_committed"
    security: ClientSecurity | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
        given = _lowered(options, _READ_OPTIONS)
        bootstrap = _bootstrap(given)
        ways = [k for k in ("subscribe", "subscribepattern", "assign") if k in given]
        if len(ways) != 1:
            raise _bad(f"give exactly one of subscribe, subscribePattern, assign (got {ways or 'none'})")
        subscribe = tuple(t.strip() for t in given.get("subscribe", "").split(",") if t.strip())
        if "subscribe" in given and not subscribe:
            raise _bad("subscribe names no topic")
        pattern = given.get("subscribepattern", "")
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise _bad(f"subscribePattern {pattern!r} is not a regular expression: {exc}") from None
        assign: tuple[TopicPartition, ...] = ()
        if "assign" in given:
            try:
                raw = json.loads(given["assign"])
                assign = tuple(sorted((str(t), int(p)) for t, ps in raw.items() for p in ps))
            except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
                raise _bad(f"assign must be JSON like {{\"topic\":[0,1]}}, got {given['assign']!r}") from None
            if not assign or any(p < 0 for _, p in assign):
                raise _bad(f"assign names no partition or a negative one: {given['assign']!r}")
        starting = parse_offsets_spec(given.get("startingoffsets", "latest" if streaming else "earliest"),
                                      "startingOffsets")
        timestamp = _int(given, "startingtimestamp", "startingTimestamp", 0)
        if timestamp is not None and "startingoffsets" in given:
            raise _bad("give startingOffsets or startingTimestamp, not both")
        if streaming and "endingoffsets" in given:
            raise _bad("endingOffsets applies to batch reads (spark.read) only; a stream has no end")
        ending = parse_offsets_spec(given.get("endingoffsets", "latest"), "endingOffsets")
        if ending == "earliest" or (isinstance(ending, dict) and any(
                o == EARLIEST for parts in ending.values() for o in parts.values())):
            raise _bad("endingOffsets may not be earliest (as the Kafka connector)")
        if (
            isinstance(starting, dict)
            and any(o == LATEST for parts in starting.values() for o in parts.values())
            and not streaming
        ):
            raise _bad("startingOffsets may not be latest (-1) in a batch read (as the Kafka connector)")
        if starting == "latest" and not streaming:
            raise _bad("startingOffsets may not be latest in a batch read (as the Kafka connector)")
        max_offsets = _int(given, "maxoffsetspertrigger", "maxOffsetsPerTrigger", 1)
        if max_offsets is not None and not streaming:
            raise _bad("maxOffsetsPerTrigger applies to streaming reads only")
        isolation = given.get("kafka.isolation.level", "read_committed").strip().lower()
        if isolation not in ISOLATION_LEVELS:
            raise _bad(f"kafka.isolation.level must be one of {ISOLATION_LEVELS}, got {isolation!r}")
        return cls(bootstrap, subscribe, pattern, assign, starting, timestamp, ending, max_offsets,
                   _bool(given, "failondataloss", "failOnDataLoss", True), isolation, _security(given))

    def wants(self, topic: str, internal: bool) -> bool:
        """Whether a topic of the cluster belongs to a subscription (assign lists partitions itself)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.pattern:
            return not internal and re.fullmatch(self.pattern, topic) is not None
        return False


@dataclass(frozen=True, slots=True)
class WriteOptions:
    bootstrap: str
    topic: str = ""  # for rows without a topic column (or a null topic)
    transactional_id_prefix: str = ""  # streams: "" means kanal-sink-<query id>
    security: ClientSecurity | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        given = _lowered(options, _WRITE_OPTIONS)
        return cls(
            _bootstrap(given),
            given.get("topic", "").strip(),
            given.get("transactionalidprefix", "").strip(),
            _security(given),
        )


# ---- the pure offset arithmetic ----

def offsets_of(positions: Mapping[TopicPartition, int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def positions_of(offsets: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def capped_end(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_rows: int | None) -> dict[TopicPartition, int]:
    """The end of the next micro-batch: `latest`, or with `max_rows` at most that many offsets past `start`,
    shared in proportion to each partition's backlog (as the Kafka connector), the rounding remainder given
    in partition order so a backlog always moves. A partition missing from `start` is new: read from its
    earliest, whose offset `latest` lists under it as well (the caller passes its earliest in `start`)."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if max_rows is None or total <= max_rows:
        return {tp: max(latest[tp], start.get(tp, latest[tp])) for tp in latest}
    share = {tp: (max_rows * n) // total for tp, n in backlog.items()}
    left = max_rows - sum(share.values())
    for tp in sorted(backlog):
        extra = min(left, backlog[tp] - share[tp])
        share[tp] += extra
        left -= extra
    return {tp: start.get(tp, latest[tp]) + share[tp] for tp in latest}


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # EARLIEST for a partition first seen in this range
    end: int  # exclusive


def ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """One range per partition with something to read; a partition only in `end` starts at EARLIEST."""
    out = []
    for (topic, partition), until in sorted(end.items()):
        since = start.get((topic, partition), EARLIEST)
        if since == EARLIEST or since < until:
            out.append(OffsetRange(topic, partition, since, until))
    return out
