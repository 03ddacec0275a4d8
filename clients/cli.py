"""The `kanal` client commands: topics, produce, consume, groups, cluster, configs, quotas, acls, users, perf,
schemas.

Every command takes TLS settings and credentials (--tls-ca-file, --tls-cert-file, --tls-key-file, --user,
--password, or --command-config FILE): see kanal.commands.command_config.

Every command takes --bootstrap HOST:PORT[,...]; without it, $KANAL_BOOTSTRAP, else the cluster that
`kanal dev` is running (it writes its address to $KANAL_HOME/dev.json, ~/.kanal by default); with none of
them, NO_CLUSTER. Every command prints text or, with --output json, JSON: data on stdout, an error as one
JSON object on stderr. Errors are one line and a documented exit status (kanal.commands.report; docs/cli.md).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import sys
import time

from kanal.clients.acls_cli import add_acls_parser
from kanal.clients.admin import BROKER, TOPIC, Admin, TopicDescription
from kanal.clients.cli_formats import compile_format, parse_duration_ms, parse_timestamp_ms
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.operations_cli import add_operations_parsers
from kanal.clients.perf_cli import add_client_rack_flag, add_perf_parser
from kanal.clients.producer import Producer
from kanal.clients.producer_config import (
    REQUEST_TIMEOUT_MS_DEFAULT,
    ProducerConfig,
    delivery_timeout_covering,
)
from kanal.clients.schemas_cli import (
    add_format_flags,
    add_schemas_parser,
    consumer_deserializers,
    json_line,
    json_text,
    producer_serializers,
)
from kanal.clients.serialization import RecordSerializationError
from kanal.commands.command_config import add_client_security_flags, layered_settings, security_from
from kanal.commands.dev_state import dev_state_path, read_dev_state
from kanal.commands.record_text import as_text, put_bytes
from kanal.commands.report import EXIT_FAILED, OUTPUT_HELP, CommandParser, bounded_number, report_error
from kanal.security.channel_security import ClientSecurity
from kanal.security.scram import ITERATIONS_DEFAULT, ITERATIONS_MAX, ITERATIONS_MIN, MECHANISMS
from kanal.v1.error import ErrorCode, KanalError


def default_bootstrap() -> str:
    if os.environ.get("KANAL_BOOTSTRAP"):
        return os.environ["KANAL_BOOTSTRAP"]
    state = read_dev_state()
    if state is None or not isinstance(state.get("bootstrap"), str):
        raise KanalError(
            ErrorCode.NO_CLUSTER,
            "no cluster to talk to: no --bootstrap given, $KANAL_BOOTSTRAP "
            f"unset, and no `kanal dev` running ({dev_state_path()} not found, or "
            "the kanal dev that wrote it has stopped)",
        )
    return state["bootstrap"]


def _bootstrap(args) -> str:
    if args.bootstrap or os.environ.get("KANAL_BOOTSTRAP"):
        return args.bootstrap or os.environ["KANAL_BOOTSTRAP"]
    return _settings(args).get("bootstrap") or default_bootstrap()


def _settings(args) -> dict[str, str]:
    """The security settings (and a bootstrap) of flags and client config files, read once per command."""
    if getattr(args, "_settings", None) is None:
        args._settings = layered_settings(
            args, os.environ, read_dev_state(),
            talks_to_dev=not args.bootstrap and not os.environ.get("KANAL_BOOTSTRAP"))
    return args._settings


def _admin(args) -> Admin:
    """An Admin for the command's cluster, with its security settings."""
    return Admin(_bootstrap(args), security=_security(args), request_timeout_ms=args.request_timeout_ms)


def _security(args):
    """TLS files and credentials for this command (kanal.commands.command_config); None: plaintext."""
    if getattr(args, "_security", None) is None:
        args._security = security_from(_settings(args)) or False
    return args._security or None


def _connection(args) -> tuple[str, ClientSecurity | None]:
    """(bootstrap, security) of this command, for the commands that open producers and consumers."""
    return _bootstrap(args), _security(args)


def _print(args, text_lines, data) -> None:
    if args.output == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        for line in text_lines:
            print(line)


def _configs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise KanalError(ErrorCode.INVALID_CONFIG, f"--config expects key=value, got {pair!r}")
        out[key] = value
    return out


# ---- topics ----

def topics_create(args) -> int:
    with _admin(args) as admin:
        try:
            topic_id = admin.create_topic(args.name, args.partitions, args.replication_factor,
                                          _configs(args.config))
        except KanalError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS or not args.if_not_exists:
                raise
            _print(args, [f"topic {args.name} exists already"], {"topic": args.name, "created": False})
            return 0
    _print(args, [(f"created topic {args.name} ({topic_id}) with {args.partitions} partitions, "
                   f"replication factor {args.replication_factor}")],
           {"topic": args.name, "topic_id": topic_id, "created": True, "partitions": args.partitions,
            "replication_factor": args.replication_factor})
    return 0


