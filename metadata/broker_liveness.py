"""Broker liveness decisions: heartbeats (unfence, controlled shutdown) and session expiry (fence).

Heartbeats never go through Raft; only the state changes they cause do. The shell keeps each broker's
last heartbeat time (in memory, on the active controller) and passes it in.

- A fenced broker is unfenced once it has caught up: its heartbeat reports a metadata offset past its own
  RegisterBrokerRecord (offset > broker_epoch, KRaft's rule), or past `catch_up_offset` when the shell
  asks for more. Offline partitions it is in sync for get it as leader (CAUSE_LEADER_RECOVERED).
- `want_shutdown` fences the broker at once ("controlled shutdown"), moving its leaderships away, and
  marks it *in controlled shutdown*; the reply says shutdown_ready once the broker leads nothing (true as
  soon as the records are applied). The mark is sticky, as KRaft's: no heartbeat unfences the broker
  until it registers again (a new RegisterBrokerRecord has no mark), so a regular heartbeat that reaches
  the controller after the shutdown request cannot undo it.
- A live broker's heartbeat reports where its logs of recovering partitions end; once every replica of
  one has reported, its recovery election is decided (recovery_election.py). The shell keeps the
  reports and passes them in, as it does heartbeat times.
- A live broker whose last heartbeat is more than the session timeout ago is fenced ("session
  timeout"). A new active controller knows no heartbeat times: it must start every registered broker's
  session at its activation time (as KRaft does), or it would fence the whole cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.fencing import fence_records, unfence_records
from kanal.metadata.ids import BrokerId
from kanal.metadata.image import BrokerRegistration, MetadataImage
from kanal.metadata.recovery_election import LogEndReports, merge_reports, recovery_election_records
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode


def decide_broker_heartbeat(
    image: MetadataImage,
    request: controller_pb2.BrokerHeartbeatRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
    catch_up_offset: int | None = None,
    log_end_reports: LogEndReports | None = None,
) -> Decision[controller_pb2.BrokerHeartbeatResponse]:
    """Answer a heartbeat; records only when the broker's fenced state changes, or when its log-end
    reports complete a recovery election (`log_end_reports`: the other brokers' latest).

    The reply's controller_epoch is the image's; the shell may overwrite it with its own term and fills
    active_controller when it is not the active controller.
    """
    stamp = Stamp(now_ms, principal, request_id)
    reg = image.brokers.get(BrokerId(request.broker_id))
    if reg is None or reg.broker_epoch != request.broker_epoch:
        current = "not registered" if reg is None else f"registered with epoch {reg.broker_epoch}"
        superseded = reg is not None and reg.broker_epoch > request.broker_epoch
        advice = "another process registered this id after this one: stop" if superseded else "register again"
        return Decision(
            [],
            controller_pb2.BrokerHeartbeatResponse(
                error=ErrorCode.STALE_BROKER_EPOCH,
                error_message=f"broker {request.broker_id} epoch {request.broker_epoch} is stale "
                f"({current}); {advice}",
                registered_broker_epoch=-1 if reg is None else reg.broker_epoch,
                fenced=True,
                metadata_end_offset=image.next_offset,
                controller_epoch=image.controller_epoch,
            ),
        )
    if request.want_shutdown:
        records = _controlled_shutdown_records(image, reg, stamp)
        fenced, shutdown_ready = True, True
    elif reg.in_controlled_shutdown:
        # Sticky: a heartbeat sent just after the shutdown request (the broker's heartbeat thread races its
        # shutdown) must not unfence a process that is about to exit, or leaders would add it back to
        # their ISRs and acks=all writes would wait for it until its session expired.
        records, fenced, shutdown_ready = [], True, True
    elif reg.fenced:
        required = reg.broker_epoch + 1 if catch_up_offset is None else catch_up_offset
        caught_up = request.metadata_offset >= required
        reason = f"caught up to metadata offset {request.metadata_offset}"
        records = unfence_records(image, reg.broker_id, stamp, reason) if caught_up else []
        fenced, shutdown_ready = not caught_up, False
    else:
        reports = merge_reports(log_end_reports or {}, reg.broker_id, reg.broker_epoch,
                                request.recovery_log_ends)
        keys = [(r.topic_id, r.partition_id) for r in request.recovery_log_ends]
        records = recovery_election_records(image, reports, keys, stamp)
        fenced, shutdown_ready = False, False
    return Decision(
        records,
        controller_pb2.BrokerHeartbeatResponse(
            fenced=fenced,
            metadata_end_offset=image.next_offset + len(records),
            controller_epoch=image.controller_epoch,
            shutdown_ready=shutdown_ready,
        ),
    )


def _controlled_shutdown_records(
    image: MetadataImage, reg: BrokerRegistration, stamp: Stamp
) -> list[metadata_pb2.MetadataRecord]:
    """Fence the broker (moving its leaderships) and mark it in controlled shutdown; nothing when it is."""
    if reg.in_controlled_shutdown:
        return []
    if not reg.fenced:
        return fence_records(image, [reg.broker_id], stamp, "controlled shutdown", controlled_shutdown=True)
    # Fenced already (session timeout, or not caught up yet): it leads nothing; only the mark is new.
    return [
        stamp.record(
            broker_registration_change=metadata_pb2.BrokerRegistrationChangeRecord(
                broker_id=reg.broker_id, broker_epoch=reg.broker_epoch, fenced=True,
                reason="controlled shutdown", in_controlled_shutdown=True,
            )
        )
    ]


def decide_session_expirations(
    image: MetadataImage,
    last_heartbeat_ms: Mapping[int, int],
    *,
    now_ms: int,
    session_timeout_ms: int,
    principal: str = "controller",
    request_id: str,
) -> Decision[list[BrokerId]]:
    """Fence every live broker whose last heartbeat is more than `session_timeout_ms` before `now_ms`.

    The reply is the list of brokers fenced. Every live broker needs a heartbeat time (the shell starts
    sessions at registration and at its own activation); a missing one is a caller bug (ValueError).
    """
    if session_timeout_ms <= 0:
        raise ValueError(f"session_timeout_ms must be > 0, got {session_timeout_ms}")
    stamp = Stamp(now_ms, principal, request_id)
    expired: list[BrokerId] = []
    for broker_id in sorted(image.live_brokers()):
        last = last_heartbeat_ms.get(broker_id)
        if last is None:
            raise ValueError(
                f"no heartbeat time for live broker {broker_id}; start its session at registration "
                "or controller activation"
            )
        if now_ms - last > session_timeout_ms:
            expired.append(broker_id)
    records = fence_records(image, expired, stamp, f"session timeout after {session_timeout_ms} ms")
    return Decision(records, expired)
