"""Snapshots: a MetadataImage as records, and back.

`image_to_snapshot(image)` writes the records that rebuild the image from empty, in an order `apply`
accepts: brokers (with their current fenced state), topics (each followed by its config overrides, its
partitions with their current epochs, and their remote logs: segments, then a RemoteLogStartRecord when
the start is not the first segment's base), broker configs, client quotas (user+client-id entities after the
plain ones), SCRAM credentials, controller registrations, access-control entries (sorted), the schema
registry (every schema by id, orphans too, so the next id survives the restore; then each subject's versions
in order with their soft-deleted flags; then configs and modes by subject), then the producer-id counter
as a ProducerIdsRecord with broker_id -1 (a counter restored for no broker). Records are stamped with time 0,
principal "snapshot" and request id "snapshot-<next_offset>": a snapshot is a copy, not a decision, and
must be the same bytes on every controller that writes it at the same offset.

`image_from_snapshot(snapshot)` applies those records to an empty image (as `apply` would, one record
at a time, so the image's indexes are rebuilt too), then sets next_offset and controller_epoch from the
snapshot and checks the image-wide invariants, indexes included. For every image `i`:
`image_from_snapshot(image_to_snapshot(i)) == i`.
"""

from __future__ import annotations

from kanal.metadata.acl import iter_entries
from kanal.metadata.apply import apply_records, check_image
from kanal.metadata.decision import Stamp
from kanal.metadata.ids import ControllerEpoch, MetadataOffset
from kanal.metadata.image import MetadataImage, RemoteLog
from kanal.metadata.invariant import MetadataInvariantError
from kanal.v1 import metadata_pb2

SNAPSHOT_PRINCIPAL = "snapshot"


def image_to_snapshot(image: MetadataImage) -> metadata_pb2.MetadataSnapshot:
    """The image as a MetadataSnapshot (deterministic: sorted by broker id, topic name, key)."""
    stamp = Stamp(0, SNAPSHOT_PRINCIPAL, f"snapshot-{image.next_offset}")
    records: list[metadata_pb2.MetadataRecord] = []
    for broker_id in sorted(image.brokers):
        reg = image.brokers[broker_id]
        records.append(
            stamp.record(
                register_broker=metadata_pb2.RegisterBrokerRecord(
                    broker_id=reg.broker_id,
                    incarnation_id=reg.incarnation_id,
                    broker_epoch=reg.broker_epoch,
                    endpoint=reg.endpoint,
                    rack=reg.rack,
                    fenced=reg.fenced,
                    metrics_endpoint=reg.metrics_endpoint,
                    directory_id=reg.directory_id,
                    unclean_shutdown=reg.unclean_shutdown,
                    inter_node_endpoint=reg.inter_node_endpoint,
                    kafka_endpoint=reg.kafka_endpoint,
                )
            )
        )
        if reg.in_controlled_shutdown:
            records.append(
                stamp.record(
                    broker_registration_change=metadata_pb2.BrokerRegistrationChangeRecord(
                        broker_id=reg.broker_id, broker_epoch=reg.broker_epoch, fenced=True,
                        reason="controlled shutdown", in_controlled_shutdown=True,
                    )
                )
            )
    for name in sorted(image.topics):
        topic = image.topics[name]
        records.append(stamp.record(topic=metadata_pb2.TopicRecord(name=topic.name, topic_id=topic.topic_id)))
        for key in sorted(topic.configs):
            records.append(
                stamp.record(
                    config=metadata_pb2.ConfigRecord(
                        resource_type=metadata_pb2.CONFIG_RESOURCE_TOPIC,
                        resource_name=name,
                        key=key,
                        value=topic.configs[key],
                    )
                )
            )
        for p in topic.partitions:
            records.append(
                stamp.record(
                    partition=metadata_pb2.PartitionRecord(
                        topic_id=topic.topic_id,
                        partition_id=p.partition_id,
                        replicas=p.replicas,
                        isr=p.isr,
                        leader=p.leader,
                        leader_epoch=p.leader_epoch,
                        partition_epoch=p.partition_epoch,
                        isr_directory_ids=p.isr_directory_ids if any(p.isr_directory_ids) else (),
                        adding_replicas=p.adding_replicas,
                        removing_replicas=p.removing_replicas,
                        recovering=p.recovering,
                    )
                )
            )
        for p in topic.partitions:
            remote = image.remote_logs.get((topic.topic_id, p.partition_id))
            if remote is not None:
                records.extend(_remote_log_records(stamp, topic.topic_id, p.partition_id, remote))
    for resource in sorted(image.broker_configs):
        configs = image.broker_configs[resource]
        for key in sorted(configs):
            records.append(
                stamp.record(
                    config=metadata_pb2.ConfigRecord(
                        resource_type=metadata_pb2.CONFIG_RESOURCE_BROKER,
                        resource_name=resource,
                        key=key,
                        value=configs[key],
                    )
                )
            )
    for entity in sorted(image.client_quotas):
        quotas = image.client_quotas[entity]
        for key in sorted(quotas):
            records.append(
                stamp.record(
                    client_quota=metadata_pb2.ClientQuotaRecord(
                        entity_type=entity[0],
                        entity_name=entity[1],
                        key=key,
                        value=quotas[key],
                    )
                )
            )
    for (user, client_id) in sorted(image.user_client_quotas):
        quotas = image.user_client_quotas[(user, client_id)]
        for key in sorted(quotas):
            records.append(
                stamp.record(
                    client_quota=metadata_pb2.ClientQuotaRecord(
                        entity_type="user", entity_name=user, client_id=client_id, key=key, value=quotas[key]
                    )
                )
            )
    for user in sorted(image.scram_credentials):
        credentials = image.scram_credentials[user]
        for mechanism in sorted(credentials):
            c = credentials[mechanism]
            records.append(
                stamp.record(
                    user_scram_credential=metadata_pb2.UserScramCredentialRecord(
                        name=user, mechanism=mechanism, salt=c.salt, stored_key=c.stored_key,
                        server_key=c.server_key, iterations=c.iterations,
                    )
                )
            )
    if image.cluster_id:
        records.append(
            stamp.record(cluster_identity=metadata_pb2.ClusterIdentityRecord(cluster_id=image.cluster_id))
        )
    for controller_id in sorted(image.controller_directories):
        records.append(
            stamp.record(
                controller_registration=metadata_pb2.ControllerRegistrationRecord(
                    controller_id=controller_id, directory_id=image.controller_directories[controller_id]
                )
            )
        )
    if image.voters:
        records.append(
            stamp.record(voter_set=metadata_pb2.VoterSetRecord(voters=[v.to_proto() for v in image.voters]))
        )
    for entry in iter_entries(image.acls):
        records.append(
            stamp.record(access_control_entry=metadata_pb2.AccessControlEntryRecord(entry=entry.to_proto()))
        )
    records.extend(_registry_records(stamp, image))
    if image.next_producer_id > MetadataImage().next_producer_id:  # only once ids were handed out
        records.append(
            stamp.record(
                producer_ids=metadata_pb2.ProducerIdsRecord(
                    broker_id=-1,
                    broker_epoch=-1,
                    next_producer_id=image.next_producer_id,
                )
            )
        )
    return metadata_pb2.MetadataSnapshot(
        next_offset=image.next_offset, controller_epoch=image.controller_epoch, records=records
    )