def topics_list(args) -> int:
    with _admin(args) as admin:
        names = admin.list_topics(include_internal=args.internal)
    _print(args, names, names)
    return 0


def _partition_filter(args, admin: Admin, topic: str):
    """kafka-topics' partition filters: which partitions of `topic` to show (None: all)."""
    if args.under_replicated_partitions:
        return lambda p: len(p.isr) < len(p.replicas)
    if args.unavailable_partitions:
        return lambda p: p.leader < 0 or bool(p.offline_reason)
    if args.at_min_isr_partitions:
        entries = {e.key: e.value for e in admin.describe_configs(TOPIC, topic)}
        min_isr = int(entries.get("min.insync.replicas", "1"))
        return lambda p: len(p.isr) == min_isr
    return None


def topics_describe(args) -> int:
    with _admin(args) as admin:
        names = [args.name] if args.name else admin.list_topics()
        descriptions = [admin.describe_topic(n) for n in names]
        keep = {d.name: _partition_filter(args, admin, d.name) for d in descriptions}
        if any(keep.values()):  # only the partitions asked for, and only topics that have some
            for d in descriptions:
                d.partitions[:] = [p for p in d.partitions if keep[d.name](p)]
            descriptions = [d for d in descriptions if d.partitions]
        starts = {d.name: _tiered_starts(admin, d) for d in descriptions}
    data = [{"name": d.name, "topic_id": d.topic_id, "internal": d.internal, "configs": d.configs,
             "partitions": [{"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                             "replicas": list(p.replicas), "isr": list(p.isr),
                             **({"offline_reason": p.offline_reason} if p.offline_reason else {}),
                             **_start_fields(starts[d.name], p.partition)}
                            for p in d.partitions]}
            for d in descriptions]
    lines = []
    for d in descriptions:
        configs = ",".join(f"{k}={v}" for k, v in sorted(d.configs.items())) or "-"
        lines.append(f"topic {d.name}  id {d.topic_id}  partitions {len(d.partitions)}  configs {configs}")
        for p in d.partitions:
            fields = _start_fields(starts[d.name], p.partition)
            lines.append(f"  partition {p.partition:>3}  leader {p.leader:>3}  epoch {p.leader_epoch:>3}  "
                         f"replicas {list(p.replicas)}  isr {list(p.isr)}"
                         + (f"  offline: {p.offline_reason}" if p.offline_reason else "")
                         + "".join(f"  {k.replace('_', ' ')} {v}" for k, v in fields.items()))
    _print(args, lines, data)
    return 0


def _tiered_starts(admin: Admin, d: TopicDescription) -> dict[int, tuple[int, int] | None] | None:
    """For a topic with remote.storage.enable (its own or the cluster default): each partition's log start
    (the remote log's, ListOffsets -2) and local log start (-4), None for a partition without a leader to
    ask; None for a topic without tiered storage."""
    entries = {e.key: e.value for e in admin.describe_configs(TOPIC, d.name)}
    if entries.get("remote.storage.enable", "false").lower() != "true":
        return None
    found: dict[int, tuple[int, int] | None] = {}
    for p in d.partitions:
        try:
            found[p.partition] = admin.tiered_log_starts(d.name, [p.partition])[p.partition]
        except KanalError as exc:
            if not exc.retriable:
                raise
            found[p.partition] = None  # leaderless until the request timeout: shown as unknown
    return found


def _start_fields(starts: dict[int, tuple[int, int] | None] | None, partition: int) -> dict[str, object]:
    if starts is None:
        return {}
    got = starts.get(partition)
    return {"log_start": got[0] if got else None, "local_log_start": got[1] if got else None}


def topics_delete(args) -> int:
    with _admin(args) as admin:
        try:
            admin.delete_topic(args.name)
        except KanalError as exc:
            if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or not args.if_exists:
                raise
            _print(args, [f"no topic {args.name}"], {"topic": args.name, "deleted": False})
            return 0
    _print(args, [f"deleted topic {args.name}"], {"topic": args.name, "deleted": True})
    return 0


def topics_alter(args) -> int:
    with _admin(args) as admin:
        if args.partitions:
            admin.create_partitions(args.name, args.partitions)
        if args.config or args.delete_config:
            admin.alter_configs(TOPIC, args.name, _configs(args.config), args.delete_config)
    _print(args, [f"altered topic {args.name}"],
           {"topic": args.name, "partitions": args.partitions, "set": _configs(args.config),
            "deleted": args.delete_config or []})
    return 0


# ---- produce / consume ----

