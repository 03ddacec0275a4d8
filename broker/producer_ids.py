"""ProducerIdManager: hands out idempotent producer ids from blocks the controller allocates to this broker
(AllocateProducerIds writes a ProducerIdsRecord, so no two brokers ever hand out the same id)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from kanal.v1 import controller_pb2
from kanal.v1.error import ErrorCode, KanalError


class ProducerIdManager:
    def __init__(self, allocate: Callable[[controller_pb2.AllocateProducerIdsRequest],
                                          controller_pb2.AllocateProducerIdsResponse],
                 broker_id: int, broker_epoch: Callable[[], int]) -> None:
        self._allocate = allocate
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._next = 0
        self._end = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ProducerIdManager block=[{self._next},{self._end})>"

    def next_id(self) -> int:
        with self._lock:
            if self._next >= self._end:
                reply = self._allocate(controller_pb2.AllocateProducerIdsRequest(
                    broker_id=self._broker_id, broker_epoch=self._broker_epoch()))
                if reply.error != ErrorCode.NONE or reply.block_size < 1:
                    raise KanalError(reply.error or ErrorCode.UNKNOWN_SERVER_ERROR,
                                     "the controller did not allocate producer ids")
                self._next, self._end = reply.first_producer_id, reply.first_producer_id + reply.block_size
            producer_id = self._next
            self._next += 1
            return producer_id
