"""Broker registration decisions: a broker process announces itself (RegisterBroker), or leaves for good.

Registration rules:

- A broker registers on every start with a new random incarnation id and starts fenced; its broker
  epoch is the metadata offset of its RegisterBrokerRecord (computed from `image.next_offset`, so the shell
  must decide against an image that includes every batch it has proposed).
- The same incarnation registering again with the same endpoint, rack and metrics endpoint is a retry
  (the reply was lost): no records, the current epoch is returned.
- A different incarnation for a registered id is refused with DUPLICATE_BROKER_REGISTRATION while the
  old registration has a live session: unfenced and heard from within the session timeout (KRaft's
  rule). Two live processes configured with one id therefore never take turns: the first keeps the id,
  the second is refused until the first is gone. A broker that stopped cleanly is fenced by its
  controlled shutdown, so its restart registers at once; one that crashed registers once its session
  expired (the old process may only be hung, not dead: letting the new one in earlier would give two
  live processes one id).
- Otherwise a different incarnation replaces the old registration: the old one is fenced (its
  leaderships move, see fencing.py), unregistered, and the new one registered, all in one batch. The old
  process, if it still runs, then gets STALE_BROKER_EPOCH with `registered_broker_epoch` newer than its
  own and stops (see decide_broker_heartbeat and broker/lifecycle.py).
- The registration carries the broker's data directory id (meta.properties). A new directory id under a
  registered id means the broker's logs are gone; the ISR entries keep the id their log had, so the
  broker is not elected from them (election.py).
- It also says whether the broker's previous run shut down cleanly. After an unclean one its logs may
  miss writes that were never fsynced: partitions whose last in-sync replica it is wait for a recovery
  election when it is unfenced (fencing.py, election.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.fencing import fence_records
from kanal.metadata.ids import BrokerId
from kanal.metadata.image import MetadataImage
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2, operations_pb2
from kanal.v1.error import ErrorCode, KanalError


def decide_register_broker(
    image: MetadataImage,
    request: controller_pb2.RegisterBrokerRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
    last_heartbeat_ms: Mapping[int, int] | None = None,
    session_timeout_ms: int = 0,
) -> Decision[controller_pb2.RegisterBrokerResponse]:
    """Register (or re-register) a broker; the reply carries the broker epoch to heartbeat with.

    `last_heartbeat_ms` and `session_timeout_ms` are the active controller's session times (None: it
    keeps none, so no old session counts as live)."""
    stamp = Stamp(now_ms, principal, request_id)
    try:
        _check_request(request)
    except KanalError as exc:
        return Decision([], controller_pb2.RegisterBrokerResponse(error=exc.code, error_message=exc.message))
    broker_id = BrokerId(request.broker_id)
    existing = image.brokers.get(broker_id)
    records: list[metadata_pb2.MetadataRecord] = []
    if existing is not None:
        if existing.incarnation_id == request.incarnation_id:
            same = (existing.endpoint, existing.rack, existing.metrics_endpoint, existing.directory_id,
                    existing.inter_node_endpoint, existing.kafka_endpoint) == (
                request.endpoint,
                request.rack,
                request.metrics_endpoint,
                request.directory_id,
                request.inter_node_endpoint,
                request.kafka_endpoint,
            )
            if same:
                return Decision([], controller_pb2.RegisterBrokerResponse(broker_epoch=existing.broker_epoch))
            return Decision(
                [],
                controller_pb2.RegisterBrokerResponse(
                    error=ErrorCode.INVALID_REQUEST,
                    error_message=f"incarnation {request.incarnation_id} of broker {broker_id} registered "
                    "again with another endpoint, rack or directory; a process keeps them for its whole run",
                ),
            )
        last_ms = (last_heartbeat_ms or {}).get(broker_id)
        if not existing.fenced and last_ms is not None and now_ms - last_ms <= session_timeout_ms:
            return Decision(
                [],
                controller_pb2.RegisterBrokerResponse(
                    error=ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                    error_message=f"broker id {broker_id} is registered by incarnation "
                    f"{existing.incarnation_id} (epoch {existing.broker_epoch}, {existing.endpoint}), heard "
                    f"from {now_ms - last_ms} ms ago; another incarnation may register only once it is "
                    f"fenced or silent for {session_timeout_ms} ms",
                ),
            )
        reason = f"replaced by incarnation {request.incarnation_id}"
        records.extend(fence_records(image, [broker_id], stamp, reason))
        records.append(
            stamp.record(
                unregister_broker=metadata_pb2.UnregisterBrokerRecord(
                    broker_id=broker_id,
                    broker_epoch=existing.broker_epoch,
                )
            )
        )
    # The epoch is the offset this record will have: the batch starts at image.next_offset.
    broker_epoch = image.next_offset + len(records)
    records.append(
        stamp.record(
            register_broker=metadata_pb2.RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=request.incarnation_id,
                broker_epoch=broker_epoch,
                endpoint=request.endpoint,
                rack=request.rack,
                fenced=True,
                metrics_endpoint=request.metrics_endpoint,
                directory_id=request.directory_id,
                unclean_shutdown=request.unclean_shutdown,
                inter_node_endpoint=request.inter_node_endpoint,
                kafka_endpoint=request.kafka_endpoint,
            )
        )
    )
    return Decision(records, controller_pb2.RegisterBrokerResponse(broker_epoch=broker_epoch))


def decide_unregister_broker(
    image: MetadataImage, broker_id: int, *, now_ms: int, principal: str, request_id: str
) -> Decision[None]:
    """Remove a broker for good (decommissioning): fence it if live, then unregister it.

    Raises KanalError(BROKER_NOT_AVAILABLE) for an unknown broker. Its replicas stay assigned (reassign
    them separately); partitions it alone was in sync for stay offline.
    """
    stamp = Stamp(now_ms, principal, request_id)
    reg = image.brokers.get(BrokerId(broker_id))
    if reg is None:
        raise KanalError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
    records = fence_records(image, [reg.broker_id], stamp, "unregistered")
    records.append(
        stamp.record(
            unregister_broker=metadata_pb2.UnregisterBrokerRecord(
                broker_id=reg.broker_id,
                broker_epoch=reg.broker_epoch,
            )
        )
    )
    return Decision(records, None)


# Partitions named in a refused decommission, at most (the message says how many there are in all).
_HELD_NAMED_MAX = 20


def decide_decommission_broker(
    image: MetadataImage, request: operations_pb2.UnregisterBrokerRequest, *, now_ms: int, principal: str,
    request_id: str
) -> Decision[operations_pb2.UnregisterBrokerResponse]:
    """UnregisterBroker from an operator: refused (BROKER_HOLDS_REPLICAS, naming them) while any partition
    still assigns the broker a replica, since its partitions would keep a replica nobody hosts; otherwise
    `decide_unregister_broker`."""
    reply = operations_pb2.UnregisterBrokerResponse
    if BrokerId(request.broker_id) not in image.brokers:
        return Decision([], reply(error=ErrorCode.BROKER_NOT_AVAILABLE,
                                  error_message=f"broker {request.broker_id} is not registered"))
    held = sorted(
        f"{t.name}-{p.partition_id}" for t, p in image.iter_partitions() if request.broker_id in p.replicas
    )
    if held:
        more = f" and {len(held) - _HELD_NAMED_MAX} more" if len(held) > _HELD_NAMED_MAX else ""
        return Decision([], reply(
            error=ErrorCode.BROKER_HOLDS_REPLICAS,
            error_message=(f"broker {request.broker_id} still holds replicas of {len(held)} partition(s): "
                           f"{', '.join(held[:_HELD_NAMED_MAX])}{more}; reassign them away first "
                           f"(kanal reassign balance --brokers <the others>)")))
    decision = decide_unregister_broker(image, request.broker_id, now_ms=now_ms, principal=principal,
                                        request_id=request_id)
    return Decision(decision.records, reply())


def describe_brokers(image: MetadataImage) -> list[admin_pb2.BrokerDescription]:
    """Registered brokers for DescribeCluster, by id."""
    return [
        admin_pb2.BrokerDescription(
            broker_id=reg.broker_id,
            endpoint=reg.endpoint,
            rack=reg.rack,
            fenced=reg.fenced,
            broker_epoch=reg.broker_epoch,
        )
        for _, reg in sorted(image.brokers.items())
    ]


def _check_request(request: controller_pb2.RegisterBrokerRequest) -> None:
    if request.broker_id < 0:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"broker id must be >= 0, got {request.broker_id}")
    if not request.incarnation_id:
        raise KanalError(ErrorCode.INVALID_REQUEST, "a registration needs an incarnation id")
    if not request.endpoint:
        raise KanalError(ErrorCode.INVALID_REQUEST, "a registration needs the broker's endpoint (host:port)")