def produce(args) -> int:
    security = _security(args)
    serializers = producer_serializers(args, security)  # --key-format / --value-format
    config = ProducerConfig(
        **serializers,
        bootstrap=_bootstrap(args),
        security=security,
        acks=args.acks,
        enable_idempotence=args.acks == "all",
        compression=args.compression,
        linger_ms=args.linger_ms,
        request_timeout_ms=args.request_timeout_ms,
        delivery_timeout_ms=delivery_timeout_covering(args.request_timeout_ms, args.linger_ms),
    )
    failures = []
    count = 0
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(open(args.file, "rb")) if args.file else sys.stdin.buffer
        producer = stack.enter_context(Producer(config))
        for number, line in enumerate(source, 1):
            line = line.rstrip(b"\r\n")
            key = None
            if args.key_separator:
                key, sep, value = line.partition(args.key_separator.encode())
                if not sep:
                    key, value = None, line
            else:
                value = line
            if args.key_format and key is not None:
                key = json_line(key, "key", number)
            if args.value_format:
                value = json_line(value, "value", number)
            headers = [(k, v.encode()) for k, _, v in (h.partition("=") for h in args.header or [])]
            try:
                producer.produce(args.topic, value, key=key, partition=args.partition, headers=headers,
                                 on_delivery=lambda err, meta: failures.append(err) if err else None)
            except RecordSerializationError as exc:  # the line's JSON does not fit its schema
                raise KanalError(exc.code, f"line {number}: {exc.message}") from exc
            count += 1
        producer.flush()
    if failures:
        raise failures[0]
    if args.output == "json":
        print(json.dumps({"topic": args.topic, "records": count}))
    else:
        print(f"produced {count} records to {args.topic}", file=sys.stderr)
    return 0


def consume(args) -> int:
    """Print records. Without --group: partitions by hand, from --offset / --from-timestamp /
    --from-beginning / the end. With --group: as a member of that group, from its committed offsets
    (--from-beginning only decides where partitions without one start), committing what was printed."""
    with _admin(args) as admin:
        partitions = [p.partition for p in admin.describe_topic(args.topic).partitions]
        if args.partition is not None and args.partition not in partitions:
            raise KanalError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"{args.topic} has no partition {args.partition} (it has {len(partitions)})")
        if args.offset is not None and not args.group:
            _check_offset(args, admin, [args.partition] if args.partition is not None else partitions)
    from_timestamp = None if args.from_timestamp is None else parse_timestamp_ms(args.from_timestamp)
    args.render = compile_format(args.format) if args.format else None
    security = _security(args)
    deserializers = consumer_deserializers(args, security)  # --key-format / --value-format
    reset = "earliest" if args.from_beginning else "latest"
    if args.group:
        if args.partition is not None or args.offset is not None or args.from_timestamp is not None:
            raise KanalError(
                ErrorCode.INVALID_REQUEST,
                "--group assigns partitions itself: --partition, --offset and --from-timestamp do not apply",
            )
        # Commits are explicit: exactly what was printed, so --max-messages leaves the rest for the group.
        consumer = Consumer(
            ConsumerConfig(
                **deserializers,
                bootstrap=_bootstrap(args),
                security=security,
                auto_offset_reset=reset,
                group_id=args.group,
                enable_auto_commit=False,
                client_id="kanal-console-consumer",
                isolation_level=args.isolation_level,
                request_timeout_ms=args.request_timeout_ms,
                client_rack=args.client_rack,
            )
        )
        consumer.subscribe([args.topic])
    else:
        consumer = Consumer(
            ConsumerConfig(**deserializers, bootstrap=_bootstrap(args), security=security,
                           auto_offset_reset=reset,
                           isolation_level=args.isolation_level, request_timeout_ms=args.request_timeout_ms,
                           client_rack=args.client_rack)
        )
        if args.partition is not None:
            partitions = [args.partition]
        consumer.assign([(args.topic, p) for p in partitions])
        for p in partitions:
            tp = (args.topic, p)
            if args.offset is not None:
                consumer.seek(tp, args.offset)
            elif from_timestamp is not None:
                consumer.seek_to_timestamp(tp, from_timestamp)
            elif args.from_beginning:
                consumer.seek_to_beginning([tp])
    seen = 0
    printed: dict[tuple[str, int], int] = {}
    idle_deadline = time.monotonic() + args.timeout_s if args.timeout_s else None
    try:
        while args.max_messages is None or seen < args.max_messages:
            records = consumer.poll(0.5)
            if not records:
                if idle_deadline is not None and time.monotonic() > idle_deadline:
                    break
                continue
            if idle_deadline is not None:
                idle_deadline = time.monotonic() + args.timeout_s
            for r in records:
                if args.max_messages is not None and seen >= args.max_messages:
                    break
                seen += 1
                _print_record(args, r)
                printed[(r.topic, r.partition)] = r.offset + 1
            if args.group and printed:
                consumer.commit(dict(printed))
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return 0


