"""The `kanal` client commands: topics, produce, consume, groups, cluster, configs, quotas, acls, users, perf.

Every command takes TLS settings and credentials (--tls-ca-file, --tls-cert-file, --tls-key-file, --user,
--password, or --command-config FILE): see kanal.v1.command_config.

Every command takes --bootstrap HOST:PORT[,...]; without it, $KANAL_BOOTSTRAP, else the cluster that
`kanal dev` is running (it writes its address to ~/.kanal/dev.json). Describe and list commands print
text or, with --output json, JSON. Errors are one line on stderr and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import statistics
import sys
import time

from kanal.clients.acls_cli import add_acls_parser
from kanal.clients.admin import BROKER, TOPIC, Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.v1.command_config import add_client_security_flags, layered_settings, security_from
from kanal.v1.dev_state import dev_state_path, read_dev_state
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.record_text import as_text, put_bytes
from kanal.v1.scram import ITERATIONS_DEFAULT, ITERATIONS_MAX, ITERATIONS_MIN, MECHANISMS


def default_bootstrap() -> str:
    if os.environ.get("KANAL_BOOTSTRAP"):
        return os.environ["KANAL_BOOTSTRAP"]
    state = read_dev_state()
    if state is None or not isinstance(state.get("bootstrap"), str):
        raise KanalError(7, "no --bootstrap given, $KANAL_BOOTSTRAP unset, and no `kanal dev` cluster running "
                            f"({dev_state_path()} not found)")
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
    return Admin(_bootstrap(args), security=_security(args))


def _security(args):
    """TLS files and credentials for this command (kanal.v1.command_config); None: plaintext."""
    if getattr(args, "_security", None) is None:
        args._security = security_from(_settings(args)) or False
    return args._security or None


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
            raise KanalError(23, f"--config expects key=value, got {pair!r}")
        out[key] = value
    return out


# ---- topics ----

def topics_create(args) -> int:
    with _admin(args) as admin:
        topic_id = admin.create_topic(args.name, args.partitions, args.replication_factor, _configs(args.config))
    print(f"created topic {args.name} ({topic_id}) with {args.partitions} partitions, "
          f"replication factor {args.replication_factor}")
    return 0


def topics_list(args) -> int:
    with _admin(args) as admin:
        names = admin.list_topics(include_internal=args.internal)
    _print(args, names, names)
    return 0


def topics_describe(args) -> int:
    with _admin(args) as admin:
        names = [args.name] if args.name else admin.list_topics()
        descriptions = [admin.describe_topic(n) for n in names]
    data = [{"name": d.name, "topic_id": d.topic_id, "internal": d.internal, "configs": d.configs,
             "partitions": [{"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                             "replicas": list(p.replicas), "isr": list(p.isr),
                             **({"offline_reason": p.offline_reason} if p.offline_reason else {})}
                            for p in d.partitions]}
            for d in descriptions]
    lines = []
    for d in descriptions:
        configs = ",".join(f"{k}={v}" for k, v in sorted(d.configs.items())) or "-"
        lines.append(f"topic {d.name}  id {d.topic_id}  partitions {len(d.partitions)}  configs {configs}")
        for p in d.partitions:
            lines.append(f"  partition {p.partition:>3}  leader {p.leader:>3}  epoch {p.leader_epoch:>3}  "
                         f"replicas {list(p.replicas)}  isr {list(p.isr)}"
                         + (f"  offline: {p.offline_reason}" if p.offline_reason else ""))
    _print(args, lines, data)
    return 0


def topics_delete(args) -> int:
    with _admin(args) as admin:
        admin.delete_topic(args.name)
    print(f"deleted topic {args.name}")
    return 0


def topics_alter(args) -> int:
    with _admin(args) as admin:
        if args.partitions:
            admin.create_partitions(args.name, args.partitions)
        if args.config or args.delete_config:
            admin.alter_configs(TOPIC, args.name, _configs(args.config), args.delete_config)
    print(f"altered topic {args.name}")
    return 0


# ---- produce / consume ----

def produce(args) -> int:
    config = ProducerConfig(bootstrap=_bootstrap(args), security=_security(args), acks=args.acks, enable_idempotence=args.acks == "all",
                            compression=args.compression, linger_ms=args.linger_ms)
    failures = []
    count = 0
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(open(args.file, "rb")) if args.file else sys.stdin.buffer
        producer = stack.enter_context(Producer(config))
        for line in source:
            line = line.rstrip(b"\r\n")
            key = None
            if args.key_separator:
                key, sep, value = line.partition(args.key_separator.encode())
                if not sep:
                    key, value = None, line
            else:
                value = line
            headers = [(k, v.encode()) for k, _, v in (h.partition("=") for h in args.header or [])]
            producer.produce(args.topic, value, key=key, partition=args.partition, headers=headers,
                             on_delivery=lambda err, meta: err and failures.append(err))
            count += 1
        producer.flush()
    if failures:
        raise failures[0]
    print(f"produced {count} records to {args.topic}", file=sys.stderr)
    return 0


def consume(args) -> int:
    """Print records. Without --group: partitions by hand, from --offset / --from-timestamp /
    --from-beginning / the end. With --group: as a member of that group, from its committed offsets
    (--from-beginning only decides where partitions without one start), committing what was printed."""
    with _admin(args) as admin:
        partitions = [p.partition for p in admin.describe_topic(args.topic).partitions]
    reset = "earliest" if args.from_beginning else "latest"
    if args.group:
        if args.partition is not None or args.offset is not None or args.from_timestamp is not None:
            raise KanalError(ErrorCode.INVALID_REQUEST, "--group assigns partitions itself: --partition, --offset "
                                                        "and --from-timestamp do not apply")
        # Commits are explicit: exactly what was printed, so --max-messages leaves the rest for the group.
        consumer = Consumer(ConsumerConfig(bootstrap=_bootstrap(args), security=_security(args), auto_offset_reset=reset, group_id=args.group,
                                           enable_auto_commit=False, client_id="kanal-console-consumer",
                                           isolation_level=args.isolation_level))
        consumer.subscribe([args.topic])
    else:
        consumer = Consumer(ConsumerConfig(bootstrap=_bootstrap(args), security=_security(args), auto_offset_reset=reset,
                                           isolation_level=args.isolation_level))
        if args.partition is not None:
            partitions = [args.partition]
        consumer.assign([(args.topic, p) for p in partitions])
        for p in partitions:
            tp = (args.topic, p)
            if args.offset is not None:
                consumer.seek(tp, args.offset)
            elif args.from_timestamp is not None:
                consumer.seek_to_timestamp(tp, args.from_timestamp)
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


def _print_record(args, r) -> None:
    if args.output == "json":
        out = {"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp_ms}
        put_bytes(out, "key", r.key)
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
    _print(args, [f"{t['transactional_id']}\t{t['producer_id']}\t{t['producer_epoch']}\t{t['state']}" for t in found],
           found)
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
    _print(args, [f"{g}\t{state}" for g, state in groups.items()], [{"group": g, "state": s} for g, s in groups.items()])
    return 0


def groups_describe(args) -> int:
    with _admin(args) as admin:
        info = admin.describe_group(args.group)
    owner = {(t.topic, p): m.member_id for m in info.members for t in m.assignment.partitions for p in t.partitions}
    data = {"group": info.group_id, "state": info.state, "protocol": info.protocol, "generation": info.generation,
            "coordinator": info.coordinator,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                         "host": m.client_host,
                         "partitions": [[t.topic, p] for t in m.assignment.partitions for p in t.partitions]}
                        for m in info.members],
            "offsets": [{"topic": o.topic, "partition": o.partition, "committed_offset": o.committed_offset,
                         "log_end_offset": o.log_end_offset, "lag": o.lag,
                         "member_id": owner.get((o.topic, o.partition), "")} for o in info.offsets]}
    lines = [(f"group {info.group_id}: {info.state}, protocol {info.protocol or '-'}, generation {info.generation}, "
              f"coordinator broker {info.coordinator}, {len(info.members)} members"),
             f"{'TOPIC':<24} {'PARTITION':>9} {'COMMITTED':>10} {'LOG-END':>10} {'LAG':>8}  MEMBER"]
    lines += [f"{o['topic']:<24} {o['partition']:>9} {o['committed_offset']:>10} {o['log_end_offset']:>10} "
              f"{o['lag']:>8}  {o['member_id'] or '-'}" for o in data["offsets"]]
    _print(args, lines, data)
    return 0


def groups_reset_offsets(args) -> int:
    if args.to_earliest:
        to, value = "earliest", 0
    elif args.to_latest:
        to, value = "latest", 0
    elif args.to_offset is not None:
        to, value = "offset", args.to_offset
    elif args.shift_by is not None:
        to, value = "shift", args.shift_by
    else:
        to, value = "datetime", args.to_datetime
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
    print(f"deleted group {args.group}")
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
        if args.set or args.delete:
            admin.alter_configs(resource, name, _configs(args.set), args.delete)
        entries = admin.describe_configs(resource, name)
    data = {e.key: {"value": e.value, "default": e.is_default} for e in entries}
    _print(args, [f"{e.key}={e.value}{' (default)' if e.is_default else ''}" for e in entries], data)
    return 0


def quotas(args) -> int:
    with _admin(args) as admin:
        if args.set or args.delete:
            if not args.entity_type:
                raise KanalError(ErrorCode.INVALID_QUOTA, "--set and --delete need --entity-type")
            if args.client_id is not None and args.entity_type != "user":
                raise KanalError(ErrorCode.INVALID_QUOTA, "--client-id goes with --entity-type user "
                                                          "(Kafka's user+client-id entity)")
            values: dict[str, float | None] = {}
            for key, text in _configs(args.set).items():
                try:
                    values[key] = float(text)
                except ValueError:
                    raise KanalError(ErrorCode.INVALID_QUOTA, f"quota {key} must be a number, got {text!r}") from None
            values.update({k: None for k in args.delete or []})
            admin.alter_client_quota(args.entity_type, args.entity_name or "", values, client_id=args.client_id)
        found = admin.describe_client_quotas(args.entity_type or "", args.entity_name or "")

    def name(entity: tuple[str, ...]) -> str:
        text = f"{entity[0]} {entity[1] or '<default>'}"
        return text + (f" client-id {entity[2] or '<default>'}" if len(entity) > 2 else "")

    data = [{"entity_type": e[0], "entity_name": e[1], **({"client_id": e[2]} if len(e) > 2 else {}), "quotas": q}
            for e, q in sorted(found.items())]
    _print(args, [f"{name(e)}: " + ", ".join(f"{k}={v:g}" for k, v in sorted(q.items()))
                  for e, q in sorted(found.items())], data)
    return 0


# ---- perf ----

class _Progress:
    """The perf commands' progress line on stderr, at most once a second (none with --quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.started = self.last = time.perf_counter()

    def show(self, records: int, nbytes: int, *, final: bool = False) -> None:
        now = time.perf_counter()
        if self.quiet or (now - self.last < 1 and not final):
            return
        self.last = now
        rate = records / (now - self.started)
        print(f"\r{records:>12,} records  {rate:>12,.0f} records/s  {nbytes / (now - self.started) / 1e6:>8.1f} MB/s",
              end="", file=sys.stderr, flush=True)

    def end(self, records: int, nbytes: int) -> None:
        """The last line, whatever the time since the previous one, then a newline."""
        self.show(records, nbytes, final=True)
        if not self.quiet:
            print(file=sys.stderr)


