"""ControllerServer: one controller process assembled — metadata log, store, applier, Raft node, active
controller, gRPC server (Controller service, grpc.health.v1, reflection).

Start order: the data directory's identity is read or made (disk_identity.py); the metadata log is opened
(recovered if the last run crashed); the gRPC server starts (NOT_SERVING), so peers can fetch from this
controller even while it catches up; the Prometheus endpoint binds unless --metrics is off
(controller_metrics.py; an address in use is a StartupError); the directory id is checked against what the
other controllers recorded for this id (a controller on an empty or wrong disk stops here, before it could
vote: StartupError, exit status 1); the Applier and the active-controller loop start; then pysyncobj, which
replays its journal (and snapshot) into the Applier. Health turns SERVING once pysyncobj has caught up with
the leader's commit index (its "ready") and a leader is known; it turns NOT_SERVING again while no leader is
known (an election, or no quorum).

Stop order (SIGTERM): the metrics endpoint closes, gRPC stops taking calls (writes in flight get the grace
period to commit), the loop stops (no more proposals: this controller takes no more writes), then, if this
controller is the Raft leader, it hands leadership to the most caught-up voter (Raft's TimeoutNow, see
hand_off_leadership) and waits, at most HAND_OFF_ELECTION_TIMEOUTS maximal election timeouts, until it is a
follower: the quorum has a new active controller about when this one exits, instead of an election timeout
after it. Then pysyncobj stops, the Applier applies what it has, the metadata log is closed cleanly. The
handoff moves nothing that is not committed and proposes nothing: Raft's election rules alone decide, so a
failed handoff leaves exactly the crash case (an election after the timeout).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent import futures
from dataclasses import replace
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from pysyncobj import SyncObjException

from kanal.broker.storage.meta_properties import load_or_create, record_cluster_id
from kanal.raft.active_controller import ActiveController
from kanal.raft.applier import Applier
from kanal.raft.controller_config import ControllerConfig
from kanal.raft.controller_metrics import (
    ControllerCollector,
    image_counts,
    start_metrics_server,
    write_latency_histogram,
)
from kanal.raft.controller_service import ControllerService
from kanal.raft.disk_identity import (
    DiskIdentityError,
    RegistrationThread,
    check_against_quorum,
    cluster_problem,
    open_identity,
)
from kanal.raft.metadata_log import open_metadata_log
from kanal.raft.metadata_store import MetadataStore
from kanal.raft.peer_client import CHANNEL_OPTIONS, PeerClient
from kanal.raft.quorum_change import QuorumChange
from kanal.raft.raft_node import RaftNode
from kanal.raft.schema_registry_service import ControllerSchemaRegistry
from kanal.raft.voter_roster import VoterRoster
from kanal.security.authentication import Authenticator, server_interceptor
from kanal.security.listener_security import is_loopback_bind, warn_if_exposed
from kanal.server.clock import Clock
from kanal.server.fatal import stop_process
from kanal.server.flags import LIVENESS_SERVICE
from kanal.server.metrics_endpoint import node_registry
from kanal.server.reflection import enable_reflection
from kanal.v1 import controller_pb2, controller_pb2_grpc, schema_registry_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

_log = logging.getLogger("kanal.raft.server")

# How long a stopping leader waits for another voter to take over, in maximal election timeouts.
HAND_OFF_ELECTION_TIMEOUTS = 4
SERVICE_NAME = controller_pb2.DESCRIPTOR.services_by_name["Controller"].full_name

# protoc's generated registration function is untyped; one name for it keeps that to one place.
_ADD_REGISTRY_SERVICER: Any = schema_registry_pb2_grpc.add_SchemaRegistryServicer_to_server

class StartupError(Exception):
    """The controller could not start (a port in use, a data directory it cannot use, ...)."""


class ControllerServer:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self._stopped = threading.Event()
        self._health_lock = threading.Lock()
        try:
            self.identity = open_identity(config.data_dir, config.controller_id)
        except DiskIdentityError as exc:
            raise StartupError(str(exc)) from exc
        try:
            config.data_dir.mkdir(parents=True, exist_ok=True)
            self.log = open_metadata_log(config.data_dir, config.metadata_batch_bytes_max,
                                         config.metadata_log_segment_bytes)
        except OSError as exc:
            raise StartupError(f"cannot open the metadata log under {config.data_dir}: {exc}") from exc
        self.store = MetadataStore(self.log, config.snapshot_settings)
        self._check_own_log_cluster()
        # The voters now: the committed image's VoterSetRecord, or --peers before any quorum change.
        self.roster = VoterRoster(config, lambda: self.store.read(lambda image: image.voters))
        self.peers = PeerClient(config, roster=self.roster)
        # One registry for the process: the runtime collectors, the write-latency histogram the active
        # controller observes, and (at start) the collector reading the image and Raft's status.
        self._metrics_registry = node_registry()
        self.controller = ActiveController(config, self.store,
                                           on_write_s=write_latency_histogram(self._metrics_registry).observe,
                                           roster=self.roster)
        self._clock = Clock()
        self.applier = Applier(self.store, self.controller.on_applied, stop_process,
                               housekeeping=self._housekeeping)
        self.raft: RaftNode | None = None
        self.quorum: QuorumChange | None = None
        self._registration: RegistrationThread | None = None
        self.health = health.HealthServicer()
        self._serving: bool | None = None
        self._metrics_server = None
        # Every call is authenticated at the door and served with its principal bound
        # (kanal.security.authentication); passwords are checked against the SCRAM credentials of this
        # controller's
        # committed image.
        self.authenticator = Authenticator(
            config.security,
            lambda user: self.store.read(lambda image: dict(image.scram_credentials.get(user, {}))),
            unready=self._unready,
        )
        self.grpc_server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.grpc_threads, thread_name_prefix="grpc"),
            options=CHANNEL_OPTIONS,
            interceptors=[server_interceptor(self.authenticator)],
        )

    def __repr__(self) -> str:
        return (f"<ControllerServer {self.config.controller_id} grpc={self.config.listen} "
                f"raft={self.config.raft}>")

    def start(self) -> None:
        self._set_serving(False)
        service = ControllerService(self.config, self.controller, self.store, self._quorum_status, self.peers,
                                    quorum=self._quorum_change)
        controller_pb2_grpc.add_ControllerServicer_to_server(service, self.grpc_server)
        registry = ControllerSchemaRegistry(self.controller, service.gate, self.config.request_timeout_ms,
                                            self.config.controller_id, service.active_endpoint)
        _ADD_REGISTRY_SERVICER(registry, self.grpc_server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc_server)
        # Liveness: SERVING while the process answers at all, catching up or not (a pod's liveness probe).
        self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        enable_reflection((SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name),
                          self.grpc_server)
        try:
            security = self.config.security
            port = (self.grpc_server.add_secure_port(str(self.config.listen), security.server_credentials())
                    if security.tls else self.grpc_server.add_insecure_port(str(self.config.listen)))
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {self.config.listen}: {exc}") from exc
        if port == 0:
            raise StartupError(f"cannot listen on {self.config.listen}")
        self.grpc_server.start()
        _log.info("gRPC listener %s: %s", self.config.listen, self.config.security.describe())
        warn_if_exposed(
            self.config.listen.host, self.config.security, _log, f"controller {self.config.controller_id}"
        )
        if self.config.cluster_secret is None and not is_loopback_bind(self.config.raft_bind.host):
            _log.warning(
                "controller %d's Raft port %s is reachable from other machines without --cluster-secret: "
                "Raft traffic is plain and unauthenticated",
                self.config.controller_id,
                self.config.raft_bind,
            )
        if self.config.metrics_listen is not None:
            collector = ControllerCollector(
                counts=lambda: self.store.read(image_counts),
                durable_end_offset=lambda: self.store.durable_end_offset,
                quorum=lambda: None if self.raft is None else self.raft.status(),
                active=lambda: self.raft is not None and self.controller.is_active(),
            )
            try:
                self._metrics_server = start_metrics_server(self.config.metrics_listen, collector,
                                                            self._metrics_registry)
            except OSError as exc:
                self.grpc_server.stop(0)
                raise StartupError(f"cannot serve metrics on {self.config.metrics_listen}: {exc}") from exc
        try:
            check_against_quorum(self.identity, self.peers, [v.controller_id for v in self.config.others],
                                 data_dir=self.config.data_dir)
        except DiskIdentityError as exc:
            self.grpc_server.stop(0)
            self._stop_metrics()
            raise StartupError(str(exc)) from exc
        self.applier.start()
        self.raft = RaftNode(
            self.config,
            self.store,
            self.applier,
            fetch_missing=self._fetch_missing,
            on_snapshot_loaded=self.controller.on_snapshot_loaded,
            on_state_changed=self.controller.wake,
            roster=self.roster,
        )
        self.quorum = QuorumChange(self.controller, self.roster, self.raft, self.config.security.outbound())
        try:
            self.raft.waitBinded()
        except SyncObjException as exc:  # BindError: pysyncobj could not bind the address within its retries
            raise StartupError(f"cannot bind the Raft address {self.config.raft}: {exc}") from exc
        self.controller.attach(self.raft, on_step=self._on_step)
        self.controller.start()
        self._registration = RegistrationThread(self.identity, self.controller, self.peers, stop_process)
        self._registration.start()
        _log.info("controller %d started: gRPC %s, Raft %s", self.config.controller_id, self.config.listen,
                  self.config.raft)

    def stop(self, grace_s: float = 2.0) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._set_serving(False)
        self._stop_metrics()
        if self._registration is not None:
            self._registration.stop()
        self.grpc_server.stop(grace_s).wait(grace_s + 1)
        self.controller.stop()
        if self.raft is not None:
            self._hand_off_leadership()
            self.raft.destroy_synchronous()
        self.applier.stop()
        self.peers.close()
        self.store.close()
        _log.info("controller %d stopped", self.config.controller_id)

    def _housekeeping(self) -> None:
        # On the applier thread: metadata log retention, and a snapshot (pysyncobj compaction) when due.
        if self.store.maintain(self._clock.now_ms()) and self.raft is not None:
            self.raft.request_snapshot()

    def _hand_off_leadership(self) -> bool:
        """If this controller leads, make another voter lead before pysyncobj stops; whether one did."""
        raft = self.raft
        if raft is None or not raft.is_leader() or not self.roster.others:
            return False
        me = self.config.controller_id
        if not any(v.reachable for v in raft.status().voters if v.controller_id != me):
            # The rest of the quorum is down (a whole cluster stopping): nobody to hand over to.
            _log.info("stopping as the Raft leader with no other controller connected: no handoff")
            return False
        election_s = self.config.election_timeout_ms_max / 1000
        retry_s = 2 * self.config.raft_heartbeat_interval_ms / 1000
        deadline = time.monotonic() + HAND_OFF_ELECTION_TIMEOUTS * election_s
        _log.info(
            "stopping as the Raft leader (term %d): handing leadership to another controller", raft.term()
        )
        next_request = 0.0
        while time.monotonic() < deadline:
            if not raft.is_leader():
                # A follower now; done once it hears from the new leader (the election may take a round).
                leader = raft.leader_address()
                voter = self.roster.voter_by_raft(leader) if leader else None
                if voter is not None and voter.controller_id != me:
                    _log.info(
                        "handed Raft leadership over: controller %d leads (term %d)",
                        voter.controller_id,
                        raft.term(),
                    )
                    return True
            elif time.monotonic() >= next_request:
                # Refused until a voter has the whole log; ask again each couple of heartbeats.
                raft.hand_off_leadership()
                next_request = time.monotonic() + retry_s
            time.sleep(0.005)  # a few ticks of pysyncobj (autoTickPeriod)
        _log.warning(
            "no other controller took Raft leadership within %.1f s (leader now: %s); stopping anyway "
            "(the others elect a leader after an election timeout)",
            HAND_OFF_ELECTION_TIMEOUTS * election_s,
            raft.leader_address(),
        )
        return False

    def _stop_metrics(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None

    def _unready(self) -> KanalError | None:
        """Until pysyncobj has caught up this controller's image may lack credentials: a password that does
        not check out is then CONTROLLER_NOT_AVAILABLE (retriable), not a refusal."""
        if self.raft is not None and self.raft.isReady():
            return None
        return KanalError(
            ErrorCode.CONTROLLER_NOT_AVAILABLE, "this controller is catching up with the quorum"
        )

    def _quorum_status(self):
        if self.raft is None:
            raise KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE, "this controller is still starting")
        return self.raft.status()

    def _fetch_missing(self, start: int, end: int):
        prefer = []
        if self.raft is not None and self.raft.leader_address():
            leader = self.roster.voter_by_raft(self.raft.leader_address() or "")
            if leader is not None:
                prefer.append(leader.controller_id)
        _log.info("fetching metadata offsets [%d, %d) from the other controllers", start, end)
        return self.peers.fetch_range(start, end, prefer)

    def _quorum_change(self) -> QuorumChange:
        if self.quorum is None:
            raise KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE, "this controller is still starting")
        return self.quorum

    def _on_step(self) -> None:
        # The active-controller loop's hook: health, the cluster id on disk, and one step of a quorum
        # change (quorum_change.py).
        self._update_health()
        self._record_cluster_identity()
        if self.quorum is not None:
            self.quorum.converge()

    def _check_own_log_cluster(self) -> None:
        """At start: the disk's cluster id against the cluster its own metadata log (and --cluster-id)
        names; a StartupError (one line, both ids) when they differ. Nothing is changed."""
        logged = self.store.read(lambda image: image.cluster_id)
        problem = cluster_problem(self.identity, self.config.data_dir, logged)
        configured = self.config.cluster_id
        if problem is None and configured and logged and configured != logged:
            problem = (f"controller {self.config.controller_id}: --cluster-id {configured} differs from "
                       f"cluster {logged} that its metadata log under {self.config.data_dir} records; "
                       "refusing to start")
        if problem is not None:
            raise StartupError(problem)

    def _record_cluster_identity(self) -> None:
        """Once the log this controller follows names its cluster: record it in meta.properties (a new
        directory, or one from before cluster ids); stop the process if the disk names another."""
        logged = self.store.read(lambda image: image.cluster_id)
        if not logged or logged == self.identity.cluster_id:
            return
        problem = cluster_problem(self.identity, self.config.data_dir, logged)
        if problem is not None:
            stop_process(problem)
        meta = load_or_create(self.config.data_dir, self.config.controller_id)
        if not meta.cluster_id:
            record_cluster_id(self.config.data_dir, meta, logged)
            _log.info("data directory %s now records cluster id %s", self.config.data_dir, logged)
        self.identity = replace(self.identity, cluster_id=logged)

    def _update_health(self) -> None:
        raft = self.raft
        serving = raft is not None and raft.isReady() and raft.leader_address() is not None
        self._set_serving(serving)

    def _set_serving(self, serving: bool) -> None:
        # Under the health lock, with the stop flag read inside it: the active-controller loop (on_step)
        # and stop() race here, and from the moment stop() begins health stays NOT_SERVING (a load
        # balancer or the next pod's roll must never see a stopping controller as serving again).
        with self._health_lock:
            if serving and self._stopped.is_set():
                serving = False
            if serving == self._serving:
                return
            self._serving = serving
            states = health_pb2.HealthCheckResponse
            status = states.SERVING if serving else states.NOT_SERVING
            for name in ("", SERVICE_NAME):
                self.health.set(name, status)
        _log.info("health: %s", "SERVING" if serving else "NOT_SERVING")
