"""Client quotas enforced by a real broker (broker/quota_interceptor.py, broker/quota_policy.py).

One broker (quotas are per broker, and one keeps the machine's two cores for the clients being
measured), quota rates sampled over 11 windows of 100 ms (a rate averages about 1 s, so the
allowance a client may burst to when a sample expires is small beside a 10-second run). Rates are ratios
within one run: the bytes a client got acknowledged (or received) over the time it ran, against its quota and
against an unthrottled client running beside it; nothing asserts how fast this machine is.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import grpc
import pytest

from kanal.clients.admin import Admin
from kanal.clients.cli import main as kanal_cli
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.batch import NewRecord, build_batch
from kanal.v1.client_id import CLIENT_ID_METADATA_KEY
from kanal.v1.error import ErrorCode, KanalError

from .conftest import create_topic, start_cluster, wait_until

pytestmark = pytest.mark.cluster

WINDOW_MS = 100
QUOTA_FLAGS = ["--quota-window-num", "11", "--quota-window-size-ms", str(WINDOW_MS),
               "--offsets-topic-replication-factor", "1"]
MB = 1_000_000
VALUE = b"v" * 1000
RUN_S = 10.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory, "quotas", brokers=1, extra_broker_flags=QUOTA_FLAGS)
    yield c
    c.stop()


def set_quota(cluster, client_id: str, **values: float | None) -> None:
    """Set (or with None remove) client-id quotas, then wait until the broker has applied them: a topic
    created afterwards is known to the broker only once it applied everything before it."""
    with Admin(cluster.bootstrap) as admin:
        admin.alter_client_quota("client-id", client_id, values)
    create_topic(cluster, f"marker-{time.monotonic_ns()}", partitions=1, replication_factor=1)


class ProduceLoad(threading.Thread):
    """A producer writing 1 KB records as fast as its broker lets it; `acked` counts acknowledged bytes."""

    def __init__(self, cluster, topic: str, client_id: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(ProducerConfig(
            bootstrap=cluster.bootstrap, acks="1", enable_idempotence=False, client_id=client_id,
            batch_size_bytes=32 * 1024, buffer_memory_bytes=256 * 1024, linger_ms=2))
        self.topic = topic
        self.acked = 0
        self.errors: list[object] = []
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def _delivered(self, error, metadata) -> None:
        with self._lock:
            if error is None:
                self.acked += len(VALUE)
            else:
                self.errors.append(error)

    def run(self) -> None:
        values = [VALUE] * 32
        while not self._stop_event.is_set():
            self.producer.produce_many(self.topic, values, on_delivery=self._delivered)

    def bytes_now(self) -> tuple[float, int]:
        with self._lock:
            return time.monotonic(), self.acked

    def stop(self) -> dict:
        self._stop_event.set()
        self.join(timeout=30)
        self.producer.close(timeout_s=10)
        return self.producer.metrics()


def rate(start: tuple[float, int], end: tuple[float, int]) -> float:
    return (end[1] - start[1]) / (end[0] - start[0])


def broker_metrics(cluster) -> str:
    with urllib.request.urlopen(f"http://{cluster.brokers[0].extra['metrics']}/metrics", timeout=5) as reply:
        return reply.read().decode()


def metric_value(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # prometheus_client sorts labels
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    quota_lines = [line for line in text.splitlines() if "quota" in line]
    if not labels and f"{name} " in text:  # no labels: no braces
        return float(
            next(line for line in text.splitlines() if line.startswith(f"{name} ")).rsplit(" ", 1)[1]
        )
    raise AssertionError(f"no {name}{{{want}}} in the broker's metrics: {quota_lines}")


def test_a_throttled_producer_holds_its_rate_beside_an_unthrottled_one(cluster) -> None:
    create_topic(cluster, "produce-quota", partitions=1, replication_factor=1)
    set_quota(cluster, "slow-producer", producer_byte_rate=1 * MB)
    slow = ProduceLoad(cluster, "produce-quota", "slow-producer")
    fast = ProduceLoad(cluster, "produce-quota", "fast-producer")
    slow_start, fast_start = slow.bytes_now(), fast.bytes_now()
    slow.start()
    fast.start()
    time.sleep(RUN_S)  # the run itself: the quantity measured, not a wait for a condition
    slow_end, fast_end = slow.bytes_now(), fast.bytes_now()
    slow_metrics, _ = slow.stop(), fast.stop()
    assert not slow.errors and not fast.errors
    slow_rate, fast_rate = rate(slow_start, slow_end), rate(fast_start, fast_end)
    assert 0.85 * MB <= slow_rate <= 1.15 * MB, f"throttled producer ran at {slow_rate / MB:.2f} MB/s"
    assert fast_rate >= 3 * slow_rate, f"unthrottled {fast_rate / MB:.2f} MB/s beside {slow_rate / MB:.2f}"
    # The producer was told, and says so in its metrics; the broker's metrics name the entity.
    assert slow_metrics["produce_throttle_count"] > 0 and slow_metrics["produce_throttle_time_ms_max"] > 0
    text = broker_metrics(cluster)
    entity = {"quota": "producer_byte_rate", "entity": "client-id=slow-producer"}
    assert metric_value(text, "kanal_client_quota_throttle_time_ms_total", **entity) > 0
    assert 0 < metric_value(text, "kanal_client_quota_rate", **entity) < 2 * MB
    assert "fast-producer" not in text  # no quota, no label set


def test_a_throttled_consumer_holds_its_fetch_rate_beside_an_unthrottled_one(cluster) -> None:
    create_topic(cluster, "fetch-quota", partitions=1, replication_factor=1)
    # Small batches: a fetch returns at least one whole batch, and the rate is measured per reply, so
    # 512 KiB batches would make the throttled consumer's rate as coarse as half its quota.
    filler = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="1", enable_idempotence=False,
                                     batch_size_bytes=16 * 1024))
    filler.produce_many("fetch-quota", [VALUE] * 24_000).result(timeout=120)  # 24 MB
    filler.close()
    set_quota(cluster, "slow-consumer", consumer_byte_rate=1 * MB)
    results: dict[str, tuple[float, int, dict]] = {}

    def consume(client_id: str) -> None:
        consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest",
                                           client_id=client_id, partition_fetch_bytes_max=64 * 1024,
                                           max_poll_records=100))
        try:
            consumer.assign([("fetch-quota", 0)])
            started, got = time.monotonic(), 0
            while time.monotonic() - started < RUN_S and got < 24 * MB:
                got += sum(len(r.value) for r in consumer.poll(0.2))
            results[client_id] = (time.monotonic() - started, got, consumer.metrics())
        finally:
            consumer.close()

    threads = [threading.Thread(target=consume, args=(c,)) for c in ("slow-consumer", "fast-consumer")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=RUN_S + 60)
    slow_s, slow_bytes, slow_metrics = results["slow-consumer"]
    fast_s, fast_bytes, _ = results["fast-consumer"]
    slow_rate, fast_rate = slow_bytes / slow_s, fast_bytes / fast_s
    assert 0.85 * MB <= slow_rate <= 1.15 * MB, f"throttled consumer read {slow_rate / MB:.2f} MB/s"
    assert fast_rate >= 3 * slow_rate, f"unthrottled {fast_rate / MB:.2f} MB/s beside {slow_rate / MB:.2f}"
    assert slow_metrics["fetch_throttle_count"] > 0


def test_lowering_and_raising_a_quota_mid_run_changes_the_rate_within_two_windows(cluster) -> None:
    create_topic(cluster, "changing-quota", partitions=1, replication_factor=1)
    set_quota(cluster, "changing", producer_byte_rate=1 * MB)
    load = ProduceLoad(cluster, "changing-quota", "changing")
    load.start()
    try:
        time.sleep(3)  # a stretch at the first quota
        first = rate(load.bytes_now(), (time.sleep(2), load.bytes_now())[1])
        with Admin(cluster.bootstrap) as admin:
            admin.alter_client_quota("client-id", "changing", {"producer_byte_rate": 0.25 * MB})
        time.sleep(2 * WINDOW_MS / 1000)
        lowered = rate(load.bytes_now(), (time.sleep(3), load.bytes_now())[1])
        with Admin(cluster.bootstrap) as admin:
            admin.alter_client_quota("client-id", "changing", {"producer_byte_rate": 4 * MB})
        time.sleep(2 * WINDOW_MS / 1000)
        raised = rate(load.bytes_now(), (time.sleep(3), load.bytes_now())[1])
    finally:
        load.stop()
    assert lowered < 0.6 * first, (
        f"{first / MB:.2f} MB/s, then {lowered / MB:.2f} MB/s after lowering to 0.25"
    )
    assert raised > 2 * first, f"{first / MB:.2f} MB/s, then {raised / MB:.2f} MB/s after raising to 4"


def test_a_client_that_ignores_throttle_time_is_held_by_the_broker(cluster) -> None:
    create_topic(cluster, "raw-quota", partitions=1, replication_factor=1)
    set_quota(cluster, "raw-client", producer_byte_rate=1 * MB)
    batch = build_batch([NewRecord(VALUE, timestamp_ms=int(time.time() * 1000))] * 32)  # ~32 KB
    request = broker_pb2.ProduceRequest(acks=1, timeout_ms=5000)
    request.topics.add(topic="raw-quota").partitions.add(partition=0, batches=[batch])
    metadata = ((CLIENT_ID_METADATA_KEY, "raw-client"),)
    stored, throttles = 0, []
    with grpc.insecure_channel(cluster.brokers[0].endpoint) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        started = time.monotonic()
        while time.monotonic() - started < RUN_S:  # back to back: never waits for throttle_time_ms
            reply = stub.Produce(request, timeout=30, metadata=metadata)
            assert reply.topics[0].partitions[0].error == ErrorCode.NONE
            stored += len(batch)
            throttles.append(reply.throttle_time_ms)
        elapsed = time.monotonic() - started
    held_rate = stored / elapsed
    assert 0.85 * MB <= held_rate <= 1.15 * MB, f"a client ignoring throttles got {held_rate / MB:.2f} MB/s"
    assert any(t > 0 for t in throttles)  # it was told, and went on regardless
    assert metric_value(broker_metrics(cluster), "kanal_client_quota_delayed_calls_total") > 0


def test_bad_quotas_are_refused_with_clear_errors_and_change_nothing(cluster, capsys) -> None:
    with Admin(cluster.bootstrap) as admin:
        before = admin.describe_client_quotas()
        for entity_type, name, values, words in [
            ("client-id", "x", {"producer_byte_rate": -5.0}, "finite number > 0"),
            ("client-id", "x", {"producer_byte_rate": float("inf")}, "finite number > 0"),
            ("client-id", "x", {"producer_byte_rate": "fast"}, "must be a number"),
            ("client-id", "x", {"bytes_per_hour": 5.0}, "unknown quota key"),
            ("client-id", "bad\tname", {"producer_byte_rate": 5.0}, "printable ASCII"),
            ("group", "x", {"producer_byte_rate": 5.0}, "unknown quota entity type"),
        ]:
            with pytest.raises(KanalError) as err:
                admin.alter_client_quota(entity_type, name, values)
            assert err.value.code == ErrorCode.INVALID_QUOTA and words in err.value.message, err.value.message
        assert admin.describe_client_quotas() == before
    bootstrap = ["--bootstrap", cluster.bootstrap]
    for args, words in [
        (
            ["--entity-type", "client-id", "--entity-name", "x", "--set", "producer_byte_rate=lots"],
            "must be a number",
        ),
        (["--entity-type", "client-id", "--entity-name", "x", "--set", "producer_byte_rate=-1"], "> 0"),
        (
            [
                "--entity-type",
                "client-id",
                "--entity-name",
                "x",
                "--client-id",
                "y",
                "--set",
                "producer_byte_rate=1",
            ],
            "--client-id goes with --entity-type user",
        ),
    ]:
        assert kanal_cli(["quotas", *bootstrap, *args]) == 1
        assert words in capsys.readouterr().err
    with Admin(cluster.bootstrap) as admin:
        assert admin.describe_client_quotas() == before


def test_user_client_id_quota_through_the_cli(cluster, capsys) -> None:
    bootstrap = ["--bootstrap", cluster.bootstrap]
    assert kanal_cli(["quotas", *bootstrap, "--entity-type", "user", "--entity-name", "ANONYMOUS",
                      "--client-id", "cli-app", "--set", "producer_byte_rate=2000000"]) == 0
    assert "user ANONYMOUS client-id cli-app: producer_byte_rate=2e+06" in capsys.readouterr().out
    with Admin(cluster.bootstrap) as admin:
        assert admin.describe_client_quotas("user", "ANONYMOUS") == {
            ("user", "ANONYMOUS", "cli-app"): {"producer_byte_rate": 2e6}}
        admin.alter_client_quota("user", "ANONYMOUS", {"producer_byte_rate": None}, client_id="cli-app")
        assert admin.describe_client_quotas("user", "ANONYMOUS") == {}


def test_request_percentage_throttles_every_kind_of_call(cluster) -> None:
    """Handler time counts for every call, coroutine handlers (Metadata) and pool-thread ones (ListGroups)
    alike, and their replies carry the throttle."""
    set_quota(cluster, "busy-client", request_percentage=0.01)  # 0.1 ms of handler time per second
    metadata = ((CLIENT_ID_METADATA_KEY, "busy-client"),)
    with grpc.insecure_channel(cluster.brokers[0].endpoint) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)

        def throttled(call, request) -> bool:
            return call(request, timeout=30, metadata=metadata).throttle_time_ms > 0

        wait_until(
            lambda: throttled(stub.Metadata, broker_pb2.MetadataRequest()), 30, "a throttled Metadata reply"
        )
        wait_until(lambda: throttled(stub.ListGroups, broker_pb2.ListGroupsRequest()), 30,
                   "a throttled ListGroups reply")
    text = broker_metrics(cluster)
    assert metric_value(text, "kanal_client_quota_throttled_calls_total", quota="request_percentage",
                        entity="client-id=busy-client") > 0


def test_kanal_perf_prints_the_throttle_time(cluster, capsys) -> None:
    create_topic(cluster, "perf-quota", partitions=1, replication_factor=1)
    set_quota(cluster, "perf-client", producer_byte_rate=1 * MB)
    assert (
        kanal_cli(
            [
                "perf",
                "produce",
                "perf-quota",
                "--bootstrap",
                cluster.bootstrap,
                "--num-records",
                "3000",
                "--record-size",
                "1000",
                "--acks",
                "1",
                "--client-id",
                "perf-client",
                "--quiet",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["produce_throttle_count"] > 0 and summary["produce_throttle_time_ms_total"] > 0