def _check_offset(args, admin: Admin, partitions: list[int]) -> None:
    """--offset must lie in every chosen partition's log (start..end: the end is where the next record
    goes, so reading from it waits for new records); else OFFSET_OUT_OF_RANGE, rather than nothing printed."""
    if args.offset < 0:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"--offset {args.offset}: offsets are 0 or more")
    for p, (start, end) in sorted(admin.log_bounds(args.topic, partitions).items()):
        if not start <= args.offset <= end:
            held = f"holds offsets {start} to {end - 1}" if end > start else f"is empty (log end {end})"
            raise KanalError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {args.offset} is outside {args.topic}-{p}'s log: it {held}; "
                             f"--offset {end} waits for the next record")


def _print_record(args, r) -> None:
    """One record; a key or value decoded by --key-format / --value-format is a JSON value: as itself in
    --output json, else as its JSON text."""
    key_decoded = bool(getattr(args, "key_format", None))
    value_decoded = bool(getattr(args, "value_format", None))
    if args.output != "json" or getattr(args, "render", None) is not None:
        if key_decoded:
            r.key = json_text(r.key).encode()
        if value_decoded:
            r.value = json_text(r.value).encode()
    if getattr(args, "render", None) is not None:
        print(args.render(r), end="", flush=True)  # as kcat: the format ends its lines itself (\n)
    elif args.output == "json":
        out = {"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp_ms}
        if key_decoded:
            out["key"] = r.key
        else:
            put_bytes(out, "key", r.key)
        if value_decoded:
            out["value"] = r.value
        else:
            put_bytes(out, "value", r.value)
        headers = []  # a list of pairs: header keys may repeat, and their order is kept
        for k, v in r.headers:
            header = {"key": k}
            put_bytes(header, "value", v)
            headers.append(header)
        out["headers"] = headers
        print(json.dumps(out), flush=True)
    else:  # text, as Kafka's console consumer prints it: a null key or value (a tombstone) is "null"
        line = as_text(r.value)
        if args.print_key:
            separator = args.key_separator or "\t"
            line = as_text(r.key) + separator + line
        print(line, flush=True)


# ---- groups ----

def transactions_list(args) -> int:
    with _admin(args) as admin:
        found = admin.describe_transactions()
    _print(
        args,
        [f"{t['transactional_id']}\t{t['producer_id']}\t{t['producer_epoch']}\t{t['state']}" for t in found],
        found,
    )
    return 0


def transactions_describe(args) -> int:
    with _admin(args) as admin:
        (t,) = admin.describe_transactions([args.transactional_id])
    lines = [f"{k}: {v}" for k, v in t.items() if k != "partitions"]
    lines += [f"partition: {topic}-{p}" for topic, p in t["partitions"]]
    _print(args, lines, t)
    return 0


def groups_list(args) -> int:
    with _admin(args) as admin:
        groups = admin.list_groups()
    _print(
        args,
        [f"{g}\t{state}" for g, state in groups.items()],
        [{"group": g, "state": s} for g, s in groups.items()],
    )
    return 0


def groups_describe(args) -> int:
    if bool(args.group) == bool(args.all_groups):
        raise KanalError(ErrorCode.INVALID_REQUEST, "groups describe takes a GROUP or --all-groups")
    with _admin(args) as admin:
        groups = sorted(admin.list_groups()) if args.all_groups else [args.group]
        infos = [admin.describe_group(g) for g in groups]
    lines: list[str] = []
    data = []
    for info in infos:
        group_lines, group_data = _group_view(args, info)
        lines += group_lines
        data.append(group_data)
    _print(args, lines, data if args.all_groups else data[0])
    return 0


def _group_view(args, info) -> tuple[list[str], dict]:
    """One group's lines and JSON: offsets and lag (the default), --members or --state, as
    kafka-consumer-groups --describe prints them."""
    owner = {
        (t.topic, p): m.member_id for m in info.members for t in m.assignment.partitions for p in t.partitions
    }
    offsets = [
        {
            "topic": o.topic,
            "partition": o.partition,
            "committed_offset": o.committed_offset,
            "log_end_offset": o.log_end_offset,
            "lag": o.lag,
            "member_id": owner.get((o.topic, o.partition), ""),
        }
        for o in info.offsets
    ]
    data = {
        "group": info.group_id,
        "state": info.state,
        "protocol": info.protocol,
        "generation": info.generation,
        "coordinator": info.coordinator,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "partitions": [[t.topic, p] for t in m.assignment.partitions for p in t.partitions],
            }
            for m in info.members
        ],
        "offsets": offsets,
    }
    lines = [(f"group {info.group_id}: {info.state}, protocol {info.protocol or '-'}, generation "
              f"{info.generation}, coordinator broker {info.coordinator}, {len(info.members)} members"),
             f"{'TOPIC':<24} {'PARTITION':>9} {'COMMITTED':>10} {'LOG-END':>10} {'LAG':>8}  MEMBER"]
    lines += [f"{o['topic']:<24} {o['partition']:>9} {o['committed_offset']:>10} {o['log_end_offset']:>10} "
              f"{o['lag']:>8}  {o['member_id'] or '-'}" for o in offsets]
    if args.state:
        data = {k: data[k] for k in ("group", "state", "protocol", "generation", "coordinator")}
        data["members"] = len(info.members)
        lines = [f"{'GROUP':<24} {'COORDINATOR':>11} {'STATE':<20} {'PROTOCOL':<20} {'MEMBERS':>7}",
                 (f"{info.group_id:<24} {info.coordinator:>11} {info.state:<20} {info.protocol or '-':<20} "
                  f"{len(info.members):>7}")]
    elif args.members:
        data = {"group": data["group"], "state": data["state"], "members": data["members"]}
        lines = [f"{'GROUP':<24} {'MEMBER-ID':<40} {'CLIENT-ID':<24} {'HOST':<20} {'PARTITIONS':>10}"]
        lines += [f"{info.group_id:<24} {m['member_id']:<40} {m['client_id']:<24} {m['host'] or '-':<20} "
                  f"{len(m['partitions']):>10}" for m in data["members"]]
    return lines, data