def _perf_summary(records: int, nbytes: int, elapsed_s: float, latencies_ms: list[float], **extra) -> dict:
    summary = {"records": records, "seconds": round(elapsed_s, 3), "records_s": round(records / elapsed_s),
               "mb_s": round(nbytes / elapsed_s / 1e6, 2), **extra}
    if len(latencies_ms) >= 2:
        q = statistics.quantiles(latencies_ms, n=100) if len(latencies_ms) >= 100 else sorted(latencies_ms)
        summary["latency_ms_p50"] = round(statistics.median(latencies_ms), 2)
        summary["latency_ms_p99"] = round(q[-1] if len(latencies_ms) < 100 else q[98], 2)
    return summary


def perf_produce(args) -> int:
    config = ProducerConfig(bootstrap=_bootstrap(args), security=_security(args), acks=args.acks,
                            enable_idempotence=args.acks == "all", compression=args.compression,
                            client_id=args.client_id or "kanal-perf-producer")
    value = os.urandom(args.record_size)
    values = [value] * 1000
    latencies: list[float] = []  # produce to acknowledgement, one chunk of 1,000 in 50
    sent = 0
    with Producer(config) as producer:
        progress = _Progress(args.quiet)
        while sent < args.num_records and time.perf_counter() - progress.started < args.max_seconds:
            chunk = min(1000, args.num_records - sent)
            t0 = time.perf_counter()
            if args.per_record:  # the cost of one produce() call per record, as most applications make
                futures = [producer.produce(args.topic, value) for _ in range(chunk)]
            else:
                futures = producer.produce_many(args.topic, values if chunk == 1000 else values[:chunk])
            sent += chunk
            if sent % 50_000 < chunk:
                futures[-1].result(60)
                latencies.append((time.perf_counter() - t0) * 1000)
            progress.show(sent, sent * args.record_size)
        producer.flush()
        elapsed = time.perf_counter() - progress.started
        throttle = producer.metrics()
    progress.end(sent, sent * args.record_size)
    print(json.dumps(_perf_summary(sent, sent * args.record_size, elapsed, latencies,
                                   record_size=args.record_size, acks=args.acks,
                                   api="produce" if args.per_record else "produce_many", **throttle)))
    return 0


