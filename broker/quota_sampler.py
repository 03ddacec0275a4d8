"""RateSampler: a rate measured over sampled windows (Kafka's SampledStat + Rate), pure: time is an argument.

Layout: up to `window_num` samples, each covering `window_size_ms` from its start. A value recorded at
`now_ms` goes into the newest sample if that sample started less than `window_size_ms` ago, else into a
new one. A sample that started `window_num * window_size_ms` or longer ago has expired and counts for
nothing.

The rate at `now_ms` is (sum of the live samples) / (window length), where the window length is the
time since the oldest live sample started, but never less than `(window_num - 1) * window_size_ms`. The
floor is what keeps the first bytes of a new client from reading as an enormous rate (10 KB in the
first millisecond is not 10 MB/s), and it is why a client may send up to `quota x (window_num - 1) x
window_size` at full speed before it is first throttled (Kafka behaves the same).
"""

from __future__ import annotations

from dataclasses import dataclass

from kanal.v1.error import ErrorCode, KanalError

QUOTA_WINDOW_NUM_MIN = 2
QUOTA_WINDOW_NUM_MAX = 100
QUOTA_WINDOW_SIZE_MS_MIN = 10
QUOTA_WINDOW_SIZE_MS_MAX = 3_600_000


@dataclass(frozen=True, slots=True)
class QuotaWindows:
    """`quota.window.num` samples of `quota.window.size.seconds` each (Kafka's defaults: 11 x 1 s)."""

    window_num: int = 11
    window_size_ms: int = 1000

    def __post_init__(self) -> None:
        if not QUOTA_WINDOW_NUM_MIN <= self.window_num <= QUOTA_WINDOW_NUM_MAX:
            raise KanalError(
                ErrorCode.INVALID_CONFIG,
                f"quota window num must be in [{QUOTA_WINDOW_NUM_MIN}, "
                f"{QUOTA_WINDOW_NUM_MAX}], got {self.window_num}",
            )
        if not QUOTA_WINDOW_SIZE_MS_MIN <= self.window_size_ms <= QUOTA_WINDOW_SIZE_MS_MAX:
            raise KanalError(
                ErrorCode.INVALID_CONFIG,
                f"quota window size must be in [{QUOTA_WINDOW_SIZE_MS_MIN}, {QUOTA_WINDOW_SIZE_MS_MAX}] "
                f"ms, got {self.window_size_ms}",
            )

    @property
    def span_ms(self) -> int:
        """How long a sample lives: after this long without a record, a sampler's rate is 0."""
        return self.window_num * self.window_size_ms


class RateSampler:
    __slots__ = ("_samples", "_windows", "last_record_ms")

    def __init__(self, windows: QuotaWindows) -> None:
        self._windows = windows
        self._samples: list[list[float]] = []  # [start_ms, total], oldest first, at most window_num
        self.last_record_ms: float | None = None

    def __repr__(self) -> str:
        return f"<RateSampler samples={len(self._samples)} total={sum(s[1] for s in self._samples):g}>"

    def record(self, value: float, now_ms: float) -> None:
        """Add `value` (bytes, or milliseconds of handler time) at `now_ms`."""
        self._expire(now_ms)
        samples = self._samples
        if not samples or now_ms - samples[-1][0] >= self._windows.window_size_ms:
            if len(samples) == self._windows.window_num:
                samples.pop(0)
            samples.append([now_ms, 0.0])
        samples[-1][1] += value
        self.last_record_ms = now_ms

    def window_ms(self, now_ms: float) -> float:
        """The window the rate is measured over at `now_ms` (see the module docstring)."""
        self._expire(now_ms)
        floor_ms = (self._windows.window_num - 1) * self._windows.window_size_ms
        if not self._samples:
            return floor_ms
        return max(now_ms - self._samples[0][0], floor_ms)

    def rate_per_s(self, now_ms: float) -> float:
        """Units per second over the window at `now_ms`."""
        window_ms = self.window_ms(now_ms)
        return sum(s[1] for s in self._samples) * 1000 / window_ms

    def _expire(self, now_ms: float) -> None:
        span_ms = self._windows.span_ms
        samples = self._samples
        while samples and now_ms - samples[0][0] >= span_ms:
            samples.pop(0)
