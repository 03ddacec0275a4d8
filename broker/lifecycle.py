"""BrokerLifecycle: registration with the controller quorum, heartbeats, fencing state, controlled shutdown.

A broker registers with a fresh incarnation id on every start, and the directory id of its data
directory (meta.properties, broker/storage/meta_properties.py: made on the directory's first use, so an
emptied or replaced disk registers a new one), and gets a broker epoch; it then heartbeats every
heartbeat_interval_ms with the metadata offset it has applied. The controller unfences it once it has
caught up and fences it when heartbeats stop. On shutdown the broker asks to be fenced first
(want_shutdown), so its leaderships move before it stops serving; from then on every heartbeat it sends
asks the same (the controller keeps it fenced until it registers again in any case).

Cluster identity. The registration reply names the cluster (the metadata log's ClusterIdentityRecord).
Before the broker follows any metadata, that id is judged against the data directory's meta.properties
(storage/cluster_identity.py): another cluster's disk fails the start with INCONSISTENT_CLUSTER_ID, one
line naming both ids, and nothing on the disk is touched; a directory naming none records it.

One process per broker id (Kafka's rule: the newer registration wins only once the old session is over):

- DUPLICATE_BROKER_REGISTRATION at registration: another incarnation of this id is live. The old one
  may be a crashed process whose session has not expired yet, so registration is retried, but only for
  DUPLICATE_WAIT_SESSIONS session timeouts (the controller gives its timeout with the refusal): a
  session still live after that belongs to a running process, and this one gives up (the start fails).
- STALE_BROKER_EPOCH on a heartbeat: with `registered_broker_epoch` newer than ours, another process
  registered this id after us (we were fenced meanwhile, e.g. hung past our session): this process stops
  at once (stop_process), never registers again, so the two cannot take turns. Otherwise (the
  registration is gone) it registers again.

Heartbeat deadlines. One heartbeat attempt at one controller waits at most one heartbeat interval; the
whole heartbeat (moving from controller to controller: controller_client.py) at most two. Heartbeats are
sent at a fixed rate: one that overran is followed by the next at once. So when the controller a broker
talks to hangs, the broker asks another controller within two heartbeat intervals, and keeps asking until
the new active controller answers. The controller says its session timeout when the broker registers, and
the broker refuses to run unless 4 x heartbeat_interval_ms <= session timeout
(kanal.broker.config.check_heartbeat_fits_session): at most half the session goes to noticing the silence,
the other half is left for the controllers' election and for reaching the new active controller, which
starts every broker's session afresh when it takes over.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kanal.broker.config import check_heartbeat_fits_session
from kanal.broker.controller_client import ControllerClient
from kanal.broker.storage.cluster_identity import ClusterVerdict, judge_cluster_id, mismatch_message
from kanal.broker.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    load_or_create,
    record_cluster_id,
)
from kanal.server.fatal import stop_process
from kanal.v1 import controller_pb2
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

# A DUPLICATE_BROKER_REGISTRATION refusal is retried for this many session timeouts, then the start fails.
DUPLICATE_WAIT_SESSIONS = 2


class BrokerLifecycle:
    def __init__(self, client: ControllerClient, *, broker_id: int, endpoint: str, rack: str,
                 metrics_endpoint: str, heartbeat_interval_ms: int, metadata_offset: Callable[[], int],
                 data_dir: Path | str | None = None,
                 on_superseded: Callable[[str], None] = stop_process, unclean_shutdown: bool = False,
                 recovery_log_ends: Callable[[], list[controller_pb2.ReplicaLogEnd]] = list,
                 inter_node_endpoint: str = "", kafka_endpoint: str = "") -> None:
        self._client = client
        self.broker_id = broker_id
        self._endpoint = endpoint
        self._rack = rack
        self._metrics_endpoint = metrics_endpoint
        self._interval_ms = heartbeat_interval_ms
        self._interval_s = heartbeat_interval_ms / 1000
        self._metadata_offset = metadata_offset
        self.incarnation_id = str(uuid.uuid4())
        # The previous run did not shut down cleanly (storage: a log without its clean-shutdown marker).
        # Registrations say so until the controller first unfences this process: from then on its logs
        # are whatever this run wrote, and a registration again (a lost session) is not a restart.
        self.unclean_shutdown = unclean_shutdown
        self._recovery_log_ends = recovery_log_ends
        self._inter_node_endpoint = inter_node_endpoint
        self._kafka_endpoint = kafka_endpoint
        # The data directory's identity; "" without a data directory (tests of the lifecycle alone).
        self.directory_id = ""
        self._data_dir = None if data_dir is None else Path(data_dir)
        self._meta: MetaProperties | None = None
        if data_dir is not None:
            try:
                self._meta = load_or_create(data_dir, broker_id)
            except (MetaPropertiesError, OSError) as exc:
                raise KanalError(ErrorCode.INVALID_CONFIG, f"data directory {data_dir}: {exc}") from exc
            self.directory_id = self._meta.directory_id
        # True when this start recorded the quorum's cluster id in a directory that named none (upgrades:
        # storage/cluster_identity.py; the replica manager then checks the first image's topic ids).
        self.adopted_cluster = False
        # Set once the shutdown request went out: every later heartbeat asks to shut down too, so the
        # heartbeat thread cannot report this broker alive while it stops (the controller also keeps it
        # fenced: kanal.metadata.broker_liveness).
        self._shutting_down = False
        self._on_superseded = on_superseded
        self.broker_epoch = -1
        self.fenced = True
        self.controller_epoch = -1
        # The controllers' broker session timeout, as the last registration reported it (0: unknown).
        self.session_timeout_ms = 0
        # What Metadata reports: the cluster id from registration, the active controller from the
        # controller that answered the last heartbeat (-1 until one has).
        self.cluster_id = ""
        self.active_controller_id = -1

    def __repr__(self) -> str:
        state = "fenced" if self.fenced else "unfenced"
        return f"<BrokerLifecycle broker={self.broker_id} epoch={self.broker_epoch} {state}>"

    def register(self, timeout_s: float) -> None:
        """Register (retrying while no controller is active) until `timeout_s` runs out."""
        request = controller_pb2.RegisterBrokerRequest(
            broker_id=self.broker_id, incarnation_id=self.incarnation_id, endpoint=self._endpoint,
            rack=self._rack, metrics_endpoint=self._metrics_endpoint, directory_id=self.directory_id,
            unclean_shutdown=self.unclean_shutdown, inter_node_endpoint=self._inter_node_endpoint,
            kafka_endpoint=self._kafka_endpoint,
        )
        deadline = time.monotonic() + timeout_s
        duplicate_since: float | None = None
        while True:
            # Every failure is retried until the deadline, as Kafka brokers do: while the quorum starts up
            # or elects a leader, any controller may answer with an error that is over a moment later.
            try:
                reply = self._client.call("RegisterBroker", request,
                                          timeout_s=max(0.1, min(5.0, deadline - time.monotonic())))
            except KanalError as exc:
                if exc.code in (ErrorCode.INVALID_CONFIG, ErrorCode.INCONSISTENT_CLUSTER_ID):
                    raise  # no retry mends a configuration, or a disk of another cluster
                problem = exc
            else:
                if reply.error == ErrorCode.NONE:
                    if reply.session_timeout_ms > 0:
                        check_heartbeat_fits_session(self._interval_ms, reply.session_timeout_ms)
                        self.session_timeout_ms = reply.session_timeout_ms
                    self._check_cluster(reply.cluster_id)
                    self.broker_epoch = reply.broker_epoch
                    self.cluster_id = reply.cluster_id
                    self.active_controller_id = reply.controller_id
                    log.info("registered broker %d with epoch %d (directory %s)", self.broker_id,
                             self.broker_epoch, self.directory_id or "-")
                    return
                problem = KanalError(reply.error, reply.error_message or "registration refused")
                if reply.error != ErrorCode.DUPLICATE_BROKER_REGISTRATION:
                    duplicate_since = None
                else:
                    now = time.monotonic()
                    duplicate_since = now if duplicate_since is None else duplicate_since
                    wait_s = DUPLICATE_WAIT_SESSIONS * reply.session_timeout_ms / 1000
                    if reply.session_timeout_ms > 0 and now - duplicate_since > wait_s:
                        raise KanalError(
                            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                            f"broker id {self.broker_id} is held by another live process for longer "
                            f"than {DUPLICATE_WAIT_SESSIONS} session timeouts: {reply.error_message}",
                        )
            if time.monotonic() >= deadline:
                raise problem
            log.info("registration not accepted yet (%s); retrying", problem)
            time.sleep(0.2)

    def _check_cluster(self, cluster_id: str) -> None:
        """Before anything the quorum says is acted on: does the data directory belong to its cluster?
        (storage/cluster_identity.py). Raises INCONSISTENT_CLUSTER_ID, one line naming both ids, and
        touches nothing when it does not."""
        node = f"broker {self.broker_id}"
        if not cluster_id:
            raise KanalError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                             f"{node}: the controller quorum names no cluster id (controllers older than "
                             "this broker): upgrade the controllers first")
        if self._meta is None or self._data_dir is None:
            return
        verdict = judge_cluster_id(self._meta.cluster_id, cluster_id)
        if verdict is ClusterVerdict.MISMATCH:
            raise KanalError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                             mismatch_message(node, self._data_dir, self._meta.cluster_id, cluster_id))
        if verdict is ClusterVerdict.ADOPT:
            self._meta = record_cluster_id(self._data_dir, self._meta, cluster_id)
            self.adopted_cluster = True
            log.info("data directory %s now records cluster id %s", self._data_dir, cluster_id)

    def heartbeat(self, *, want_shutdown: bool = False) -> controller_pb2.BrokerHeartbeatResponse:
        request = controller_pb2.BrokerHeartbeatRequest(
            broker_id=self.broker_id, broker_epoch=self.broker_epoch,
            metadata_offset=self._metadata_offset(), want_shutdown=want_shutdown or self._shutting_down,
            recovery_log_ends=self._recovery_log_ends(),
        )
        reply = self._client.call("BrokerHeartbeat", request, timeout_s=2 * self._interval_s,
                                  attempt_timeout_s=self._interval_s)
        if (
            reply.error == ErrorCode.STALE_BROKER_EPOCH
            and reply.registered_broker_epoch > self.broker_epoch >= 0
        ):
            self._on_superseded(
                f"broker id {self.broker_id} was registered by another process (epoch "
                f"{reply.registered_broker_epoch}) after this one (epoch {self.broker_epoch}); "
                "this process stops so that the two do not take turns"
            )
            return reply
        if reply.error == ErrorCode.STALE_BROKER_EPOCH:
            if self._shutting_down:
                return reply  # stopping: a new registration would only make the broker alive again
            log.warning("broker epoch %d is stale; registering again", self.broker_epoch)
            try:
                self.register(timeout_s=10)
            except KanalError as exc:
                if exc.code != ErrorCode.INCONSISTENT_CLUSTER_ID:
                    raise
                self._on_superseded(exc.message)  # the quorum now names another cluster: stop, touch nothing
            return reply
        if reply.error != ErrorCode.NONE:
            raise KanalError(reply.error, reply.error_message or "heartbeat refused")
        if reply.fenced != self.fenced:
            log.info("broker %d is now %s", self.broker_id, "fenced" if reply.fenced else "unfenced")
        self.fenced = reply.fenced
        if not reply.fenced:
            self.unclean_shutdown = False
        self.controller_epoch = reply.controller_epoch
        self.active_controller_id = reply.controller_id
        return reply

    def run(self, stop: threading.Event) -> None:
        """The heartbeat thread: one heartbeat per interval (fixed rate: one that overran is followed by
        the next at once) until `stop` is set."""
        due = time.monotonic() + self._interval_s
        while not stop.wait(max(0.0, due - time.monotonic())):
            due = max(due + self._interval_s, time.monotonic())
            try:
                self.heartbeat()
            except KanalError as exc:
                log.warning("heartbeat failed: %s", exc)

    def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask to be fenced so leaderships move away; True once the controller says it may stop. From
        here on every heartbeat (the heartbeat thread's too) asks to shut down."""
        self._shutting_down = True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.heartbeat(want_shutdown=True).shutdown_ready:
                    return True
            except KanalError as exc:
                log.warning("controlled shutdown heartbeat failed: %s", exc)
            time.sleep(min(0.1, self._interval_s))
        return False
