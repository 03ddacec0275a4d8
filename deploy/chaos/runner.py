"""One chaos run: start the target, create the run's topic, start the workloads and the monitor, carry out
the fault schedule, heal everything, let the cluster recover, stop the workloads, read every partition,
and check the history.

Order of a run (times from the recorder's start):

    0                 workloads start (producers, consumers, a transactional producer, topic churn, monitor)
    warmup_s          first fault; faults one at a time (schedule.py)
    duration_s - cooldown_s   everything healed (also on any exception or Ctrl-C: `finally`)
    duration_s        workloads stop; wait until every node serves; the final read (read_committed for the
                      transactions' topic); every in-sync
                      replica's own log read from its data directory (replicas.py); the check

Unavailability: a window is a stretch of more than `UNAVAILABLE_GAP_S` with no acknowledgement at all
(from the producers), between the first and the last; each is charged to the fault in force when it began
(`none` when none was) and recorded as an `unavailable` event.
"""

from __future__ import annotations

import itertools
import logging
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from kanal.clients.admin import Admin
from kanal.deploy.chaos.checker import UNCLEAN_KEY, CheckReport, Signals, check, signals
from kanal.deploy.chaos.history import Event, Recorder
from kanal.deploy.chaos.mutation import make_mutant
from kanal.deploy.chaos.nemesis import Nemesis
from kanal.deploy.chaos.remote_store import TIERED_TOPIC_CONFIGS
from kanal.deploy.chaos.replicas import record_replicas
from kanal.deploy.chaos.schedule import Fault, ScheduleOptions, schedule
from kanal.deploy.chaos.storage import BROKER_DISK_BYTES
from kanal.deploy.chaos.target import BootstrapTarget, ContainersTarget, DevTarget
from kanal.deploy.chaos.workload import (
    COMPACT_CONFIGS,
    COMPACT_RECORDS_PER_KEY,
    COMPACT_TOPIC,
    TXN_TOPIC,
    ChurnWorkload,
    ConsumerWorkload,
    Monitor,
    ProducerWorkload,
    StaleCommitWorkload,
    TransactionWorkload,
    final_metadata,
    final_read,
)
from kanal.security.channel_security import ClientSecurity
from kanal.v1.error import KanalError

log = logging.getLogger("kanal.chaos.runner")

TOPIC = "chaos"
UNAVAILABLE_GAP_S = 1.0


@dataclass(frozen=True)
class RunOptions:
    target: str  # "dev", "containers" or a bootstrap address
    faults: tuple[str, ...]
    duration_s: float
    seed: int
    history_path: Path
    partitions: int = 3
    producers: int = 2
    consumers: int = 2
    transactions: int = 1  # transactional producers (workload.TransactionWorkload) on TXN_TOPIC
    keyed_producers: int = 1  # producers of keyed records to the compacted COMPACT_TOPIC
    # acks=1 producers without idempotence on TOPIC (workload.py: a cut-off leader's tail grows with them)
    acks1_producers: int = 1
    fencing: bool = True  # workload.StaleCommitWorkload: a stale generation's commit, every round
    churn: bool = True
    mutation: str | None = None  # mutation.py: a broker with a deliberate bug (the mutation check)
    # The run's topic with unclean.leader.election.enable=true: the checker then allows the loss an unclean
    # election causes (checker.py), and only that.
    unclean: bool = False
    # schedule.py: overlapping episodes and the forced leader-isolating, isr-down and controllers' power cut
    overlap: bool = True
    recovery_timeout_s: float = 90.0  # every node serving again after the faults heal
    final_read_timeout_s: float = 60.0  # the fence records acknowledged and every partition read
    image: str = "kanal:dev"  # the containers target's image (deploy/image/build.sh)
    # TLS and credentials for a secured cluster given by its bootstrap address (None: plaintext).
    security: ClientSecurity | None = None

    def schedule_options(self) -> ScheduleOptions:
        return ScheduleOptions(faults=self.faults, duration_s=self.duration_s, seed=self.seed, topic=TOPIC,
                               partitions=self.partitions, overlap=self.overlap)