def groups_reset_offsets(args) -> int:
    if args.to_earliest:
        to, value = "earliest", 0
    elif args.to_latest:
        to, value = "latest", 0
    elif args.to_offset is not None:
        to, value = "offset", args.to_offset
    elif args.shift_by is not None:
        to, value = "shift", args.shift_by
    elif args.by_duration is not None:  # now minus the duration, as Kafka's --by-duration
        to, value = "datetime", int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    else:
        to, value = "datetime", parse_timestamp_ms(args.to_datetime)
    with _admin(args) as admin:
        plan = admin.reset_group_offsets(args.group, args.topic, to=to, value=value, execute=args.execute)
    verb = "reset" if args.execute else "would reset (dry run; add --execute)"
    _print(args, [f"{verb} {args.group} {t}-{p} to {o}" for (t, p), o in sorted(plan.items())],
           {"group": args.group, "executed": args.execute,
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(plan.items())]})
    return 0


def groups_delete(args) -> int:
    with _admin(args) as admin:
        admin.delete_group(args.group)
    _print(args, [f"deleted group {args.group}"], {"group": args.group, "deleted": True})
    return 0


# ---- cluster, configs, quotas ----

def cluster_describe(args) -> int:
    with _admin(args) as admin:
        reply = admin.describe_cluster()
    q = reply.quorum
    data = {"cluster_id": reply.cluster_id,
            "brokers": [{"id": b.broker_id, "endpoint": b.endpoint, "rack": b.rack, "fenced": b.fenced,
                         "epoch": b.broker_epoch} for b in reply.brokers],
            "quorum": {"leader": q.leader_id, "term": q.term, "commit_index": q.commit_index,
                       "voters": [{"id": v.controller_id, "endpoint": v.endpoint, "active": v.is_active,
                                   "lag": v.lag, "reachable": v.reachable} for v in q.voters]}}
    lines = [f"cluster {reply.cluster_id}"]
    lines += [f"  broker {b.broker_id:>3}  {b.endpoint}  {'fenced' if b.fenced else 'active'}"
              + (f"  rack {b.rack}" if b.rack else "") for b in reply.brokers]
    lines.append(f"  controllers: leader {q.leader_id}, term {q.term}, commit index {q.commit_index}")
    lines += [f"    controller {v.controller_id:>2}  {v.endpoint}  {'active' if v.is_active else 'standby'}  "
              f"lag {v.lag}" for v in q.voters]
    _print(args, lines, data)
    return 0


def configs(args) -> int:
    resource = TOPIC if args.topic else BROKER
    name = args.topic or str(args.broker)
    with _admin(args) as admin:
        if args.broker is not None:  # a broker config of an id no broker has would print defaults only
            registered = sorted(b.broker_id for b in admin.describe_cluster().brokers)
            if args.broker not in registered:
                raise KanalError(ErrorCode.UNKNOWN_BROKER, f"no broker {args.broker} is registered (brokers: "
                                                           f"{', '.join(map(str, registered)) or 'none'})")
        if args.set or args.delete:
            admin.alter_configs(resource, name, _configs(args.set), args.delete)
        entries = admin.describe_configs(resource, name)
    data = {e.key: {"value": e.value, "default": e.is_default} for e in entries}
    _print(args, [f"{e.key}={e.value}{' (default)' if e.is_default else ''}" for e in entries], data)
    return 0


