"""BrokerServer: one broker process's parts wired together, started and stopped in order.

Threads: the gRPC server's event loop (Produce, Fetch, Metadata, ListOffsets, and every parked call:
see service.py; and the replica fetchers, one task per leader this broker follows: replica_fetcher.py),
its pool of `request_threads` for calls that may block elsewhere, the metadata follower, the heartbeat
loop and the log-maintenance loop. State
lives in the replica manager (per-partition locks) and the metadata image (swapped whole, read without
locks).

Start: open logs → controller client → serve gRPC (health NOT_SERVING; every Broker call refused with
the retriable BROKER_NOT_AVAILABLE: service.py) → register → follow metadata: initial catch-up applies
the log privately up to the end the controller reported, then publishes once, creating and leading
replicas from that caught-up image only (metadata_catch_up.py) → Broker calls are served → the heartbeat
reports the published offset, the controller unfences the broker → SERVING on gRPC health. Stop:
controlled shutdown (leaderships move away first), stop serving, stop threads, close logs cleanly.

gRPC listens before registration, as Kafka's brokers bind their listeners early but process nothing
until caught up: a port in use fails the start at once rather than after registration, probes get
NOT_SERVING rather than a refused connection, and a client that reaches a starting broker gets an error
that says to retry (and moves to another broker) rather than a connection error.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from kanal.broker.config import BrokerConfig, parse_endpoint
from kanal.broker.controller_client import ControllerClient
from kanal.broker.group import GroupLimits
from kanal.broker.group_coordinator import GroupCoordinator
from kanal.broker.kafka.listener import KafkaListener, kafka_ssl_context
from kanal.broker.lifecycle import BrokerLifecycle
from kanal.broker.metadata_follower import MetadataFollower
from kanal.broker.metadata_sync import MetadataSync, controllers_end_offset
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.producer_ids import ProducerIdManager
from kanal.broker.quota_interceptor import BrokerQuotas, QuotaInterceptor
from kanal.broker.quota_sampler import QuotaWindows
from kanal.broker.readiness import judge_readiness, partitions_out_of_isr
from kanal.broker.remote_fetch import RemoteReader
from kanal.broker.remote_log_manager import RemoteLogManager
from kanal.broker.replica_manager import ReplicaManager
from kanal.broker.request_authorization import RequestGate
from kanal.broker.schema_registry_http import SchemaRegistryHttp
from kanal.broker.schema_registry_service import BrokerSchemaRegistry
from kanal.broker.service import BrokerService
from kanal.broker.storage.log import closed_uncleanly
from kanal.broker.storage.remote_storage import open_remote_storage
from kanal.broker.transaction_coordinator import TransactionCoordinator
from kanal.security.authentication import Authenticator, aio_server_interceptor
from kanal.security.listener_security import warn_if_exposed
from kanal.server.clock import PROCESS_CLOCK
from kanal.server.flags import LIVENESS_SERVICE
from kanal.server.metrics_endpoint import MetricsListen, serve_metrics
from kanal.server.reflection import enable_reflection
from kanal.v1 import broker_pb2, broker_pb2_grpc, schema_registry_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)
SERVICE_NAME = broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name

# protoc's generated registration function is untyped; one name for it keeps that to one place.
_ADD_REGISTRY_SERVICER: Any = schema_registry_pb2_grpc.add_SchemaRegistryServicer_to_server

class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.metrics = BrokerMetrics()
        self.quotas = BrokerQuotas(
            QuotaWindows(config.quota_window_num, config.quota_window_size_ms), self.metrics
        )
        # One interceptor for every listener: gRPC calls pass through it, Kafka requests are wrapped by it.
        self.quota_interceptor = QuotaInterceptor(self.quotas, self.metrics)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._grpc: grpc.aio.Server | None = None
        self._node_grpc: grpc.aio.Server | None = None  # the listener for other nodes, when configured
        self._kafka: KafkaListener | None = None  # the Kafka wire-protocol listener, when configured
        self._registry_http: SchemaRegistryHttp | None = None  # the schema registry's REST listener
        self._metrics_server = None
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="grpc-loop", daemon=True)
        self._request_pool = futures.ThreadPoolExecutor(max_workers=config.request_threads,
                                                        thread_name_prefix="grpc-request")
        self._loop.set_default_executor(self._request_pool)
        self.health = health.aio.HealthServicer()
        Path(config.data_dir).mkdir(parents=True, exist_ok=True)
        # Before any log is opened (opening removes the marker): a log without its clean-shutdown marker
        # was not closed by a clean stop, and may have lost writes that were never fsynced. The controller
        # then does not take this broker's word for partitions it alone was in sync for (election.py).
        unclean = closed_uncleanly(Path(config.data_dir))
        if unclean:
            log.warning("%d logs were not closed cleanly (%s%s): registering as back from an unclean "
                        "shutdown",
                        len(unclean), ", ".join(unclean[:5]), ", ..." if len(unclean) > 5 else "")
        self.controllers = ControllerClient(
            [f"{h}:{p}" for h, p in config.controller_endpoints],
            request_timeout_ms=config.controller_request_timeout_ms,
            message_bytes_max=config.grpc_message_bytes_max, security=config.security.outbound(),
        )
        self.replicas = ReplicaManager(
            config, self.controllers, self.metrics, broker_epoch=lambda: self.lifecycle.broker_epoch,
            fetch_loop=self._loop,
        )
        if config.remote_storage:
            storage = open_remote_storage(
                config.remote_storage, endpoint=config.remote_storage_endpoint,
                region=config.remote_storage_region, access_key_id=config.remote_storage_access_key_id,
                secret_access_key=config.remote_storage_secret_access_key)
            self.replicas.remote_log = RemoteLogManager(
                storage, cluster_id=lambda: self.metadata.image.cluster_id, broker_id=config.broker_id,
                broker_epoch=lambda: self.lifecycle.broker_epoch, call_controller=self.controllers.call,
                metrics=self.metrics, retry_backoff_ms_max=config.remote_retry_backoff_ms_max,
                orphan_check_interval_ms=config.remote_orphan_check_interval_ms,
                orphan_grace_ms=config.remote_orphan_grace_ms)
            self.replicas.remote_reader = RemoteReader(
                storage, cluster_id=lambda: self.metadata.image.cluster_id,
                cache_bytes=config.remote_fetch_cache_bytes, chunk_bytes=config.remote_fetch_chunk_bytes,
                metrics=self.metrics)
            log.info("tiered storage: closed segments of remote.storage.enable topics go to %s", storage.url)
        self.metadata = MetadataFollower(
            self.controllers, fetch_bytes_max=config.metadata_fetch_bytes_max,
            fetch_wait_ms=config.metadata_fetch_wait_ms_max,
            on_change=self._on_metadata,
        )
        # Schema validation's refusals wait for the image to catch up first (metadata_sync.py).
        self.replicas.metadata_sync = MetadataSync(
            controllers_end_offset(self.controllers, lambda: self.metadata.offset),
            self.metadata.wait_for_offset)
        self.lifecycle = BrokerLifecycle(
            self.controllers, broker_id=config.broker_id, endpoint=config.advertised, rack=config.rack,
            metrics_endpoint=config.metrics_listen, heartbeat_interval_ms=config.heartbeat_interval_ms,
            metadata_offset=lambda: self.metadata.offset, data_dir=config.data_dir,
            unclean_shutdown=bool(unclean), recovery_log_ends=self.replicas.recovery_log_ends,
            inter_node_endpoint=config.inter_node_advertised, kafka_endpoint=config.kafka_advertised,
        )
        self.groups = GroupCoordinator(
            broker_id=config.broker_id, replicas=self.replicas, image=lambda: self.metadata.image,
            controllers=self.controllers, metrics=self.metrics,
            limits=GroupLimits(session_timeout_ms_min=config.group_session_timeout_ms_min,
                               session_timeout_ms_max=config.group_session_timeout_ms_max,
                               initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                               offsets_retention_ms=config.offsets_retention_ms),
            offsets_partitions=config.offsets_topic_partitions,
            offsets_replication_factor=config.offsets_topic_replication_factor,
            write_timeout_ms=config.offsets_commit_timeout_ms,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            security=config.security.outbound(),
        )
        self.transactions = TransactionCoordinator(
            broker_id=config.broker_id,
            replicas=self.replicas,
            image=lambda: self.metadata.image,
            groups=self.groups,
            new_producer_id=lambda: self.producer_ids.next_id(),
            partitions=config.transaction_state_partitions,
            replication_factor=config.transaction_state_replication_factor,
            write_timeout_ms=config.offsets_commit_timeout_ms,
            timeout_ms_max=config.transaction_timeout_ms_max,
        )
        # ACL checks against the image the metadata follower last published (service.py's `@gated`).
        self.gate = RequestGate(config.authorizer, lambda: self.metadata.image)
        self.producer_ids = ProducerIdManager(
            lambda req: self.controllers.call("AllocateProducerIds", req), config.broker_id,
            lambda: self.lifecycle.broker_epoch,
        )

    def __repr__(self) -> str:
        return f"<BrokerServer {self.config.broker_id} at {self.config.listen}>"

    def _on_metadata(self, old, new) -> None:
        self.metrics.metadata_offset.set(new.next_offset)
        if new.voters and new.voters != old.voters:
            # A controller quorum change (VoterSetRecord): heartbeats and registrations go to the new voters.
            self.controllers.set_endpoints([v.grpc_endpoint for v in new.voters])
        self.quotas.on_metadata(new)
        self.replicas.on_metadata(old, new)
        self.groups.reconcile(new)  # after the replicas: a partition it now leads is ready to be loaded
        self.transactions.reconcile(new)

    def start(self, *, register_timeout_s: float = 60.0) -> None:
        self._loop_thread.start()
        self._on_loop(self._start_grpc())
        if self.config.metrics_listen:
            host, port = parse_endpoint(self.config.metrics_listen)
            try:
                self._metrics_server = serve_metrics(MetricsListen(host, port), self.metrics.registry)
            except OSError as exc:
                raise KanalError(
                    ErrorCode.INVALID_CONFIG,
                    f"cannot serve metrics on {self.config.metrics_listen}: {exc.strerror or exc} "
                    "(--metrics HOST:PORT moves the endpoint, --metrics off switches it off)",
                ) from exc
        self.lifecycle.register(timeout_s=register_timeout_s)
        # Registration checked the data directory against the quorum's cluster id; the replica manager
        # reconciles only images of that cluster (nothing is deleted on another cluster's word).
        self.replicas.set_cluster(self.lifecycle.cluster_id, adopted=self.lifecycle.adopted_cluster)
        # The broker epoch is the offset of this registration's record: the first image published holds it.
        self.metadata.require_offset(self.lifecycle.broker_epoch + 1)
        self._spawn("metadata-follower", self.metadata.run)
        self._spawn("heartbeat", self.lifecycle.run)
        self._spawn("log-maintenance", self._maintenance)
        self._spawn("group-coordinator", self.groups.run)
        self._spawn("transaction-coordinator", self.transactions.run)
        self._spawn("readiness", self._wait_ready)

    def _on_loop(self, coroutine, timeout_s: float = 30.0):
        """Run a coroutine on the server's event loop from another thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    async def _start_grpc(self) -> None:
        options = [("grpc.max_receive_message_length", self.config.grpc_message_bytes_max),
                   ("grpc.max_send_message_length", self.config.grpc_message_bytes_max),
                   ("grpc.so_reuseport", 0)]
        # Every call is authenticated at the door and served with its principal bound
        # (kanal.security.authentication); client quotas (broker/quota_interceptor.py) are applied inside
        # that, to
        # the call's principal.
        self.authenticator = Authenticator(
            self.config.security, self._scram_credentials, unready=self._unready
        )
        def new_server(node_listener: bool) -> grpc.aio.Server:
            server = grpc.aio.server(migration_thread_pool=self._request_pool, options=options,
                                     interceptors=[aio_server_interceptor(self.authenticator),
                                                   self.quota_interceptor])
            service = BrokerService(self, node_listener=node_listener)
            broker_pb2_grpc.add_BrokerServicer_to_server(service, server)
            _ADD_REGISTRY_SERVICER(BrokerSchemaRegistry(self, service.refuse_until_ready), server)
            health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
            enable_reflection((SERVICE_NAME, health.SERVICE_NAME), server)
            return server

        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        # Liveness: SERVING while the event loop answers, caught up or not (a pod's liveness probe).
        await self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        security = self.config.security
        server = new_server(node_listener=False)
        port = (server.add_secure_port(self.config.listen, security.server_credentials()) if security.tls
                else server.add_insecure_port(self.config.listen))
        if port == 0:
            raise OSError(f"cannot listen on {self.config.listen}")
        log.info("gRPC listener %s: %s", self.config.listen, security.describe())
        warn_if_exposed(
            parse_endpoint(self.config.listen)[0], security, log, f"broker {self.config.broker_id}"
        )
        # The listener for other nodes is a server of its own: the one service instance that answers there
        # names the brokers' inter-node endpoints (Metadata, FindCoordinator), and nothing else tells a
        # handler which port a call came in on.
        if self.config.inter_node_listen:
            node_server = new_server(node_listener=True)
            if node_server.add_secure_port(self.config.inter_node_listen,
                                           security.server_credentials(for_nodes=True)) == 0:
                raise OSError(f"cannot listen on {self.config.inter_node_listen}")
            log.info("gRPC listener for other nodes %s: TLS, client certificates required",
                     self.config.inter_node_listen)
            await node_server.start()
            self._node_grpc = node_server
        await server.start()
        self._grpc = server
        if self.config.kafka_listen:
            host, port = parse_endpoint(self.config.kafka_listen)
            kafka = KafkaListener(self, BrokerService(self), host, port, kafka_ssl_context(security))
            try:
                await kafka.start()
            except OSError as exc:
                raise OSError(f"cannot listen on {self.config.kafka_listen} (--kafka-listen): "
                              f"{exc.strerror or exc}") from exc
            self._kafka = kafka
            log.info("Kafka listener %s: %s", self.config.kafka_listen, security.describe())
        if self.config.schema_registry_listen:
            self._start_registry_http()

    def _start_registry_http(self) -> None:
        host, port = parse_endpoint(self.config.schema_registry_listen)
        registry = BrokerSchemaRegistry(self, BrokerService(self).refuse_until_ready)
        metrics = self.metrics
        security = self.config.security
        context = kafka_ssl_context(security)
        takes_certificates = "mtls" in security.authentication and bool(security.ca_file)
        if context is not None and context.verify_mode == ssl.CERT_NONE and takes_certificates:
            # A listener that takes passwords without a certificate still lets a client present one: its
            # principal is then the certificate's, as on the gRPC listener for other nodes (mTLS principals).
            context.verify_mode = ssl.CERT_OPTIONAL
        try:
            http = SchemaRegistryHttp(
                host, port, context, self.authenticator.authenticate,
                registry.call,
                observe=lambda method, status: metrics.schema_registry_requests.labels(
                    method=method, status=str(status)).inc())
        except OSError as exc:
            raise OSError(f"cannot listen on {self.config.schema_registry_listen} "
                          f"(--schema-registry-listen): {exc.strerror or exc}") from exc
        http.start()
        self._registry_http = http
        log.info("schema registry REST listener %s: %s", self.config.schema_registry_listen,
                 self.config.security.describe())

    def _unready(self) -> KanalError | None:
        """Until the first caught-up image is published the credentials may be incomplete: a password that
        does not check out is then BROKER_NOT_AVAILABLE (retriable, try another broker), not a refusal."""
        if self.metadata.caught_up:
            return None
        return KanalError(ErrorCode.BROKER_NOT_AVAILABLE, "this broker is catching up with the metadata log")

    def _scram_credentials(self, user: str):
        """The user's SCRAM credentials in the broker's current metadata image (swapped whole, read
        without locks)."""
        return self.metadata.image.scram_credentials.get(user, {})

    async def _set_health(self, status) -> None:
        await self.health.set("", status)
        await self.health.set(SERVICE_NAME, status)

    def _spawn(self, name: str, target) -> None:
        thread = threading.Thread(target=target, args=(self._stop,), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _wait_ready(self, stop: threading.Event) -> None:
        """SERVING once the initial catch-up has published the image, the controller has unfenced this
        broker and it is back in the ISR of every partition it hosts (or ready_isr_wait_ms_max passed):
        broker/readiness.py."""
        unfenced_ms: int | None = None
        said = ""
        while not stop.is_set():
            now_ms = PROCESS_CLOCK.now_ms()
            caught_up, fenced = self.metadata.caught_up, self.lifecycle.fenced
            if caught_up and not fenced and unfenced_ms is None:
                unfenced_ms = now_ms
            # The latest image: leaders add this broker back to their ISRs through the controller.
            out = partitions_out_of_isr(self.metadata.image, self.config.broker_id)
            verdict = judge_readiness(caught_up=caught_up, fenced=fenced, out_of_isr=out,
                                      waited_ms=0 if unfenced_ms is None else now_ms - unfenced_ms,
                                      wait_ms_max=self.config.ready_isr_wait_ms_max)
            if verdict.ready:
                self._on_loop(self._set_health(health_pb2.HealthCheckResponse.SERVING))
                log.info("ready: %s", verdict.reason)
                return
            if verdict.reason != said:
                said = verdict.reason
                log.info("not ready yet: %s", verdict.reason)
            stop.wait(0.05)

    def _maintenance(self, stop: threading.Event) -> None:
        interval_s = self.config.log_maintenance_interval_ms / 1000
        while not stop.wait(interval_s):
            self.replicas.maintenance(PROCESS_CLOCK.now_ms())
            self.metrics.fenced.set(1 if self.lifecycle.fenced else 0)

    def stop(self, *, controlled: bool = True, grace_s: float = 5.0) -> None:
        if controlled and self.lifecycle.broker_epoch >= 0:
            moved = self.lifecycle.controlled_shutdown(timeout_s=grace_s)
            log.info(
                "controlled shutdown %s",
                "done: the controller moved this broker's leaderships away"
                if moved
                else f"not confirmed by the controller within {grace_s}s; stopping anyway",
            )
        self._stop.set()
        if self._loop_thread.is_alive():
            self.replicas.stop_fetchers()  # on the loop: their tasks end (channels closed) before it stops
            if self._grpc is not None:
                self._on_loop(self.health.enter_graceful_shutdown())
                self._on_loop(self._grpc.stop(grace=1.0), timeout_s=grace_s + 5)
            if self._node_grpc is not None:
                self._on_loop(self._node_grpc.stop(grace=1.0), timeout_s=grace_s + 5)
            if self._kafka is not None:
                self._on_loop(self._kafka.stop(), timeout_s=grace_s + 5)
        if self._registry_http is not None:
            self._registry_http.close()
        if self._loop_thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=grace_s)
        self._request_pool.shutdown(wait=False, cancel_futures=True)
        self.transactions.close()
        self.groups.close()
        self.replicas.close()
        for thread in self._threads:
            thread.join(timeout=grace_s)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
        self.controllers.close()