def _remote_log_records(
    stamp: Stamp, topic_id: str, partition_id: int, remote: RemoteLog
) -> list[metadata_pb2.MetadataRecord]:
    """The records that rebuild one remote log: its segments in order (the first sets the start to its
    base), then its start when that is elsewhere (inside the first segment, or alone when no segment is
    left)."""
    records = [
        stamp.record(remote_log_segment=segment.to_record(topic_id, partition_id))
        for segment in remote.segments
    ]
    first_base = remote.segments[0].base_offset if remote.segments else 0
    if remote.log_start_offset != first_base:
        records.append(
            stamp.record(
                remote_log_start=metadata_pb2.RemoteLogStartRecord(
                    topic_id=topic_id,
                    partition_id=partition_id,
                    log_start_offset=remote.log_start_offset,
                    reason="snapshot",
                )
            )
        )
    return records


def _registry_records(stamp: Stamp, image: MetadataImage) -> list[metadata_pb2.MetadataRecord]:
    """The records that rebuild the schema registry: schemas first (versions name them), in id order;
    versions as they stand (a soft-deleted one is recorded deleted at once, which apply takes: only a change
    of an existing version checks references); configs and modes, the registry's ("") first."""
    records = [stamp.record(schema=image.schemas[key].to_record()) for key in sorted(image.schemas)]
    for subject in sorted(image.subjects):
        versions = image.subjects[subject]
        records.extend(
            stamp.record(subject_version=metadata_pb2.SubjectVersionRecord(
                subject=subject, version=version, schema_id=versions[version].schema_id,
                deleted=versions[version].deleted,
            ))
            for version in sorted(versions)
        )
    for subject in sorted(image.registry_configs):
        config = image.registry_configs[subject]
        records.append(stamp.record(registry_config=metadata_pb2.RegistryConfigRecord(
            subject=subject, compatibility=config.compatibility, normalize=config.normalize)))
    for subject in sorted(image.registry_modes):
        records.append(stamp.record(registry_mode=metadata_pb2.RegistryModeRecord(
            subject=subject, mode=image.registry_modes[subject])))
    return records


def image_from_snapshot(snapshot: metadata_pb2.MetadataSnapshot) -> MetadataImage:
    """The image a snapshot describes; MetadataInvariantError when its records do not fit together."""
    image = MetadataImage()
    apply_records(image, snapshot.records)
    if snapshot.next_offset < 0:
        raise MetadataInvariantError(f"snapshot with negative next_offset {snapshot.next_offset}")
    image.next_offset = MetadataOffset(snapshot.next_offset)
    image.controller_epoch = ControllerEpoch(snapshot.controller_epoch)
    check_image(image)
    return image