def quotas(args) -> int:
    values: dict[str, float | None] = {}
    if args.set or args.delete:  # checked before anything is sent: a bad value changes nothing
        if not args.entity_type:
            raise KanalError(ErrorCode.INVALID_QUOTA, "--set and --delete need --entity-type")
        if args.client_id is not None and args.entity_type != "user":
            raise KanalError(ErrorCode.INVALID_QUOTA, "--client-id goes with --entity-type user "
                                                      "(Kafka's user+client-id entity)")
        for key, text in _configs(args.set).items():
            try:
                values[key] = float(text)
            except ValueError:
                raise KanalError(
                    ErrorCode.INVALID_QUOTA, f"quota {key} must be a number, got {text!r}"
                ) from None
        values.update({k: None for k in args.delete or []})
    with _admin(args) as admin:
        if values:
            admin.alter_client_quota(
                args.entity_type, args.entity_name or "", values, client_id=args.client_id
            )
        found = admin.describe_client_quotas(args.entity_type or "", args.entity_name or "")

    def name(entity: tuple[str, ...]) -> str:
        text = f"{entity[0]} {entity[1] or '<default>'}"
        return text + (f" client-id {entity[2] or '<default>'}" if len(entity) > 2 else "")

    data = [
        {"entity_type": e[0], "entity_name": e[1], **({"client_id": e[2]} if len(e) > 2 else {}), "quotas": q}
        for e, q in sorted(found.items())
    ]
    _print(args, [f"{name(e)}: " + ", ".join(f"{k}={v:g}" for k, v in sorted(q.items()))
                  for e, q in sorted(found.items())], data)
    return 0


# ---- users ----

def users_create(args) -> int:
    if args.user_password is not None:
        password = args.user_password
    elif args.user_password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"new password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise KanalError(ErrorCode.INVALID_REQUEST, "the two passwords differ")
    if not password:
        raise KanalError(ErrorCode.INVALID_REQUEST, "an empty password")
    mechanisms = args.mechanism or sorted(MECHANISMS)
    with _admin(args) as admin:
        admin.create_user(args.name, password, mechanisms=mechanisms, iterations=args.iterations)
    _print(
        args,
        [f"user {args.name}: {', '.join(mechanisms)} credentials stored ({args.iterations} iterations)"],
        {"user": args.name, "mechanisms": mechanisms, "iterations": args.iterations},
    )
    return 0


def users_delete(args) -> int:
    with _admin(args) as admin:
        removed = admin.delete_user(args.name, mechanisms=args.mechanism)
    _print(args, [f"user {args.name}: removed {', '.join(removed)}"], {"user": args.name, "removed": removed})
    return 0


def users_list(args) -> int:
    with _admin(args) as admin:
        users = admin.describe_users(args.name)
    lines = [f"User:{name}  " + "  ".join(f"{m} ({i} iterations)" for m, i in mechanisms)
             for name, mechanisms in users.items()]
    _print(args, lines, {name: [{"mechanism": m, "iterations": i} for m, i in mechanisms]
                         for name, mechanisms in users.items()})
    return 0


_positive_int = bounded_number(int, 1, "positive")
_non_negative_int = bounded_number(int, 0, "non-negative")
_positive_float = bounded_number(float, 1e-9, "positive")


