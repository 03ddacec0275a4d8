"""`kanal reassign|leaders|brokers|quorum`: operating a live cluster from the command line.

- `kanal reassign generate --topics T,.. --brokers 1,2,3 [--plan OUT]` and `kanal reassign balance --brokers
  1,2,3 [--topics T,..] [--plan OUT]`: the balance planner (balance_plan.py) over the current assignment
  (every topic for `balance`), rack-aware with the racks the brokers registered. Prints the current
  assignment (keep it: it is the plan that undoes the change) and writes the proposed plan, only the
  partitions that change, to OUT (or stdout).
- `kanal reassign execute --plan FILE [--throttle BYTES]`: checks the plan (reassignment_plan.py: format,
  unknown partitions, unknown brokers; all problems listed, nothing sent) and starts the reassignments;
  `--throttle` first sets the cluster-wide `follower.replication.throttled.rate`.
- `kanal reassign verify --plan FILE [--preserve-throttle]`: each partition's state; exit 0 once every one
  has exactly the plan's replicas and no reassignment in progress (then the throttle is removed, as
  Kafka's verify does), 1 otherwise.
- `kanal reassign cancel --plan FILE`: cancels the plan's reassignments still in progress.
- `kanal leaders elect --preferred [--topic T [--partition P]]`: preferred-leader election (every partition
  not led by its preferred replica by default); exit 1 when one could not be elected.
- `kanal brokers unregister --id N`: decommission a stopped broker that holds no replicas.
- `kanal brokers safe-to-stop --id N [--wait-ms-max MS]`: exit 0 once stopping broker N leaves every
  partition at min.insync.replicas or above (stop_safety.py), 1 with NOT_ENOUGH_REPLICAS naming the
  partitions when the wait (0: none) passes first. The brokers' preStop hook (deploy/k8s) runs it.
- `kanal quorum describe`, `kanal quorum add --id N --raft HOST:PORT --grpc HOST:PORT`, `kanal quorum remove
  --id N`: the controller quorum (AddVoter / RemoveVoter through a broker, which forwards them to the
  active controller; raft/quorum_change.py). Exit 1 with INVALID_QUORUM_CHANGE when a change is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kanal.clients.admin import BROKER, TOPIC, Admin
from kanal.clients.balance_plan import PlanError, changed, plan_balance
from kanal.clients.cluster_metadata import PartitionInfo
from kanal.clients.reassignment_plan import PlanFormatError, check_plan, format_plan, parse_plan
from kanal.clients.stop_safety import StopVerdict, judge_stop
from kanal.v1.error import ErrorCode, KanalError

AdminFor = Callable[[argparse.Namespace], Admin]
_SAFE_TO_STOP_POLL_S = 0.5
THROTTLE_KEY = "follower.replication.throttled.rate"


def _ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated broker ids, got {text!r}") from None
    if not ids or min(ids) < 0 or len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"expected distinct broker ids >= 0, got {text!r}")
    return ids


def _read_plan(path: str):
    try:
        return parse_plan(Path(path).read_text())
    except OSError as exc:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"cannot read plan {path}: {exc.strerror}") from None
    except PlanFormatError as exc:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"{path}: {exc}") from None


def _propose(args, admin_for: AdminFor, topics: list[str] | None) -> int:
    with admin_for(args) as admin:
        registered = {b.broker_id: b.rack for b in admin.describe_cluster().brokers}
        unknown = [b for b in args.brokers if b not in registered]
        if unknown:
            raise KanalError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"unknown broker(s) {unknown} (registered: {sorted(registered)})")
        current = admin.assignment(topics)
    try:
        proposed = changed(current, plan_balance(current, {b: registered[b] for b in args.brokers}))
    except PlanError as exc:
        raise KanalError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(exc)) from None
    print("Current partition replica assignment (save it to undo the change):", file=sys.stderr)
    print(format_plan({key: current[key] for key in proposed}), file=sys.stderr, end="")
    text = format_plan(proposed)
    if args.plan:
        Path(args.plan).write_text(text)
        print(f"wrote a plan moving {len(proposed)} partition(s) to {args.plan}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def reassign_execute(args, admin_for: AdminFor) -> int:
    plan = _read_plan(args.plan)
    with admin_for(args) as admin:
        brokers = [b.broker_id for b in admin.describe_cluster().brokers]
        topics = sorted({p.topic for p in plan})
        current = admin.assignment(topics) if topics else {}
        problems = check_plan(plan, current, brokers)
        if problems:
            for line in problems:
                print(f"kanal: {line}", file=sys.stderr)
            print("kanal: the plan was not executed (nothing changed)", file=sys.stderr)
            return 1
        if args.throttle is not None:
            # Cluster-wide: every broker copies each replica it is being given at most this fast.
            admin.alter_configs(BROKER, "", set_={THROTTLE_KEY: str(args.throttle)})
            print(f"replication of added replicas throttled to {args.throttle} bytes/s per partition")
        results = admin.alter_partition_reassignments({p.key: p.replicas for p in plan})
    return _report(results, "reassignment started")


def _report(results, done: str, benign: dict[int, str] | None = None) -> int:
    """One line per partition result; errors (other than the `benign` ones, printed as given) go to
    stderr. Exit status 1 when any did."""
    failed = 0
    for r in results:
        if r.error == ErrorCode.NONE or r.error in (benign or {}):
            print(
                f"{r.topic}-{r.partition}: {done if r.error == ErrorCode.NONE else (benign or {})[r.error]}"
            )
        else:
            failed += 1
            print(
                f"kanal: {r.topic}-{r.partition}: {ErrorCode.Name(r.error)}: {r.error_message}",
                file=sys.stderr,
            )
    return 1 if failed else 0


def reassign_verify(args, admin_for: AdminFor) -> int:
    plan = _read_plan(args.plan)
    with admin_for(args) as admin:
        states = {
            (s.topic, s.partition): s for s in admin.list_partition_reassignments([p.key for p in plan])
        }
    complete = 0
    for p in plan:
        s = states[p.key]
        name = f"{p.topic}-{p.partition}"
        if s.error != ErrorCode.NONE:
            print(f"{name}: {ErrorCode.Name(s.error)}")
        elif s.adding_replicas or s.removing_replicas:
            print(f"{name}: in progress (adding {list(s.adding_replicas)}, removing "
                  f"{list(s.removing_replicas)}, isr {list(s.isr)})")
        elif tuple(s.replicas) == p.replicas:
            complete += 1
            print(f"{name}: complete (replicas {list(s.replicas)}, leader {s.leader})")
        else:
            print(f"{name}: not as planned (replicas {list(s.replicas)}, planned {list(p.replicas)})")
    print(f"{complete} of {len(plan)} partition(s) complete")
    if complete < len(plan):
        return 1
    if not args.preserve_throttle:
        with admin_for(args) as admin:
            current = {e.key: e for e in admin.describe_configs(BROKER, "")}
            if THROTTLE_KEY in current and not current[THROTTLE_KEY].is_default:
                admin.alter_configs(BROKER, "", delete=[THROTTLE_KEY])
                print("replication throttle removed")
    return 0


def reassign_cancel(args, admin_for: AdminFor) -> int:
    plan = _read_plan(args.plan)
    with admin_for(args) as admin:
        results = admin.alter_partition_reassignments({p.key: None for p in plan})
    return _report(results, "cancelled", {ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: "nothing in progress"})


def leaders_elect(args, admin_for: AdminFor) -> int:
    if not args.preferred:
        raise KanalError(
            ErrorCode.INVALID_REQUEST, "only --preferred elections are supported (never unclean)"
        )
    with admin_for(args) as admin:
        if args.topic is None:
            named = None
        elif args.partition is not None:
            named = [(args.topic, args.partition)]
        else:
            named = sorted(key for key in admin.assignment([args.topic]))
        results = admin.elect_preferred_leaders(named)
    if not results:
        print("every partition is led by its preferred replica")
    return _report(results, "led by its preferred replica")


def brokers_unregister(args, admin_for: AdminFor) -> int:
    with admin_for(args) as admin:
        admin.unregister_broker(args.id)
    print(f"broker {args.id} unregistered")
    return 0


def _stop_verdict(admin: Admin, broker_id: int, min_insync: dict[str, int]) -> StopVerdict:
    """The verdict from a broker's metadata now; `min_insync` caches each topic's min.insync.replicas."""
    partitions: list[PartitionInfo] = []
    for name in admin.list_topics(include_internal=True):
        try:
            partitions += admin.describe_topic(name).partitions
            if name not in min_insync:
                entries = {e.key: e.value for e in admin.describe_configs(TOPIC, name)}
                min_insync[name] = int(entries.get("min.insync.replicas", "1"))
        except KanalError as error:
            if error.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            # Deleted since it was listed: nothing of it to keep in sync.
    return judge_stop(broker_id, partitions, min_insync)


def brokers_safe_to_stop(args: argparse.Namespace, admin_for: AdminFor) -> int:
    deadline = time.monotonic() + args.wait_ms_max / 1000
    min_insync: dict[str, int] = {}
    with admin_for(args) as admin:
        while True:
            verdict = _stop_verdict(admin, args.id, min_insync)
            if verdict.safe:
                break
            if time.monotonic() >= deadline:
                raise KanalError(ErrorCode.NOT_ENOUGH_REPLICAS, verdict.reason(args.id))
            time.sleep(_SAFE_TO_STOP_POLL_S)  # the CLI's own polling; the cluster's state is what it waits on
    lines = [verdict.reason(args.id)]
    if verdict.unavoidable:
        lines.append(f"  below min.insync.replicas during any restart (replication factor <= min.insync): "
                     f"{', '.join(verdict.unavoidable)}")
    _emit(args, lines, {"broker": args.id, "safe": True, "unavoidable": list(verdict.unavoidable)})
    return 0


def _emit(args, lines: list[str], data: object) -> None:
    # --output json: the data (as the other commands print it), else the lines.
    if getattr(args, "output", None) == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))


def quorum_describe(args, admin_for: AdminFor) -> int:
    with admin_for(args) as admin:
        q = admin.describe_cluster().quorum
    data = {"leader": q.leader_id, "term": q.term, "commit_index": q.commit_index,
            "voters": [{"id": v.controller_id, "endpoint": v.endpoint, "active": v.is_active, "lag": v.lag,
                        "reachable": v.reachable} for v in q.voters]}
    lines = [f"leader {q.leader_id}, term {q.term}, commit index {q.commit_index}"]
    lines += [
        f"  voter {v.controller_id:>2}  {v.endpoint}  {'active' if v.is_active else 'standby'}  lag {v.lag}"
        f"{'' if v.reachable else '  unreachable'}"
        for v in q.voters
    ]
    _emit(args, lines, data)
    return 0


def quorum_add(args, admin_for: AdminFor) -> int:
    with admin_for(args) as admin:
        voters = admin.add_voter(args.id, args.raft, args.grpc)
    _emit(args, [f"controller {args.id} added; voters: {', '.join(map(str, voters))}"], {"voters": voters})
    return 0


def quorum_remove(args, admin_for: AdminFor) -> int:
    with admin_for(args) as admin:
        voters = admin.remove_voter(args.id)
    _emit(args, [f"controller {args.id} removed; voters: {', '.join(map(str, voters))}"], {"voters": voters})
    return 0


def add_operations_parsers(sub, common: argparse.ArgumentParser, admin_for: AdminFor) -> None:
    def bind(handler: Callable[[argparse.Namespace, AdminFor], int]) -> Callable[[argparse.Namespace], int]:
        return lambda args: handler(args, admin_for)

    reassign = sub.add_parser("reassign", help="move partition replicas between brokers "
                                               "(kafka-reassign-partitions)").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    for name, needs_topics, help_text in (
        ("generate", True, "propose a balanced plan for some topics over --brokers"),
        ("balance", False, "propose a plan spreading every topic's replicas and leaders over --brokers"),
    ):
        c = reassign.add_parser(name, parents=[common], help=help_text)
        c.add_argument("--brokers", type=_ids, required=True, help="comma-separated broker ids to place on")
        c.add_argument("--topics", required=needs_topics, help="comma-separated topic names")
        c.add_argument("--plan", help="write the proposed plan here (default: stdout)")
        c.set_defaults(
            func=lambda args: _propose(args, admin_for, args.topics.split(",") if args.topics else None)
        )
    for name, handler, help_text in (
        ("execute", reassign_execute, "start the plan's reassignments"),
        ("verify", reassign_verify, "exit 0 once every partition of the plan is complete"),
        ("cancel", reassign_cancel, "cancel the plan's reassignments in progress"),
    ):
        c = reassign.add_parser(name, parents=[common], help=help_text)
        c.add_argument("--plan", required=True, help="plan file (kafka-reassign-partitions' JSON)")
        if name == "execute":
            c.add_argument(
                "--throttle",
                type=int,
                help="bytes/s each added replica is copied at, at most (sets "
                f"the cluster-wide {THROTTLE_KEY})",
            )
        if name == "verify":
            c.add_argument(
                "--preserve-throttle",
                action="store_true",
                help="keep the replication throttle once the plan is complete (default: remove it)",
            )
        c.set_defaults(func=bind(handler))

    leaders = sub.add_parser("leaders", help="leader election (kafka-leader-election)").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    c = leaders.add_parser("elect", parents=[common], help="move leadership back to preferred replicas")
    c.add_argument("--preferred", action="store_true", help="elect the preferred replica (the only kind)")
    c.add_argument("--topic", help="only this topic's partitions (default: every partition)")
    c.add_argument("--partition", type=int, help="only this partition of --topic")
    c.set_defaults(func=bind(leaders_elect))

    brokers = sub.add_parser("brokers", help="broker lifecycle").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    c = brokers.add_parser(
        "unregister", parents=[common], help="decommission a stopped broker with no replicas"
    )
    c.add_argument("--id", type=int, required=True, help="the broker's id")
    c.set_defaults(func=bind(brokers_unregister))
    c = brokers.add_parser(
        "safe-to-stop", parents=[common],
        help="exit 0 once stopping a broker leaves every partition at min.insync.replicas (a roll's check)",
    )
    c.add_argument("--id", type=int, required=True, help="the broker's id")
    c.add_argument("--wait-ms-max", type=int, default=0,
                   help="wait up to this long for it to become safe (default 0: answer at once)")
    c.set_defaults(func=bind(brokers_safe_to_stop))

    quorum = sub.add_parser("quorum", help="controller quorum: describe, add or remove a voter "
                                           "(kafka-metadata-quorum)").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    c = quorum.add_parser("describe", parents=[common], help="voters, the active one, term and lag")
    c.set_defaults(func=bind(quorum_describe))
    c = quorum.add_parser("add", parents=[common], help="add a running controller as a voter (one at a time)")
    c.add_argument("--id", type=int, required=True, help="the new controller's id (its --id)")
    c.add_argument(
        "--raft", required=True, help="its Raft HOST:PORT exactly as it advertises it (its --raft)"
    )
    c.add_argument("--grpc", required=True, help="its gRPC HOST:PORT (its --listen, as others dial it)")
    c.set_defaults(func=bind(quorum_add))
    c = quorum.add_parser("remove", parents=[common], help="remove a voter that is not the active controller")
    c.add_argument("--id", type=int, required=True, help="the voter's controller id")
    c.set_defaults(func=bind(quorum_remove))
