"""Request ids the metadata log holds: how a controller tells a repeated admin write from a new one.

Every record carries the request id of the decision that wrote it (decision.Stamp). A broker gives each
admin call one id and keeps it when it tries another controller after one gave no answer in time
(broker/controller_client.py). The silent controller may still carry the first attempt out later, for
instance when a cut link heals and its TCP stream delivers the request seconds late; by then the retry
was applied and other writes may have followed. Carried out again, a create would bring back a topic
deleted since. So apply_batch remembers the ids of the last REQUEST_IDS_REMEMBERED_MAX decisions
(`MetadataImage.recent_request_ids`) and the active controller refuses a write whose id is among them
(DUPLICATE_REQUEST): nothing is done twice.

The memory is bounded by count, not time: a late attempt is late by seconds (a transport's retransmission
after a cut heals), while 10,000 decisions take minutes on a busy controller. It is not in snapshots: a
controller that loaded one knows only the ids applied since, which a late attempt must still be newer
than to be caught (the snapshot interval is far above seconds).
"""

from __future__ import annotations

from collections.abc import Iterable

from kanal.metadata.ids import MetadataOffset
from kanal.metadata.image import MetadataImage
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

REQUEST_IDS_REMEMBERED_MAX = 10_000


def remember(image: MetadataImage, records: Iterable[metadata_pb2.MetadataRecord],
             last_offset: MetadataOffset) -> None:
    """Note the request ids of an applied batch's records, forgetting the oldest past the bound."""
    seen = image.recent_request_ids
    for record in records:
        request_id = record.request_id
        if request_id:
            seen.pop(request_id, None)  # re-inserted: the newest stays last
            seen[request_id] = last_offset
    while len(seen) > REQUEST_IDS_REMEMBERED_MAX:
        del seen[next(iter(seen))]


def refuse_repeated(image: MetadataImage, request_id: str) -> None:
    """DUPLICATE_REQUEST when the log already holds a decision with this request id."""
    offset = image.recent_request_ids.get(request_id)
    if offset is not None:
        raise KanalError(
            ErrorCode.DUPLICATE_REQUEST,
            f"request {request_id} was carried out already (metadata offset {offset}): an earlier attempt "
            "of this call took effect; nothing was done again",
        )