def build_parser() -> argparse.ArgumentParser:
    common = CommandParser(add_help=False)
    common.add_argument("--bootstrap", help="HOST:PORT[,...] of brokers (default: $KANAL_BOOTSTRAP, else the "
                                            "running `kanal dev`, found through $KANAL_HOME/dev.json)")
    common.add_argument("--output", choices=["text", "json"], default="text", help=OUTPUT_HELP)
    common.add_argument(
        "--request-timeout-ms", type=bounded_number(int, 100, "100-600000", 600_000),
        default=REQUEST_TIMEOUT_MS_DEFAULT,
        help=f"how long each call to the cluster may take, 100-600000 (default {REQUEST_TIMEOUT_MS_DEFAULT}; "
             "a producer's delivery timeout grows to cover it)")
    add_client_security_flags(common)
    p = CommandParser(prog="kanal", description="kanal client commands; --output json on every one")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    topics = sub.add_parser("topics", help="create, list, describe, delete, alter topics (kafka-topics)") \
        .add_subparsers(dest="action", required=True, metavar="ACTION")
    c = topics.add_parser("create", parents=[common], help="create a topic")
    c.add_argument("name", help="the topic's name")
    c.add_argument("--partitions", type=int, default=1, help="partition count (default 1)")
    c.add_argument("--replication-factor", type=int, default=1, help="replicas per partition (default 1)")
    c.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config; repeatable")
    c.add_argument(
        "--if-not-exists", action="store_true", help="succeed, changing nothing, if the topic exists"
    )
    c.set_defaults(func=topics_create)
    c = topics.add_parser("list", parents=[common], help="topic names")
    c.add_argument("--internal", action="store_true", help="include internal topics")
    c.set_defaults(func=topics_list)
    c = topics.add_parser("describe", parents=[common], help="partitions, leaders, replicas, ISR and configs")
    c.add_argument("name", nargs="?", help="the topic (default: every topic)")
    only = c.add_mutually_exclusive_group()
    only.add_argument("--under-replicated-partitions", action="store_true",
                      help="only partitions whose ISR is smaller than their replica set")
    only.add_argument(
        "--unavailable-partitions", action="store_true", help="only partitions without a leader"
    )
    only.add_argument("--at-min-isr-partitions", action="store_true",
                      help="only partitions whose ISR size equals min.insync.replicas")
    c.set_defaults(func=topics_describe)
    c = topics.add_parser("delete", parents=[common], help="delete a topic and its data")
    c.add_argument("name", help="the topic's name")
    c.add_argument(
        "--if-exists", action="store_true", help="succeed, changing nothing, if there is no such topic"
    )
    c.set_defaults(func=topics_delete)
    c = topics.add_parser("alter", parents=[common], help="add partitions or change a topic's configs")
    c.add_argument("name", help="the topic's name")
    c.add_argument("--partitions", type=int, help="new total partition count")
    c.add_argument("--config", action="append", metavar="KEY=VALUE", help="a config to set; repeatable")
    c.add_argument("--delete-config", action="append", metavar="KEY", help="a config to reset; repeatable")
    c.set_defaults(func=topics_alter)

    c = sub.add_parser("produce", parents=[common],
                       help="produce one record per line of stdin or --file (kafka-console-producer)")
    c.add_argument("topic", help="the topic to write to")
    c.add_argument("--key-separator", help="split each line into key and value at the first SEP")
    c.add_argument("--acks", choices=["0", "1", "all"], default="all", help="acknowledgements to wait for")
    c.add_argument("--partition", type=int, help="write every record to this partition")
    c.add_argument(
        "--header", action="append", metavar="KEY=VALUE", help="a header on every record; repeatable"
    )
    c.add_argument("--file", help="read lines from FILE instead of stdin")
    c.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                   help="batch compression (default none)")
    c.add_argument(
        "--linger-ms", type=_non_negative_int, default=5, help="how long a batch waits to fill (ms)"
    )
    add_format_flags(c, producing=True)
    c.set_defaults(func=produce)

    c = sub.add_parser("consume", parents=[common], help="print records (kafka-console-consumer, kcat -C)")
    c.add_argument("topic", help="the topic to read")
    c.add_argument("--from-beginning", action="store_true", help="start at the log start (default: the end)")
    c.add_argument(
        "--offset", type=int, help="start at this offset (it must be in the log: OFFSET_OUT_OF_RANGE)"
    )
    c.add_argument(
        "--from-timestamp",
        metavar="TIME",
        help="start at the first record at or after TIME: ISO 8601 or milliseconds since the epoch",
    )
    c.add_argument("--partition", type=int, help="read only this partition")
    c.add_argument("--max-messages", type=_positive_int, help="stop after this many records")
    c.add_argument("--group", help="read as a member of this consumer group, committing what was printed")
    c.add_argument("--print-key", action="store_true", help="print KEY<separator>VALUE")
    c.add_argument(
        "--key-separator", default="\t", help="between key and value with --print-key (default tab)"
    )
    c.add_argument(
        "--format",
        metavar="FMT",
        help="kcat-style line format: %%t topic, %%p partition, %%o offset, "
        "%%T timestamp, %%k key, %%s value, %%h headers, \\n newline",
    )
    c.add_argument(
        "--timeout-s", type=_positive_float, default=None, help="stop after this long without records"
    )
    c.add_argument(
        "--isolation-level",
        choices=["read_uncommitted", "read_committed"],
        default="read_uncommitted",
        help="read_committed: only committed transactions' records, up to the last stable offset",
    )
    add_client_rack_flag(c)
    add_format_flags(c, producing=False)
    c.set_defaults(func=consume)

    txns = sub.add_parser("transactions", help="list and describe transactional ids (kafka-transactions)") \
        .add_subparsers(dest="action", required=True, metavar="ACTION")
    c = txns.add_parser("list", parents=[common], help="transactional ids, their producer and state")
    c.set_defaults(func=transactions_list)
    c = txns.add_parser(
        "describe", parents=[common], help="one id's state and the partitions of its transaction"
    )
    c.add_argument("transactional_id", help="the transactional id")
    c.set_defaults(func=transactions_describe)

    groups = sub.add_parser(
        "groups", help="list, describe, reset offsets of, delete consumer groups (kafka-consumer-groups)"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    c = groups.add_parser("list", parents=[common], help="groups and their states")
    c.set_defaults(func=groups_list)
    c = groups.add_parser(
        "describe", parents=[common], help="committed offsets and lag; or members, or state"
    )
    c.add_argument("group", nargs="?", help="the group (or --all-groups)")
    c.add_argument("--all-groups", action="store_true", help="describe every group")
    view = c.add_mutually_exclusive_group()
    view.add_argument(
        "--members", action="store_true", help="the members: id, client id, host, partition count"
    )
    view.add_argument(
        "--state", action="store_true", help="the state, protocol, coordinator and member count"
    )
    c.set_defaults(func=groups_describe)
    c = groups.add_parser("reset-offsets", parents=[common], help="move an empty group's committed offsets")
    c.add_argument("group", help="the group")
    c.add_argument("--topic", required=True, help="the topic whose partitions move")
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to each log's start")
    target.add_argument("--to-latest", action="store_true", help="to each log's end")
    target.add_argument("--to-offset", type=int, help="to this offset (clamped to the log)")
    target.add_argument("--shift-by", type=int, help="by this many records from the committed offset")
    target.add_argument("--to-datetime", metavar="TIME",
                        help="to the first record at or after TIME: ISO 8601 or milliseconds since the epoch")
    target.add_argument("--by-duration", metavar="DURATION",
                        help="to the first record at or after now minus DURATION (ISO 8601, e.g. PT15M)")
    c.add_argument("--execute", action="store_true", help="commit the new offsets (default: show them)")
    c.set_defaults(func=groups_reset_offsets)
    c = groups.add_parser("delete", parents=[common], help="delete an empty group and its offsets")
    c.add_argument("group", help="the group")
    c.set_defaults(func=groups_delete)

    cluster = sub.add_parser("cluster", help="describe the cluster: brokers and the controller quorum") \
        .add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cluster.add_parser("describe", parents=[common], help="brokers, controllers, leader, term and lag")
    c.set_defaults(func=cluster_describe)

    c = sub.add_parser(
        "configs", parents=[common], help="describe or alter topic/broker configs (kafka-configs)"
    )
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--topic", help="a topic's configs")
    target.add_argument("--broker", type=int, help="a broker's configs (the id must be registered)")
    c.add_argument("--set", action="append", metavar="KEY=VALUE", help="a config to set; repeatable")
    c.add_argument("--delete", action="append", metavar="KEY", help="a config to reset; repeatable")
    c.set_defaults(func=configs)

    c = sub.add_parser("quotas", parents=[common], help="describe or alter client quotas (kafka-configs)")
    c.add_argument("--entity-type", choices=["user", "client-id"], default=None, help="the kind of entity")
    c.add_argument("--entity-name", help="the entity's name; leave out for the default entity")
    c.add_argument(
        "--client-id",
        default=None,
        help="with --entity-type user: the user+client-id entity ('' the user's default client id)",
    )
    c.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a quota to set (producer_byte_rate, consumer_byte_rate, request_percentage, ...)")
    c.add_argument("--delete", action="append", metavar="KEY", help="a quota to remove; repeatable")
    c.set_defaults(func=quotas)

    add_acls_parser(sub, common, _admin)
    add_schemas_parser(sub, common, _security)
    add_operations_parsers(sub, common, _admin)
    users = sub.add_parser("users", help="create, delete, list users (SCRAM credentials)") \
        .add_subparsers(dest="action", required=True, metavar="ACTION")
    c = users.add_parser("create", parents=[common], help="create a user or change its password")
    c.add_argument("name", help="the user's name")
    c.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                   help="SCRAM mechanism(s) to store (default: SCRAM-SHA-256 and SCRAM-SHA-512)")
    c.add_argument(
        "--iterations",
        type=int,
        default=ITERATIONS_DEFAULT,
        help=f"PBKDF2 iterations, {ITERATIONS_MIN}..{ITERATIONS_MAX} (default {ITERATIONS_DEFAULT})",
    )
    source = c.add_mutually_exclusive_group()
    source.add_argument("--user-password", metavar="PASSWORD", help="the new user's password (visible in ps)")
    source.add_argument(
        "--user-password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    c.set_defaults(func=users_create)
    c = users.add_parser("delete", parents=[common], help="delete a user's credentials")
    c.add_argument("name", help="the user's name")
    c.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                   help="only this mechanism's credential (default: all of the user's)")
    c.set_defaults(func=users_delete)
    c = users.add_parser("list", parents=[common], help="users and their mechanisms")
    c.add_argument("name", nargs="*", help="only these users (default: all)")
    c.set_defaults(func=users_list)

    add_perf_parser(sub, common, _connection, _admin, _positive_int, _positive_float)
    return p


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KanalError as exc:
        return report_error(exc.code, exc.message, EXIT_FAILED)
    except BrokenPipeError:
        return 0