@dataclass
class Window:
    start_s: float
    end_s: float
    fault: str

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class RunResult:
    options: RunOptions
    report: CheckReport
    injected: list[tuple[Fault, str]]
    windows: list[Window] = field(default_factory=list)
    failed: int = 0
    signals: Signals | None = None

    @property
    def ok(self) -> bool:
        return self.report.ok

    def longest_window_s(self) -> float:
        return max((w.length_s for w in self.windows), default=0.0)

    def as_dict(self) -> dict:
        """The run's verdict as JSON-ready data (`kanal chaos run --output json`): the table's facts."""
        o, r = self.options, self.report
        return {
            "seed": o.seed, "target": o.target, "duration_s": o.duration_s, "mutation": o.mutation,
            "faults_injected": [{"kind": f.kind, "variant": f.variant, "detail": detail, "start_s": f.start_s,
                                 "end_s": f.end_s} for f, detail in self.injected],
            "sent": r.sent, "acknowledged": r.acknowledged, "failed": self.failed, "read": r.read,
            "final_records": r.final_records,
            "unavailable": [{"start_s": w.start_s, "end_s": w.end_s, "fault": w.fault} for w in self.windows],
            "ok": r.ok, "violations_by_kind": {k: n for k, n in r.counts().items() if n},
            "first_violation": None if r.ok else str(r.first),
            "unchecked": [list(tp) for tp in r.unchecked], "history": str(o.history_path),
            "allowed_loss": r.allowed_loss, "admin_acknowledged": r.admin_acknowledged, "unclean": o.unclean,
            "transactions": dict(r.transactions),
            "power_cuts": [{"node": c.node, "time_s": c.time, "dropped_writes": c.dropped_writes}
                           for c in (self.signals.power_cuts if self.signals else ())],
            "suspicious": list(self.signals.suspicious if self.signals else ()),
        }

    def table(self, number: int = 1, runs: int = 1) -> str:
        o, r = self.options, self.report
        faults = ", ".join(f"{f.kind}/{f.variant} {detail} {f.start_s:.1f}-{f.end_s:.1f}s"
                           for f, detail in self.injected) or "none"
        if self.windows:
            longest = max(self.windows, key=lambda w: w.length_s)
            unavailable = (f"{len(self.windows)} windows, longest {longest.length_s:.1f}s at "
                           f"{longest.start_s:.1f}s ({longest.fault})")
        else:
            unavailable = "none"
        if r.ok:
            violations = "none"
        else:
            counts = ", ".join(f"{k} {n}" for k, n in r.counts().items() if n)
            violations = f"{counts}; first:\n      {str(r.first).replace(chr(10), chr(10) + '      ')}"
        rows = [
            f"run {number}/{runs}  seed {o.seed}  target {o.target}  {o.duration_s:.0f}s"
            + (f"  mutation {o.mutation}" if o.mutation else "")
            + ("  unclean election on" if o.unclean else ""),
            f"  faults injected  {len(self.injected)}: {faults}",
            (f"  acknowledged     {r.acknowledged} of {r.sent} sent ({self.failed} failed), "
            f"{r.read} read by the group, {r.final_records} in the final read"),
            f"  unavailable      {unavailable}",
            f"  metadata         {r.admin_acknowledged} admin operations acknowledged, checked on every node",
            ("  transactions     " + ", ".join(f"{n} {k}" for k, n in r.transactions.items())
             + ", checked read_committed"),
            f"  violations       {violations}",
            f"  history          {o.history_path}",
        ]
        if r.unchecked:
            rows.insert(-1, f"  unchecked        {r.unchecked} (no final read)")
        if r.allowed_loss:
            rows.insert(-1, f"  allowed loss     {r.allowed_loss} (after unclean elections the topic allows)")
        if self.signals is not None and self.signals.power_cuts:
            cuts = ", ".join(f"{c.node} {c.dropped_writes}" for c in self.signals.power_cuts)
            rows.insert(-1, f"  power cuts       writes not fsynced dropped: {cuts}")
        if self.signals is not None and self.signals.suspicious:
            rows.insert(-1, "  suspicious       " + "\n                   ".join(self.signals.suspicious))
        return "\n".join(rows)


