"""A latency histogram for `kanal perf`: every sample counted, in buckets 1 % wide, so a run of a million
records reports true percentiles without keeping a million floats.

Bucket i holds latencies in [base^i, base^(i+1)) microseconds, base = 1.01: a reported percentile is the
upper edge of its bucket, at most 1 % above the true value; the maximum is kept exactly. Latencies under
one microsecond share bucket 0. Pure: the caller measures, this only counts.
"""

from __future__ import annotations

import math
from collections import Counter

BUCKET_RATIO = 1.01
_LOG_RATIO = math.log(BUCKET_RATIO)
PERCENTILES = (50.0, 95.0, 99.0, 99.9)


class LatencyHistogram:
    def __init__(self) -> None:
        self._buckets: Counter[int] = Counter()
        self.count = 0
        self.max_s = 0.0

    def add(self, latency_s: float, count: int = 1) -> None:
        """Count `count` samples of `latency_s` seconds (many records acknowledged together share one)."""
        micros = latency_s * 1e6
        self._buckets[int(math.log(micros) / _LOG_RATIO) if micros > 1 else 0] += count
        self.count += count
        self.max_s = max(self.max_s, latency_s)

    def percentile_s(self, p: float) -> float:
        """The latency at or under which `p` percent of the samples lie (the bucket's upper edge, at most
        the maximum); 0.0 with no samples."""
        if not self.count:
            return 0.0
        rank = math.ceil(self.count * p / 100)
        seen = 0
        for bucket in sorted(self._buckets):
            seen += self._buckets[bucket]
            if seen >= max(rank, 1):
                return min(BUCKET_RATIO ** (bucket + 1) / 1e6, self.max_s)
        return self.max_s

    def summary_ms(self) -> dict[str, float]:
        """latency_ms_p50, _p95, _p99, _p99_9 and _max, rounded to 0.01 ms (empty with no samples)."""
        if not self.count:
            return {}
        out = {
            f"latency_ms_p{str(p).removesuffix('.0').replace('.', '_')}": round(
                self.percentile_s(p) * 1000, 2
            )
            for p in PERCENTILES
        }
        out["latency_ms_max"] = round(self.max_s * 1000, 2)
        return out
