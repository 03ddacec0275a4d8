"""Helpers for the raft tests.

Unit tests (no sockets, no sleeps): `Chain` builds the conditional Raft commands a controller would
propose, with a mirror image that follows them, and `FakeClock` is a settable clock.

Process tests: `Quorum` starts real controller processes (`python -m kanal.raft.controller_main`) on
127.0.0.1 with ports chosen at run time, talks to them over gRPC, kills and restarts them by PID, and
stops every process it started in teardown (SIGTERM, then SIGKILL after a deadline). `wait_until` waits
for a condition with a deadline instead of sleeping. The helpers are handed to tests through fixtures
(pytest's importlib mode does not let test modules import this file).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pysyncobj import HAS_CRYPTO

from kanal.broker.storage.log import Log
from kanal.deploy.local_cluster import free_ports
from kanal.metadata import MetadataImage, apply_batch
from kanal.metadata.log_codec import LogBatch
from kanal.net.channel_options import channel_options
from kanal.raft.command import UNCONDITIONAL_OFFSET, ProposalId, ProposalIdSource, encode_command
from kanal.raft.metadata_log import METADATA_LOG_DIR_NAME, metadata_log_config, read_all
from kanal.v1 import admin_pb2, controller_pb2, controller_pb2_grpc, metadata_pb2
from tests.harness.waiting import wait_until as _wait_until

T = TypeVar("T")


# -- waiting ---------------------------------------------------------------------------------------


def wait_until(
    condition: Callable[[], T], timeout_s: float, what: str = "condition", interval_s: float = 0.02
) -> T:
    """The tests' one wait (tests.harness.waiting), where a process that is starting or stopping (a gRPC
    error, a refused connection) counts as "not yet"."""
    return _wait_until(condition, timeout_s, what, interval_s, tolerate=(grpc.RpcError, OSError))


@pytest.fixture
def wait() -> Callable[..., Any]:
    return wait_until


# -- unit-test helpers -----------------------------------------------------------------------------


class FakeClock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class Chain:
    """Builds commands the way an active controller would, against a mirror of the committed image."""

    def __init__(self, incarnation: bytes = b"\x07" * 8) -> None:
        self.ids = ProposalIdSource(incarnation)
        self.image = MetadataImage()
        self.last = ProposalId.NONE
        self.now_ms = 1_000

    def stamp(self, **body: Any) -> metadata_pb2.MetadataRecord:
        self.now_ms += 1
        return metadata_pb2.MetadataRecord(
            time_ms=self.now_ms, principal="test", request_id=f"r{self.now_ms}", **body
        )

    def noop(self, epoch: int, *, mirror: bool = True) -> bytes:
        batch = metadata_pb2.MetadataBatch(
            controller_epoch=epoch, records=[self.stamp(no_op=metadata_pb2.NoOpRecord())]
        )
        proposal = self.ids.next()
        data = encode_command(proposal, ProposalId.NONE, UNCONDITIONAL_OFFSET, batch)
        if mirror:
            apply_batch(self.image, batch, self.image.next_offset)
            self.last = proposal
        return data

    def command(
        self, records: Iterable[metadata_pb2.MetadataRecord], epoch: int, *, parent: ProposalId | None = None,
        mirror: bool = True,
    ) -> bytes:
        batch = metadata_pb2.MetadataBatch(controller_epoch=epoch, records=list(records))
        proposal = self.ids.next()
        data = encode_command(
            proposal, self.last if parent is None else parent, self.image.next_offset, batch
        )
        if mirror:
            apply_batch(self.image, batch, self.image.next_offset)
            self.last = proposal
        return data

    def register(self, broker_id: int, epoch: int) -> bytes:
        record = self.stamp(
            register_broker=metadata_pb2.RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=f"inc-{broker_id}",
                broker_epoch=self.image.next_offset,
                endpoint=f"127.0.0.1:{9000 + broker_id}",
                fenced=True,
            )
        )
        return self.command([record], epoch)


@pytest.fixture
def chain() -> Chain:
    return Chain()


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


def open_log(directory: Path) -> Log:
    return Log.open(directory, metadata_log_config(3 * 1024 * 1024))


@pytest.fixture
def log_factory() -> Callable[[Path], Log]:
    return open_log


# -- process quorum --------------------------------------------------------------------------------

# A controller must not outlive a test run that was killed: `setpriv --pdeathsig KILL` (util-linux) asks
# the kernel to SIGKILL it when the test process dies. Not a preexec_fn: running Python code between fork
# and exec in a process with gRPC threads runs gRPC's fork handlers in the child, which can abort it.
_DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


class Quorum:
    """N controller processes on loopback. Controller ids are 1..N.

    Raft traffic is encrypted with a cluster secret, as in production, when the `cryptography` package
    pysyncobj needs for it is installed (a project dependency); without it the quorum runs in the clear
    rather than not at all."""

    SECRET = "kanal-test-secret" if HAS_CRYPTO else None

    def __init__(self, base_dir: Path, size: int = 3, extra_args: Iterable[str] = (),
                 voters: int | None = None) -> None:
        """`voters`: how many of the ids (1..voters) form the quorum at first (all by default); the others
        are controllers to add later (quorum changes): each starts with --peers naming the first voters
        and itself."""
        self.base_dir = base_dir
        self.ids = list(range(1, size + 1))
        self.voter_count = size if voters is None else voters
        ports = free_ports(3 * size)
        self.grpc_port = {i: ports[3 * (i - 1)] for i in self.ids}
        self.raft_port = {i: ports[3 * (i - 1) + 1] for i in self.ids}
        # Each controller's Prometheus endpoint (on by default, at one fixed port): a port of its own.
        self.metrics_port = {i: ports[3 * (i - 1) + 2] for i in self.ids}
        self.extra_args = list(extra_args)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._channels: dict[int, grpc.Channel] = {}
        self.peers = ",".join(self.peer(i) for i in self.ids[: self.voter_count])

    def peer(self, i: int) -> str:
        """Controller i's --peers entry."""
        return f"{i}=127.0.0.1:{self.raft_port[i]}=127.0.0.1:{self.grpc_port[i]}"

    def peers_of(self, i: int) -> str:
        """--peers for controller i: the first voters, and i itself when it is one to add later."""
        return self.peers if i <= self.voter_count else f"{self.peers},{self.peer(i)}"

    def data_dir(self, i: int) -> Path:
        return self.base_dir / f"controller-{i}"

    def log_path(self, i: int) -> Path:
        return self.base_dir / f"controller-{i}.out"

    def endpoint(self, i: int) -> str:
        return f"127.0.0.1:{self.grpc_port[i]}"

    def args(self, i: int) -> list[str]:
        return [
            *_DIE_WITH_PARENT,
            sys.executable, "-m", "kanal.raft.controller_main",
            "--id", str(i),
            "--listen", self.endpoint(i),
            "--raft", f"127.0.0.1:{self.raft_port[i]}",
            "--peers", self.peers_of(i),
            "--data-dir", str(self.data_dir(i)),
            *(["--cluster-secret", self.SECRET] if self.SECRET else []),
            *([] if "--metrics" in self.extra_args else ["--metrics", f"127.0.0.1:{self.metrics_port[i]}"]),
            *self.extra_args,
        ]

    # -- processes

    def start(self, i: int) -> None:
        if self.alive(i):
            raise RuntimeError(f"controller {i} is running")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path(i), "ab") as out:  # Popen keeps its own copy of the descriptor
            self.procs[i] = subprocess.Popen(self.args(i), stdout=out, stderr=subprocess.STDOUT, env=env)

    def start_all(self) -> None:
        for i in self.ids:
            self.start(i)

    def alive(self, i: int) -> bool:
        proc = self.procs.get(i)
        return proc is not None and proc.poll() is None

    def kill(self, i: int) -> None:
        """SIGKILL, by PID."""
        proc = self.procs[i]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self, i: int, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout_s`; the exit status."""
        proc = self.procs.get(i)
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            return proc.wait(10)

    def stop_all(self) -> None:
        for i in self.ids:
            self.stop(i)
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def alive_ids(self) -> list[int]:
        return [i for i in self.ids if self.alive(i)]

    # -- gRPC

    def stub(self, i: int) -> controller_pb2_grpc.ControllerStub:
        channel = self._channels.get(i)
        if channel is None:
            channel = grpc.insecure_channel(self.endpoint(i), options=channel_options())
            self._channels[i] = channel
        return controller_pb2_grpc.ControllerStub(channel)

    def serving(self, i: int) -> bool:
        channel = self._channels.get(i) or grpc.insecure_channel(self.endpoint(i), options=channel_options())
        self._channels[i] = channel
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=1
        )
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    def active_id(self) -> int | None:
        """The controller that answers a validate-only write itself (so it is active), if any."""
        for i in self.alive_ids():
            try:
                quorum = self.stub(i).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=1)
            except grpc.RpcError:
                continue
            leader = quorum.leader_id
            if leader in self.ids and self.alive(leader):
                try:
                    self.stub(leader).CreateTopics(
                        admin_pb2.CreateTopicsRequest(
                            topics=[
                                admin_pb2.CreatableTopic(name="probe", partitions=1, replication_factor=1)
                            ],
                            validate_only=True,
                        ),
                        timeout=1,
                        metadata=(("kanal-forwarded", "test"),),
                    )
                except grpc.RpcError:
                    return None
                return leader
        return None

    def wait_active(self, timeout_s: float = 30.0) -> int:
        return wait_until(self.active_id, timeout_s, "an active controller")

    def wait_all_serving(self, timeout_s: float = 30.0) -> None:
        for i in self.alive_ids():
            wait_until(lambda i=i: self.serving(i), timeout_s, f"controller {i} SERVING")

    def end_offset(self, i: int) -> int:
        return self.stub(i).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=2).metadata_end_offset

    def fetch_all(self, i: int) -> list[LogBatch]:
        """Every batch of controller i's metadata log, through FetchMetadata."""
        return self.fetch_from(i, 0)

    def fetch_from(self, i: int, offset: int) -> list[LogBatch]:
        """The batches of controller i's metadata log from `offset` (a batch boundary) to its end."""
        from kanal.metadata.log_codec import iter_batches

        out: list[LogBatch] = []
        end = self.end_offset(i)
        while offset < end:
            reply = self.stub(i).FetchMetadata(
                controller_pb2.FetchMetadataRequest(offset=offset, max_bytes=1 << 20), timeout=5
            )
            assert reply.error == 0, reply.error_message
            for batch in iter_batches(reply.entries):
                out.append(batch)
                offset = batch.end_offset
        return out

    def read_log_files(self, i: int) -> list[LogBatch]:
        """Controller i's metadata log, read from its files (the controller must be stopped)."""
        if self.alive(i):
            raise RuntimeError(f"controller {i} is running")
        log = open_log(self.data_dir(i) / METADATA_LOG_DIR_NAME)
        try:
            return read_all(log)
        finally:
            log.close()

    def registrations_done(self) -> bool:
        """Every running controller's directory-id registration of its latest start is committed
        (disk_identity.py's RegistrationThread writes it a moment after the start: a write landing after
        logs were compared, or after one controller stopped, would make them differ)."""
        for i in self.alive_ids():
            text = self.log_path(i).read_text(errors="replace")
            if text.rfind("the quorum records directory") < text.rfind(f"controller {i} started"):
                return False
        return True

    def tail(self, i: int, lines: int = 60) -> str:
        proc = self.procs.get(i)
        status = f"pid {proc.pid} exit status {proc.poll()}" if proc is not None else "never started"
        try:
            text = self.log_path(i).read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        return status + "\n" + "\n".join(text.splitlines()[-lines:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def quorum_factory(request, tmp_path):
    """Start quorums with `quorum_factory(size=3, extra_args=[...])`; all are stopped in teardown, and
    their controllers' output is printed when the test failed."""
    quorums: list[Quorum] = []

    def make(
        size: int = 3, extra_args: Iterable[str] = (), start: bool = True, voters: int | None = None
    ) -> Quorum:
        q = Quorum(tmp_path / f"quorum-{len(quorums)}-{uuid.uuid4().hex[:6]}", size, extra_args, voters)
        q.base_dir.mkdir(parents=True)
        quorums.append(q)
        if start:
            for i in q.ids[: q.voter_count]:
                q.start(i)
        return q

    yield make
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for q in quorums:
        q.stop_all()
        if failed:
            for i in q.ids:
                print(f"\n----- controller {i} output (tail) -----\n{q.tail(i)}")


# -- gRPC call helpers -----------------------------------------------------------------------------


def error_code(exc: grpc.RpcError) -> int | None:
    """The kanal ErrorCode number carried in a failed call's trailing metadata."""
    for key, value in exc.trailing_metadata() or ():
        if key == "kanal-error-code":
            return int(value)
    return None


@pytest.fixture
def kanal_error_code() -> Callable[[grpc.RpcError], int | None]:
    return error_code


class FakeBrokers:
    """Test code playing brokers over gRPC: RegisterBroker and BrokerHeartbeat, nothing else."""

    def __init__(self, quorum: Quorum) -> None:
        self.quorum = quorum
        self.epochs: dict[int, int] = {}

    def _active_stub(self) -> controller_pb2_grpc.ControllerStub:
        return self.quorum.stub(self.quorum.wait_active())

    def register(self, broker_id: int, rack: str = "") -> int:
        reply = self._active_stub().RegisterBroker(
            controller_pb2.RegisterBrokerRequest(
                broker_id=broker_id,
                incarnation_id=uuid.uuid4().hex,
                endpoint=f"127.0.0.1:{20000 + broker_id}",
                rack=rack,
            ),
            timeout=10,
        )
        assert reply.error == 0, reply.error_message
        self.epochs[broker_id] = reply.broker_epoch
        return reply.broker_epoch

    def heartbeat(
        self, broker_id: int, metadata_offset: int = 1 << 40
    ) -> controller_pb2.BrokerHeartbeatResponse:
        return self._active_stub().BrokerHeartbeat(
            controller_pb2.BrokerHeartbeatRequest(
                broker_id=broker_id, broker_epoch=self.epochs[broker_id], metadata_offset=metadata_offset
            ),
            timeout=10,
        )

    def register_live(self, broker_ids: Iterable[int]) -> None:
        """Register and unfence (a heartbeat that reports having caught up)."""
        for b in broker_ids:
            self.register(b)
        for b in broker_ids:
            reply = self.heartbeat(b)
            assert reply.error == 0 and not reply.fenced, reply


@pytest.fixture
def fake_brokers_factory() -> Callable[[Quorum], FakeBrokers]:
    return FakeBrokers


def replay(batches: Iterable[LogBatch]) -> MetadataImage:
    """The image a follower of the metadata log builds: apply_batch on every batch, in order."""
    image = MetadataImage()
    for batch in batches:
        if batch.base_offset != image.next_offset:
            raise AssertionError(
                f"batch at {batch.base_offset} does not follow the image at {image.next_offset}"
            )
        apply_batch(image, batch.metadata_batch(), batch.base_offset)
    return image


@pytest.fixture
def replay_log() -> Callable[[Iterable[LogBatch]], MetadataImage]:
    return replay


NO_FORWARD = (("kanal-forwarded", "test"),)


class AdminWriter:
    """Creates topics one request at a time against whichever controller is active, calling it directly
    (no forwarding), and records each request's outcome precisely:

    - acked: the call succeeded and every topic's result is NONE — the topics must exist;
    - failed: the controller answered NOT_CONTROLLER or CONTROLLER_NOT_AVAILABLE, which it only does
      when nothing was proposed or the proposal was rejected for good, or no connection could be made to
      any candidate (the request was never sent) — the topics must not exist;
    - unknown: REQUEST_TIMED_OUT, or the call broke off (the controller died mid-call) — either way.
    """

    def __init__(self, quorum: Quorum, topics_per_request: int = 1) -> None:
        self.quorum = quorum
        self.topics_per_request = topics_per_request
        self.acked: list[list[str]] = []
        self.failed: list[list[str]] = []
        self.unknown: list[list[str]] = []
        self.other: list[tuple[list[str], str]] = []
        self.last_error = ""
        self._n = 0
        self._target: int | None = None

    def _names(self) -> list[str]:
        self._n += 1
        return [f"w{self._n}-{k}" for k in range(self.topics_per_request)]

    def write_once(self, timeout_s: float = 3.0) -> str:
        names = self._names()
        candidates = self.quorum.alive_ids()
        if self._target in candidates:
            candidates.remove(self._target)
            candidates.insert(0, self._target)
        request = admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name=n, partitions=1, replication_factor=1) for n in names]
        )
        outcome = "failed"
        for i in candidates:
            try:
                reply = self.quorum.stub(i).CreateTopics(request, timeout=timeout_s, metadata=NO_FORWARD)
            except grpc.RpcError as exc:
                code = error_code(exc)
                self.last_error = f"controller {i}: {exc.code()} {code} {exc.details()}"
                if code in (16, 53):  # NOT_CONTROLLER, CONTROLLER_NOT_AVAILABLE: certainly not applied
                    continue
                if exc.code() == grpc.StatusCode.UNAVAILABLE and "failed to connect" in (exc.details() or ""):
                    continue  # never sent: the connection was not made (a controller that just died)
                outcome = "unknown"  # REQUEST_TIMED_OUT, or the call broke off
                break
            errors = {r.error for r in reply.results}
            if errors == {0}:
                self._target = i
                outcome = "acked"
            else:
                self.other.append((names, str(reply)))
                outcome = "other"
            break
        {"acked": self.acked, "failed": self.failed, "unknown": self.unknown}.get(outcome, []).append(names)
        return outcome

    @contextlib.contextmanager
    def writing(self, seconds_max: float = 90, requests_max: int = 2_000):
        """Write on a background thread for the with-block, bounded in count and in time; the thread is
        stopped and joined on leaving (it must not outlive the block)."""
        stop = threading.Event()
        deadline = time.monotonic() + seconds_max

        def loop() -> None:
            for _ in range(requests_max):
                if stop.is_set() or time.monotonic() > deadline:
                    return
                self.write_once()

        thread = threading.Thread(target=loop, name="admin-writer")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(60)
        if thread.is_alive():
            raise AssertionError("the admin writer did not stop within 60 s")

    def __repr__(self) -> str:
        return (
            f"<AdminWriter acked={len(self.acked)} failed={len(self.failed)} unknown={len(self.unknown)} "
            f"other={len(self.other)} last_error={self.last_error!r}>"
        )

    def all_names(self, groups: list[list[str]]) -> set[str]:
        return {n for g in groups for n in g}

    def check(self, existing: set[str]) -> None:
        """The history is consistent with the topics that exist now."""
        written = self.acked + self.failed + self.unknown
        assert not self.other, self.other[:3]
        for group in self.acked:
            assert set(group) <= existing, f"acknowledged topics lost: {set(group) - existing}"
        for group in self.failed:
            assert not set(group) & existing, f"topics of a failed request exist: {set(group) & existing}"
        for group in written:
            # A request is atomic: all of its topics or none.
            present = set(group) & existing
            assert present in (set(), set(group)), f"half-applied request: {sorted(present)} of {group}"


@pytest.fixture
def admin_writer_factory() -> Callable[..., AdminWriter]:
    return AdminWriter


def existing_topics(quorum: Quorum, i: int, names: Iterable[str]) -> set[str]:
    """Which of `names` exist in controller i's committed image (DescribeConfigs answers per topic)."""
    names = list(names)
    out: set[str] = set()
    for start in range(0, len(names), 200):
        chunk = names[start : start + 200]
        reply = quorum.stub(i).DescribeConfigs(
            admin_pb2.DescribeConfigsRequest(
                resources=[
                    admin_pb2.ConfigResource(type=metadata_pb2.CONFIG_RESOURCE_TOPIC, name=n) for n in chunk
                ]
            ),
            timeout=10,
        )
        out |= {r.resource.name for r in reply.results if r.error == 0}
    return out


@pytest.fixture
def topics_that_exist() -> Callable[[Quorum, int, Iterable[str]], set[str]]:
    return existing_topics


@pytest.fixture(scope="module")
def live_quorum(tmp_path_factory, request):
    """One quorum for a whole module, with brokers 1..3 registered and live (600 s sessions, so they
    need no heartbeats). Yields (quorum, fake brokers)."""
    q = Quorum(tmp_path_factory.mktemp("live-quorum"), 3, ["--session-timeout-ms", "600000"])
    failed_before = request.session.testsfailed
    q.start_all()
    try:
        q.wait_active()
        brokers = FakeBrokers(q)
        brokers.register_live([1, 2, 3])
        q.wait_all_serving()
        # Each controller records its directory id a moment after it starts: a test that checks a call
        # changes nothing must not see that registration land during the call.
        wait_until(q.registrations_done, 60, "the controllers' directory registrations committed")
        yield q, brokers
    finally:
        q.stop_all()
        if request.session.testsfailed != failed_before:
            for i in q.ids:
                print(f"\n----- controller {i} output (tail) -----\n{q.tail(i)}")