def make_target(options: RunOptions, data_dir: Path, mutant=None):
    disk_bytes = BROKER_DISK_BYTES if "disk" in options.faults else None
    power, clock = "power" in options.faults, "clock" in options.faults
    if options.target == "dev":
        return DevTarget(data_dir, mutant=mutant, broker_disk_bytes=disk_bytes, power=power, clock=clock,
                         remote="remote" in options.faults,
                         mirror_topic=TOPIC if "mirror" in options.faults else None)
    if "remote" in options.faults:
        raise ValueError("the remote fault needs --target dev (its S3 server and proxy run on the host, in "
                         "the dev target's network)")
    if "mirror" in options.faults:
        raise ValueError("the mirror fault needs --target dev (its second cluster and the mirror run on the "
                         "host and in the dev target's network)")
    if options.target == "containers":
        if mutant is not None:
            raise ValueError("a mutation needs --target dev (it patches the broker of this checkout)")
        return ContainersTarget(data_dir, image=options.image, broker_disk_bytes=disk_bytes, power=power,
                                clock=clock)
    if options.faults:
        raise ValueError(f"target {options.target}: kanal cannot reach the processes or the network of a "
                         "cluster given by its bootstrap address, so it takes no --faults (use --target dev)")
    if mutant is not None:
        raise ValueError("a mutation needs --target dev")
    return BootstrapTarget(options.target, options.security)


def run_once(options: RunOptions, progress: Callable[[str], None] = lambda line: None) -> RunResult:
    faults = schedule(options.schedule_options())
    mutant = make_mutant(options.mutation) if options.mutation else None
    data_dir = Path(tempfile.mkdtemp(prefix=f"kanal-chaos-{options.seed}-"))
    target = make_target(options, data_dir, mutant)
    options.history_path.parent.mkdir(parents=True, exist_ok=True)
    workloads: list = []
    recorder: Recorder | None = None
    out = open(options.history_path, "w")  # noqa: SIM115 - closed in the finally, after the workloads stop
    try:
        progress(f"seed {options.seed}: starting the {target.name} target")
        target.start()
        security = options.security
        configs = {"min.insync.replicas": "2"}
        if options.unclean:
            configs[UNCLEAN_KEY] = "true"
        # With the remote fault the run's main topic is tiered: most of its records are read back from the
        # store (the final read from offset 0 among them).
        topics = {TOPIC: {**configs, **TIERED_TOPIC_CONFIGS} if "remote" in options.faults else configs}
        if options.transactions:
            topics[TXN_TOPIC] = configs
        if options.keyed_producers:
            topics[COMPACT_TOPIC] = {**configs, **COMPACT_CONFIGS}
        with Admin(target.bootstrap, request_timeout_ms=10_000, security=security) as admin:
            existing = set(admin.list_topics())
            created = {t: c for t, c in topics.items() if t not in existing}
            for topic, topic_configs in created.items():
                admin.create_topic(topic, options.partitions, 3, topic_configs, wait_s=60)
        recorder = Recorder(out)  # time 0 of the schedule
        for topic, topic_configs in created.items():  # acknowledged before time 0: it must outlive every
            recorder.record("create_topic", "admin", topic=topic, ok=True, error="",  # fault like any other
                            count=options.partitions, configs=topic_configs)
        if getattr(target, "mirror", None) is not None:
            recorder.record("mirror", "runner", source_topic=TOPIC, remote_topic=target.mirror.remote_topic)
        nemesis = Nemesis(target, recorder)
        rng = random.Random(f"kanal-chaos-workload:{options.seed}")
        workloads = [Monitor(recorder, target.brokers, target.controllers, TOPIC, security=security)]
        workloads += [
            ProducerWorkload(i, recorder, target.bootstrap, TOPIC, options.partitions, security=security)
            for i in range(options.producers)
        ]
        workloads += [ProducerWorkload(i, recorder, target.bootstrap, COMPACT_TOPIC, options.partitions,
                                       interval_s=0.02, security=security,
                                       records_per_key=COMPACT_RECORDS_PER_KEY)
                      for i in range(options.keyed_producers)]
        workloads += [ConsumerWorkload(i, recorder, target.bootstrap, TOPIC, random.Random(rng.random()),
                                       security=security)
                      for i in range(options.consumers)]
        workloads += [TransactionWorkload(i, recorder, target.bootstrap, options.partitions,
                                          random.Random(rng.random()), security=security)
                      for i in range(options.transactions)]
        workloads += [ProducerWorkload(i, recorder, target.bootstrap, TOPIC, options.partitions,
                                       security=security, acks="1")
                      for i in range(options.acks1_producers)]
        if options.fencing:
            workloads.append(StaleCommitWorkload(recorder, target.bootstrap, TOPIC, security=security))
        if options.churn:
            workloads.append(ChurnWorkload(recorder, target.bootstrap, security=security))
        for w in workloads:
            w.start()
        try:
            _carry_out(faults, nemesis, recorder, options, workloads, progress)
        finally:
            nemesis.heal_all()
        _recover_and_read(target, recorder, workloads, options, progress)
        windows = _unavailable(recorder.events, nemesis.injected, options.duration_s)
        for w in windows:
            recorder.record("unavailable", "runner", start=round(w.start_s, 3), end=round(w.end_s, 3),
                            fault=w.fault)
        events = list(recorder.events)
        report = check(events)
        failed = sum(1 for e in events if e["type"] == "fail")
        return RunResult(options, report, list(nemesis.injected), windows, failed, signals(events))
    finally:
        for w in workloads:
            w.stop()
        for w in workloads:
            w.join(10)  # daemon threads: one stuck in a call cannot keep the run from cleaning up
        if recorder is not None:
            recorder.close()  # a thread still running records into memory only
        out.close()
        target.close()
        if mutant is not None:
            mutant.close()
        # The nodes' output beside the history (HISTORY.logs/), for reading what a violation looked like.
        logs = options.history_path.with_suffix(".logs")
        shutil.rmtree(logs, ignore_errors=True)
        if (data_dir / "logs").is_dir():
            shutil.copytree(data_dir / "logs", logs)
        shutil.rmtree(data_dir, ignore_errors=True)