def perf_consume(args) -> int:
    """Reads the topic from its start. Latency is receive time minus each sampled record's timestamp: the
    end-to-end latency while a producer runs, the records' age when reading what is already there."""
    with _admin(args) as admin:
        partitions = [p.partition for p in admin.describe_topic(args.topic).partitions]
    consumer = Consumer(ConsumerConfig(bootstrap=_bootstrap(args), security=_security(args),
                                       auto_offset_reset="earliest", max_poll_records=10_000,
                                       client_id=args.client_id or "kanal-perf-consumer"))
    consumer.assign([(args.topic, p) for p in partitions])
    got = nbytes = 0
    latencies: list[float] = []  # one record in 1,000
    progress = _Progress(args.quiet)
    idle_since = time.perf_counter()
    while got < args.num_records and time.perf_counter() - progress.started < args.max_seconds:
        records = consumer.poll(0.5)
        if not records:
            if time.perf_counter() - idle_since > 3:
                break
            continue
        idle_since = time.perf_counter()
        now_ms = time.time() * 1000
        latencies.extend(now_ms - r.timestamp_ms for r in records[::1000])
        got += len(records)
        nbytes += sum(len(r.value or b"") for r in records)
        progress.show(got, nbytes)
    elapsed = time.perf_counter() - progress.started
    throttle = consumer.metrics()
    consumer.close()
    progress.end(got, nbytes)
    print(json.dumps(_perf_summary(got, nbytes, elapsed, latencies, **throttle)))
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
    print(f"user {args.name}: {', '.join(mechanisms)} credentials stored ({args.iterations} iterations)")
    return 0


