"""Decision: what every controller decision returns, and Stamp: the audit stamp on its records.

Decide -> records -> apply: a decision function reads the image and a request and returns the records to
write plus the reply to send once they are committed. It never changes the image; the records do, when
the quorum has agreed on them and `apply_batch` runs. The reply describes the state after the records are
applied, so the shell sends it only after the batch has committed (or at once when `records` is empty).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from kanal.v1 import metadata_pb2

Reply = TypeVar("Reply")


class Decision(NamedTuple, Generic[Reply]):
    """Records to write (one atomic batch; empty when nothing changes) and the reply."""

    records: list[metadata_pb2.MetadataRecord]
    reply: Reply


@dataclass(frozen=True, slots=True)
class Stamp:
    """Who decided what, when: copied onto every record of one decision (the log is an audit trail)."""

    time_ms: int
    principal: str
    request_id: str

    def __post_init__(self) -> None:
        # A record without time, principal or request id cannot be audited; refuse to build one.
        if self.time_ms < 0:
            raise ValueError(f"now_ms must be >= 0, got {self.time_ms}")
        if not self.principal:
            raise ValueError("a decision needs a principal")
        if not self.request_id:
            raise ValueError("a decision needs a request id (the shell makes one when the request has none)")

    def record(self, **body: Any) -> metadata_pb2.MetadataRecord:
        """A MetadataRecord with this stamp and one oneof member, e.g. `record(topic=TopicRecord(...))`."""
        return metadata_pb2.MetadataRecord(
            time_ms=self.time_ms, principal=self.principal, request_id=self.request_id, **body
        )

    def __repr__(self) -> str:
        return f"<Stamp {self.request_id} by {self.principal} at {self.time_ms}>"