_DETAIL_CHARS_MAX = 2000  # a no_recovery event's detail


def _recover_and_read(target, recorder: Recorder, workloads, options: RunOptions, progress) -> None:
    """After the faults: every node serving, the workloads stopped, every node's metadata, the final read,
    the in-sync replicas' logs. A cluster that does not come back is a finding about kanal, not a failure
    of the run: it is recorded as `no_recovery` with what was waited for and the error (the checker makes it
    a violation), and the metadata every node still answers with is read all the same, so a run that lost
    its metadata names what it lost."""
    step = "every node serving"
    try:
        progress(f"seed {options.seed}: healed; waiting for every node to serve")
        target.wait_all_serving(options.recovery_timeout_s)
        step = "the workloads stopping"
        for w in workloads:  # all at once: one stopping after another kept the rest producing for minutes
            w.stop()
        for w in reversed(workloads):
            w.join_checked(60)
        step = "every node's metadata"
        final_metadata(recorder, target.brokers, target.controllers, security=options.security)
        step = "the final read"
        progress(f"seed {options.seed}: final read")
        final_read(recorder, target.bootstrap, TOPIC, options.partitions,
                   timeout_s=options.final_read_timeout_s, security=options.security)
        if options.transactions:
            final_read(recorder, target.bootstrap, TXN_TOPIC, options.partitions, read_committed=True,
                       timeout_s=options.final_read_timeout_s, security=options.security)
        if options.keyed_producers:
            final_read(recorder, target.bootstrap, COMPACT_TOPIC, options.partitions,
                       timeout_s=options.final_read_timeout_s, security=options.security)
        mirror = getattr(target, "mirror", None)
        if mirror is not None:  # the copy once the mirror has caught up with the source's final log
            step = "the mirror catching up"
            progress(f"seed {options.seed}: waiting for the mirror to catch up")
            with Admin(target.bootstrap, request_timeout_ms=10_000, security=options.security) as admin:
                bounds = admin.log_bounds(TOPIC, list(range(options.partitions)))
            mirror.caught_up({p: end for p, (_start, end) in bounds.items()}, options.final_read_timeout_s)
            step = "the final read of the mirror's copy"
            final_read(recorder, mirror.bootstrap, mirror.remote_topic, options.partitions,
                       read_committed=True, timeout_s=options.final_read_timeout_s, fence=False)
        if target.takes_faults:  # a target whose data directories the run has: every ISR member's own log
            step = "the in-sync replicas' logs"
            progress(f"seed {options.seed}: reading the in-sync replicas' logs")
            record_replicas(recorder, target.bootstrap, target.data_dir, TOPIC, options.partitions)
    except (TimeoutError, KanalError, RuntimeError) as exc:
        cause = exc.__cause__
        # A node that exits while the cluster is asked to serve again (e.g. one refusing a metadata log that
        # names another cluster, after that log was lost) is the cluster not coming back: a finding about
        # kanal. Any other bare RuntimeError is a workload of the harness failing for its own reasons.
        harness_own = step != "every node serving" and not isinstance(
            cause, (TimeoutError, KanalError, grpc.RpcError)
        )
        if isinstance(exc, RuntimeError) and harness_own:
            raise  # no verdict about kanal
        log.warning("no recovery (%s): %s", step, exc)
        detail = f"{step}: {exc!r}"
        # Bounded, keeping the end: a node's exit names its reason in its last output lines.
        if len(detail) > _DETAIL_CHARS_MAX:
            detail = f"{detail[:300]} ... {detail[-(_DETAIL_CHARS_MAX - 305):]}"
        recorder.record("no_recovery", "runner", detail=detail)
        if step in ("every node serving", "the workloads stopping"):
            for w in workloads:
                w.stop()
            try:
                # As long as the final read may wait: the nodes still starting (a node that refused to
                # start ends the wait for every node at once) answer with what they kept.
                final_metadata(recorder, target.brokers, target.controllers,
                               timeout_s=options.final_read_timeout_s, security=options.security)
            except (KanalError, RuntimeError, OSError) as again:
                log.warning("metadata after no recovery: %s", again)


