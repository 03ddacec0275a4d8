"""PeerClient: this controller's gRPC client to the other controllers.

Two uses:
- forwarding an admin write that reached a standby to the active controller (controller_service.py);
  a forwarded call carries the `kanal-forwarded` metadata key and is never forwarded again, so two
  controllers with different ideas of the leader cannot bounce a request between them;
- fetching metadata log batches this controller is missing after pysyncobj installed a snapshot from the
  leader (`fetch_range`): the snapshot replaces the image, the batches below it must still be in the log.

Channels are created lazily, one per peer, and kept for the life of the process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence

import grpc

from kanal.metadata.log_codec import LogBatch, iter_batches
from kanal.net.channel_options import channel_options
from kanal.raft.controller_config import ControllerConfig
from kanal.raft.metadata_log import BelowLogStartError
from kanal.raft.voter_roster import VoterRoster
from kanal.security.channel_security import open_channel
from kanal.v1 import controller_pb2, controller_pb2_grpc
from kanal.v1.error import ErrorCode

_log = logging.getLogger("kanal.raft.peers")

FORWARDED_METADATA_KEY = "kanal-forwarded"
# A FetchMetadata reply holds at least one batch: allow the largest batch with room to spare.
MESSAGE_BYTES_MAX = 16 * 1024 * 1024
CHANNEL_OPTIONS = tuple(channel_options(MESSAGE_BYTES_MAX))
# fetch_range gives up after trying every peer for this long.
FETCH_RANGE_TIMEOUT_S = 60.0
_FETCH_CALL_TIMEOUT_S = 10.0
_FETCH_BYTES_MAX = 1024 * 1024


class MissingBatchesError(Exception):
    """No peer could serve the metadata log batches this controller is missing."""


class PeerClient:
    def __init__(self, config: ControllerConfig, roster: VoterRoster | None = None) -> None:
        self._config = config
        # Peers by id: the current voters (a quorum change adds some) and those configured.
        self._voters: VoterRoster | ControllerConfig = roster if roster is not None else config
        self._lock = threading.Lock()
        self._channels: dict[int, grpc.Channel] = {}

    def __repr__(self) -> str:
        return (f"<PeerClient peers={[v.controller_id for v in self._voters.others]} "
                f"open={sorted(self._channels)}>")

    def stub(self, controller_id: int) -> controller_pb2_grpc.ControllerStub:
        voter = self._voters.voter(controller_id)
        if voter is None or controller_id == self._config.controller_id:
            raise ValueError(f"controller {controller_id} is not a peer")
        with self._lock:
            channel = self._channels.get(controller_id)
            if channel is None:
                channel = open_channel(str(voter.grpc), CHANNEL_OPTIONS, self._config.security.outbound())
                self._channels[controller_id] = channel
        return controller_pb2_grpc.ControllerStub(channel)

    def fetch_range(self, start: int, end: int, prefer: Sequence[int] = ()) -> Iterator[LogBatch]:
        """The metadata log batches covering [start, end), in order, from whichever peer has them.
        BelowLogStartError when every peer answers that `start` is below its log start (retention deleted
        it everywhere); MissingBatchesError when none serves them within FETCH_RANGE_TIMEOUT_S."""
        order = list(dict.fromkeys([*prefer, *(v.controller_id for v in self._voters.others)]))
        order = [c for c in order if c != self._config.controller_id]
        offset = start
        deadline = time.monotonic() + FETCH_RANGE_TIMEOUT_S
        while offset < end:
            progressed = False
            below_start = 0  # peers that answered: deleted by retention (below my log start)
            for controller_id in order:
                try:
                    reply = self.stub(controller_id).FetchMetadata(
                        controller_pb2.FetchMetadataRequest(
                            offset=offset, max_bytes=_FETCH_BYTES_MAX, max_wait_ms=0
                        ),
                        timeout=_FETCH_CALL_TIMEOUT_S,
                    )
                except grpc.RpcError as exc:
                    _log.warning(
                        "fetching metadata [%d, %d) from controller %d: %s", offset, end, controller_id, exc
                    )
                    continue
                if reply.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    below_start += 1
                    continue
                if reply.error or not reply.entries:
                    continue
                for batch in iter_batches(reply.entries):
                    if batch.base_offset < offset:
                        continue  # the reply starts with the batch holding `offset`
                    if batch.base_offset >= end:
                        break
                    yield batch
                    offset = batch.end_offset
                    progressed = True
                break
            if offset >= end:
                return
            if not progressed:
                if below_start and below_start == len(order):
                    raise BelowLogStartError(
                        f"every other controller's metadata log starts past offset {offset}"
                    )
                if time.monotonic() >= deadline:
                    raise MissingBatchesError(f"no controller could serve metadata offsets [{offset}, {end})")
                time.sleep(0.2)  # every peer failed: back off briefly before asking again

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
