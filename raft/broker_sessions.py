"""BrokerSessions: when the active controller last heard from each broker.

Heartbeats never go through Raft (DESIGN §3): only the active controller keeps these times, in memory,
and passes them to kanal.metadata's decide_session_expirations. A new active controller knows no times,
so it starts every registered broker's session at its activation (`start_all`), as KRaft does; a broker
that is really gone is then fenced one session timeout after the failover, not at once.

It also keeps the log ends each broker last reported for recovering partitions (the heartbeat's
recovery_log_ends; kanal.metadata.recovery_election), under the same rules: in memory only, gathered
again by a new active controller.

Pure: times are arguments. The active controller holds its decision lock around it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kanal.metadata.recovery_election import LogEndReports, merge_reports
from kanal.v1 import controller_pb2


class BrokerSessions:
    def __init__(self) -> None:
        self._last_heartbeat_ms: dict[int, int] = {}
        self._log_ends: LogEndReports = {}

    def __repr__(self) -> str:
        return f"<BrokerSessions brokers={sorted(self._last_heartbeat_ms)}>"

    def start_all(self, broker_ids: Iterable[int], now_ms: int) -> None:
        """Forget every time and start a session for each broker at `now_ms` (controller activation)."""
        self._last_heartbeat_ms = {b: now_ms for b in broker_ids}
        self._log_ends = {}

    def touch(self, broker_id: int, now_ms: int) -> None:
        """The broker was heard from (a heartbeat or a registration)."""
        self._last_heartbeat_ms[broker_id] = max(now_ms, self._last_heartbeat_ms.get(broker_id, now_ms))

    def ensure(self, broker_ids: Iterable[int], now_ms: int) -> None:
        """Start a session at `now_ms` for each of these brokers that has none (a broker the image has
        but this controller never heard from, e.g. registered by the previous controller just before
        activation): decide_session_expirations needs a time for every live broker."""
        for b in broker_ids:
            self._last_heartbeat_ms.setdefault(b, now_ms)

    def forget(self, broker_ids: Iterable[int]) -> None:
        for b in broker_ids:
            self._last_heartbeat_ms.pop(b, None)

    def clear(self) -> None:
        self._last_heartbeat_ms = {}
        self._log_ends = {}

    def report_log_ends(self, broker_id: int, broker_epoch: int,
                        reports: Iterable[controller_pb2.ReplicaLogEnd]) -> None:
        """The broker's heartbeat reported these log ends (its whole current set)."""
        self._log_ends = merge_reports(self._log_ends, broker_id, broker_epoch, reports)

    @property
    def log_ends(self) -> LogEndReports:
        return self._log_ends

    @property
    def last_heartbeat_ms(self) -> Mapping[int, int]:
        return self._last_heartbeat_ms
