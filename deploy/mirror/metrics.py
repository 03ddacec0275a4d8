"""The Prometheus metrics of a `kanal mirror` process (its `--metrics HOST:PORT` endpoint), read from
the flows' FlowMetrics at each scrape. Every series carries the flow's name (`east->west`) as `flow`:

| metric | type | what |
|---|---|---|
| `kanal_mirror_records_total` | counter | records copied and committed |
| `kanal_mirror_bytes_total` | counter | their keys' and values' bytes |
| `kanal_mirror_skipped_records_total` | counter | records the loop rule dropped (identity policy) |
| `kanal_mirror_transactions_total`, `kanal_mirror_aborted_transactions_total` | counter | commits, aborts |
| `kanal_mirror_replication_latency_ms` | gauge, `quantile` 0.5/0.99/1 | source timestamp to visible copy |
| `kanal_mirror_record_age_ms` | gauge, `quantile` | source timestamp to when the flow read the record |
| `kanal_mirror_lag_records` | gauge, `topic`, `partition` | source end offset minus the committed position |
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kanal.deploy.mirror.flow import Flow

QUANTILES = (0.5, 0.99, 1.0)


class MirrorCollector(Collector):
    def __init__(self, flows: Iterable[Flow]) -> None:
        self._flows = list(flows)

    def collect(self) -> Iterator:
        counters = {
            "records": ("kanal_mirror_records", "records copied and committed"),
            "bytes": ("kanal_mirror_bytes", "bytes of the copied records' keys and values"),
            "skipped": ("kanal_mirror_skipped_records", "records dropped by the loop rule"),
            "transactions": ("kanal_mirror_transactions", "transactions committed"),
            "aborted": ("kanal_mirror_aborted_transactions", "transactions aborted"),
        }
        for attr, (name, help_) in counters.items():
            family = CounterMetricFamily(name, help_, labels=["flow"])
            for flow in self._flows:
                family.add_metric([flow.config.name], getattr(flow.metrics, attr))
            yield family
        for attr, name, help_ in (
            ("replication_latency", "kanal_mirror_replication_latency_ms",
             "source record timestamp to the commit that made its copy visible"),
            ("record_age", "kanal_mirror_record_age_ms", "source record timestamp to when it was read"),
        ):
            gauge = GaugeMetricFamily(name, help_, labels=["flow", "quantile"])
            for flow in self._flows:
                histogram = getattr(flow.metrics, attr)
                if histogram.count:
                    for q in QUANTILES:
                        gauge.add_metric([flow.config.name, str(q)], histogram.percentile_s(q * 100) * 1000)
            yield gauge
        lag = GaugeMetricFamily("kanal_mirror_lag_records", "source end offset minus the committed position",
                                labels=["flow", "topic", "partition"])
        for flow in self._flows:
            for (topic, partition), records in sorted(flow.metrics.lag.items()):
                lag.add_metric([flow.config.name, topic, str(partition)], records)
        yield lag
