"""The client commands' time, duration and record-format parsing, and the perf latency histogram."""

from __future__ import annotations

import datetime

import pytest

from kanal.clients.cli_formats import compile_format, parse_duration_ms, parse_timestamp_ms
from kanal.clients.consumer import ConsumerRecord
from kanal.clients.latency_histogram import LatencyHistogram
from kanal.v1.error import ErrorCode, KanalError


def test_timestamps_are_iso_8601_or_epoch_milliseconds():
    assert parse_timestamp_ms("1700000000123") == 1_700_000_000_123
    assert parse_timestamp_ms("2023-11-14T22:13:20.123Z") == 1_700_000_000_123
    assert parse_timestamp_ms("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    naive = datetime.datetime(2023, 11, 14, 22, 13, 20).astimezone()  # no zone: the local one, as Kafka
    assert parse_timestamp_ms("2023-11-14T22:13:20") == int(naive.timestamp() * 1000)
    for bad in ("yesterday", "2023-13-01T00:00:00", "", "-5"):
        with pytest.raises(KanalError) as caught:
            parse_timestamp_ms(bad)
        assert caught.value.code == ErrorCode.INVALID_TIMESTAMP


def test_durations_are_iso_8601():
    assert parse_duration_ms("PT15M") == 900_000
    assert parse_duration_ms("P1DT2H") == 93_600_000
    assert parse_duration_ms("pt0.5s") == 500
    assert parse_duration_ms("PT0H5M0S") == 300_000
    for bad in ("P", "PT", "15m", "P1Y", "PT-1S"):
        with pytest.raises(KanalError):
            parse_duration_ms(bad)


def test_kcat_style_format():
    r = ConsumerRecord("orders", 2, 41, 1_700_000_000_000, b"k1", b"v\x80", [("h", b"1"), ("n", None)], 0)
    render = compile_format("%t/%p@%o %T %k=%s [%h] %K %S 100%%\\t.")
    assert render(r) == "orders/2@41 1700000000000 k1=v\\x80 [h=1,n=null] 2 2 100%\t."
    tombstone = ConsumerRecord("t", 0, 0, 0, None, None, [], 0)
    assert compile_format("%k|%s|%K|%S\\n")(tombstone) == "null|null|-1|-1\n"
    for bad in ("%z", "ends with %", "ends with \\"):
        with pytest.raises(KanalError) as caught:
            compile_format(bad)
        assert caught.value.code == ErrorCode.INVALID_REQUEST


def test_histogram_percentiles_count_every_sample_within_one_percent():
    h = LatencyHistogram()
    for i in range(1, 100_001):  # 1 µs .. 100 ms, evenly
        h.add(i * 1e-6)
    assert h.count == 100_000 and h.max_s == pytest.approx(0.1)
    for p, true_s in ((50, 0.05), (95, 0.095), (99, 0.099), (99.9, 0.0999)):
        assert true_s <= h.percentile_s(p) <= true_s * 1.0101, p
    summary = h.summary_ms()
    assert set(summary) == {
        "latency_ms_p50",
        "latency_ms_p95",
        "latency_ms_p99",
        "latency_ms_p99_9",
        "latency_ms_max",
    }
    assert summary["latency_ms_max"] == 100.0


def test_histogram_weights_and_a_single_outlier():
    h = LatencyHistogram()
    h.add(0.001, 999)  # a batch of 999 records acknowledged together
    h.add(2.0)
    assert h.count == 1000
    assert (
        h.percentile_s(99.9) <= 0.00102
        and h.percentile_s(100) == 2.0
        and h.summary_ms()["latency_ms_max"] == 2000.0
    )
    assert LatencyHistogram().summary_ms() == {}
