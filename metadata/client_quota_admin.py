"""Client quota decisions: AlterClientQuotas and DescribeClientQuotas (a read).

AlterClientQuotas: each entry (one entity) succeeds or fails as a whole: an unknown entity type or key, an
illegal entity name or client id, a client id on a client-id entity, a key named twice, or a value that
is not a finite number > 0 fails it with INVALID_QUOTA and writes nothing for it. An entity with a
client id is Kafka's user+client-id entity (QuotaEntity.client_id). Records are written only for real changes
(setting the current value, or removing a quota that is not set, writes nothing). See client_quota.py for the
entity and key rules.
"""

from __future__ import annotations

from kanal.metadata.client_quota import (
    check_quota_entity,
    check_quota_entity_names,
    check_quota_key,
    check_quota_value,
)
from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.image import MetadataImage
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError


def decide_alter_client_quotas(
    image: MetadataImage,
    request: admin_pb2.AlterClientQuotasRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[admin_pb2.AlterClientQuotasResponse]:
    """Set or remove quotas, all-or-nothing per entity."""
    stamp = Stamp(now_ms, principal, request_id)
    records: list[metadata_pb2.MetadataRecord] = []
    results = []
    seen: set[tuple[str, str, str | None]] = set()
    for entry in request.entries:
        client_id = entry.entity.client_id if entry.entity.HasField("client_id") else None
        entity = (entry.entity.entity_type, entry.entity.entity_name, client_id)
        try:
            if entity in seen:
                raise KanalError(ErrorCode.INVALID_REQUEST, f"quota entity {entity} is named more than once")
            seen.add(entity)
            check_quota_entity(entity[0])
            check_quota_entity_names(*entity)
            entity_records = _entity_records(image, stamp, entity, entry.values)
        except KanalError as exc:
            results.append(
                admin_pb2.QuotaEntityResult(entity=entry.entity, error=exc.code, error_message=exc.message)
            )
            continue
        results.append(admin_pb2.QuotaEntityResult(entity=entry.entity))
        if not request.validate_only:
            records.extend(entity_records)
    return Decision(records, admin_pb2.AlterClientQuotasResponse(results=results))


def _entity_records(
    image: MetadataImage,
    stamp: Stamp,
    entity: tuple[str, str, str | None],
    values: list[admin_pb2.QuotaValue],
) -> list[metadata_pb2.MetadataRecord]:
    entity_type, entity_name, client_id = entity
    if client_id is None:
        current = image.client_quotas.get((entity_type, entity_name), {})
    else:
        current = image.user_client_quotas.get((entity_name, client_id), {})
    keys: set[str] = set()
    records = []
    for value in values:
        check_quota_key(value.key)
        if value.key in keys:
            raise KanalError(
                ErrorCode.INVALID_QUOTA, f"quota {value.key} of {entity} is given more than once"
            )
        keys.add(value.key)
        record = metadata_pb2.ClientQuotaRecord(
            entity_type=entity_type, entity_name=entity_name, key=value.key
        )
        if client_id is not None:
            record.client_id = client_id
        if value.remove:
            if value.key not in current:
                continue
        else:
            check_quota_value(value.key, value.value)
            if current.get(value.key) == value.value:
                continue
            record.value = value.value
        records.append(stamp.record(client_quota=record))
    return records


def describe_client_quotas(
    image: MetadataImage, request: admin_pb2.DescribeClientQuotasRequest
) -> admin_pb2.DescribeClientQuotasResponse:
    """Quotas of the matching entities ("" matches every type / every name), sorted by entity and key; a
    user's user+client-id entities follow the plain ones and match the user's name."""
    found: list[tuple[str, str, str | None, dict[str, float]]] = [
        (t, n, None, q) for (t, n), q in image.client_quotas.items()]
    found += [("user", user, client_id, q) for (user, client_id), q in image.user_client_quotas.items()]
    entries = []
    for entity_type, entity_name, client_id, quotas in sorted(
        found, key=lambda e: (e[0], e[1], e[2] is not None, e[2] or "")
    ):
        if request.entity_type and entity_type != request.entity_type:
            continue
        if request.entity_type and request.entity_name and entity_name != request.entity_name:
            continue
        entity = admin_pb2.QuotaEntity(entity_type=entity_type, entity_name=entity_name)
        if client_id is not None:
            entity.client_id = client_id
        entries.append(
            admin_pb2.DescribeClientQuotasResponse.Entry(
                entity=entity, values=[admin_pb2.QuotaValue(key=k, value=quotas[k]) for k in sorted(quotas)]
            )
        )
    return admin_pb2.DescribeClientQuotasResponse(entries=entries)