def _carry_out(faults: list[Fault], nemesis: Nemesis, recorder: Recorder, options: RunOptions, workloads,
               progress) -> None:
    heal_at = options.duration_s - options.schedule_options().cooldown_s
    pending = sorted(faults, key=lambda f: f.start_s)
    active: list[tuple[Fault, str]] = []  # overlapping episodes hold several at once
    while True:
        now = recorder.now()
        for w in workloads:
            if w.error is not None:
                raise RuntimeError(f"{w.process} failed: {w.error!r}") from w.error
        for fault, detail in [a for a in active if now >= a[0].end_s]:
            nemesis.stop(fault, detail)
            active.remove((fault, detail))
        while pending and now >= pending[0].start_s:
            fault = pending.pop(0)
            active.append((fault, nemesis.start(fault)))
        if now >= heal_at and not active and not pending:
            break
        acked = sum(getattr(w, "acked", 0) for w in workloads)
        doing = "; ".join(f"{f.kind}/{f.variant} {d}" for f, d in active) or "healed"
        progress(f"seed {options.seed}: t={now:5.1f}/{options.duration_s:.0f}s acked={acked} {doing}")
        time.sleep(0.2)  # the fault clock's tick: faults start and end within 0.2 s of their schedule
    while recorder.now() < options.duration_s:
        progress(f"seed {options.seed}: t={recorder.now():5.1f}/{options.duration_s:.0f}s recovering")
        time.sleep(0.2)


def _unavailable(events: list[Event], injected: list[tuple[Fault, str]], until_s: float) -> list[Window]:
    # The producers' acknowledgements while the run lasts (not the final read's fence records after it).
    acks = sorted(
        float(e["time"])
        for e in events
        if e["type"] == "ack" and e["process"].startswith("producer-") and float(e["time"]) <= until_s
    )
    out = []
    for before, after in itertools.pairwise(acks):
        if after - before > UNAVAILABLE_GAP_S:
            fault = next((f"{f.kind}/{f.variant}" for f, _ in injected
                          if f.start_s <= before + UNAVAILABLE_GAP_S and before <= f.end_s), "none")
            out.append(Window(before, after, fault))
    return out