def users_delete(args) -> int:
    with _admin(args) as admin:
        removed = admin.delete_user(args.name, mechanisms=args.mechanism)
    print(f"user {args.name}: removed {', '.join(removed)}")
    return 0


def users_list(args) -> int:
    with _admin(args) as admin:
        users = admin.describe_users(args.name)
    lines = [f"User:{name}  " + "  ".join(f"{m} ({i} iterations)" for m, i in mechanisms)
             for name, mechanisms in users.items()]
    _print(args, lines, {name: [{"mechanism": m, "iterations": i} for m, i in mechanisms]
                         for name, mechanisms in users.items()})
    return 0


def _bounded_number(kind: type, lowest: float, what: str):
    """An argparse type: a number of `kind` at least `lowest`; argparse turns the ValueError into a one-line
    usage error (exit 2) instead of a traceback further in."""
    def parse(text: str):
        value = kind(text)
        if value < lowest:
            raise ValueError(f"{text} is not {what}")  # argparse: "invalid positive int value: '0'"
        return value
    parse.__name__ = f"{what} {kind.__name__}"  # argparse names the type in its message
    return parse


_positive_int = _bounded_number(int, 1, "positive")
_non_negative_int = _bounded_number(int, 0, "non-negative")
_positive_float = _bounded_number(float, 1e-9, "positive")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", help="HOST:PORT[,...] of brokers (default: the running kanal dev cluster)")
    common.add_argument("--output", choices=["text", "json"], default="text")
    add_client_security_flags(common)
    p = argparse.ArgumentParser(prog="kanal", description="kanal client commands")
    sub = p.add_subparsers(dest="command", required=True)

    topics = sub.add_parser("topics", help="create, list, describe, delete, alter topics").add_subparsers(
        dest="action", required=True)
    c = topics.add_parser("create", parents=[common])
    c.add_argument("name")
    c.add_argument("--partitions", type=int, default=1)
    c.add_argument("--replication-factor", type=int, default=1)
    c.add_argument("--config", action="append", metavar="KEY=VALUE")
    c.set_defaults(func=topics_create)
    c = topics.add_parser("list", parents=[common])
    c.add_argument("--internal", action="store_true", help="include internal topics")
    c.set_defaults(func=topics_list)
    c = topics.add_parser("describe", parents=[common])
    c.add_argument("name", nargs="?")
    c.set_defaults(func=topics_describe)
    c = topics.add_parser("delete", parents=[common])
    c.add_argument("name")
    c.set_defaults(func=topics_delete)
    c = topics.add_parser("alter", parents=[common])
    c.add_argument("name")
    c.add_argument("--partitions", type=int, help="new total partition count")
    c.add_argument("--config", action="append", metavar="KEY=VALUE")
    c.add_argument("--delete-config", action="append", metavar="KEY")
    c.set_defaults(func=topics_alter)

    c = sub.add_parser("produce", parents=[common], help="produce one record per input line")
    c.add_argument("topic")
    c.add_argument("--key-separator", help="split each line into key and value at the first SEP")
    c.add_argument("--acks", choices=["0", "1", "all"], default="all")
    c.add_argument("--partition", type=int)
    c.add_argument("--header", action="append", metavar="KEY=VALUE")
    c.add_argument("--file", help="read lines from FILE instead of stdin")
    c.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    c.add_argument("--linger-ms", type=_non_negative_int, default=5)
    c.set_defaults(func=produce)

    c = sub.add_parser("consume", parents=[common], help="print records")
    c.add_argument("topic")
    c.add_argument("--from-beginning", action="store_true")
    c.add_argument("--offset", type=int)
    c.add_argument("--from-timestamp", type=int, help="milliseconds since the epoch")
    c.add_argument("--partition", type=int)
    c.add_argument("--max-messages", type=_positive_int)
    c.add_argument("--group")
    c.add_argument("--print-key", action="store_true")
    c.add_argument("--key-separator", default="\t")
    c.add_argument("--timeout-s", type=_positive_float, default=None, help="stop after this long without records")
    c.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"], default="read_uncommitted",
                   help="read_committed: only committed transactions' records, up to the last stable offset")
    c.set_defaults(func=consume)

    txns = sub.add_parser("transactions", help="list and describe transactional ids").add_subparsers(
        dest="action", required=True)
    c = txns.add_parser("list", parents=[common], help="transactional ids, their producer and state")
    c.set_defaults(func=transactions_list)
    c = txns.add_parser("describe", parents=[common], help="one id's state and the partitions of its transaction")
    c.add_argument("transactional_id")
    c.set_defaults(func=transactions_describe)

    groups = sub.add_parser("groups", help="list, describe, reset offsets of, delete consumer groups").add_subparsers(
        dest="action", required=True)
    c = groups.add_parser("list", parents=[common])
    c.set_defaults(func=groups_list)
    c = groups.add_parser("describe", parents=[common], help="members, assignments, committed offsets and lag")
    c.add_argument("group")
    c.set_defaults(func=groups_describe)
    c = groups.add_parser("reset-offsets", parents=[common], help="move an empty group's committed offsets")
    c.add_argument("group")
    c.add_argument("--topic", required=True)
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    target.add_argument("--shift-by", type=int)
    target.add_argument("--to-datetime", type=int, metavar="MS", help="milliseconds since the epoch")
    c.add_argument("--execute", action="store_true", help="commit the new offsets (default: show them)")
    c.set_defaults(func=groups_reset_offsets)
    c = groups.add_parser("delete", parents=[common], help="delete an empty group and its offsets")
    c.add_argument("group")
    c.set_defaults(func=groups_delete)

    cluster = sub.add_parser("cluster", help="describe the cluster").add_subparsers(dest="action", required=True)
    c = cluster.add_parser("describe", parents=[common])
    c.set_defaults(func=cluster_describe)

    c = sub.add_parser("configs", parents=[common], help="describe or alter topic/broker configs")
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--topic")
    target.add_argument("--broker", type=int)
    c.add_argument("--set", action="append", metavar="KEY=VALUE")
    c.add_argument("--delete", action="append", metavar="KEY")
    c.set_defaults(func=configs)

    c = sub.add_parser("quotas", parents=[common], help="describe or alter client quotas")
    c.add_argument("--entity-type", choices=["user", "client-id"], default=None)
    c.add_argument("--entity-name", help="the entity's name; leave out for the default entity")
    c.add_argument("--client-id", default=None,
                   help="with --entity-type user: the user+client-id entity ('' the user's default client id)")
    c.add_argument("--set", action="append", metavar="KEY=VALUE")
    c.add_argument("--delete", action="append", metavar="KEY")
    c.set_defaults(func=quotas)

    add_acls_parser(sub, common, _admin)
    users = sub.add_parser("users", help="create, delete, list users (SCRAM credentials)").add_subparsers(
        dest="action", required=True)
    c = users.add_parser("create", parents=[common], help="create a user or change its password")
    c.add_argument("name")
    c.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                   help="SCRAM mechanism(s) to store (default: SCRAM-SHA-256 and SCRAM-SHA-512)")
    c.add_argument("--iterations", type=int, default=ITERATIONS_DEFAULT,
                   help=f"PBKDF2 iterations, {ITERATIONS_MIN}..{ITERATIONS_MAX} (default {ITERATIONS_DEFAULT})")
    source = c.add_mutually_exclusive_group()
    source.add_argument("--user-password", metavar="PASSWORD", help="the new user's password (visible in ps)")
    source.add_argument("--user-password-stdin", action="store_true", help="read the password from stdin's first line")
    c.set_defaults(func=users_create)
    c = users.add_parser("delete", parents=[common], help="delete a user's credentials")
    c.add_argument("name")
    c.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                   help="only this mechanism's credential (default: all of the user's)")
    c.set_defaults(func=users_delete)
    c = users.add_parser("list", parents=[common], help="users and their mechanisms")
    c.add_argument("name", nargs="*")
    c.set_defaults(func=users_list)

    perf = sub.add_parser("perf", help="load generators").add_subparsers(dest="action", required=True)
    c = perf.add_parser("produce", parents=[common])
    c.add_argument("topic")
    c.add_argument("--num-records", type=_positive_int, default=1_000_000)
    c.add_argument("--record-size", type=_positive_int, default=100)
    c.add_argument("--acks", choices=["0", "1", "all"], default="1")
    c.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    c.add_argument("--max-seconds", type=_positive_float, default=60)
    c.add_argument("--quiet", action="store_true")
    c.add_argument("--per-record", action="store_true",
                   help="call produce() once per record (default: produce_many() once per 1,000 records)")
    c.add_argument("--client-id", default=None, help="the client id brokers key quotas on (default kanal-perf-producer)")
    c.set_defaults(func=perf_produce)
    c = perf.add_parser("consume", parents=[common])
    c.add_argument("topic")
    c.add_argument("--num-records", type=_positive_int, default=1_000_000)
    c.add_argument("--max-seconds", type=_positive_float, default=60)
    c.add_argument("--quiet", action="store_true")
    c.add_argument("--client-id", default=None, help="the client id brokers key quotas on (default kanal-perf-consumer)")
    c.set_defaults(func=perf_consume)
    return p


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KanalError as exc:
        print(f"kanal: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
