"""kanal.metadata: the pure metadata state machine (MetadataImage + apply) and the controller's decisions.

No I/O, no threads, no clocks, no global randomness: time (`now_ms`) and a `random.Random` are arguments.
See README.md in this folder for the rules.
"""

from kanal.metadata.acl import AclEntry, AclResource, AclSet
from kanal.metadata.acl_admin import decide_create_acls, decide_delete_acls, describe_acls
from kanal.metadata.alter_partition import decide_alter_partition
from kanal.metadata.apply import apply, apply_batch, check_image
from kanal.metadata.authorizer import AuthorizerConfig, authorize
from kanal.metadata.broker_liveness import decide_broker_heartbeat, decide_session_expirations
from kanal.metadata.broker_registration import (
    decide_decommission_broker,
    decide_register_broker,
    decide_unregister_broker,
    describe_brokers,
)
from kanal.metadata.client_quota_admin import decide_alter_client_quotas, describe_client_quotas
from kanal.metadata.cluster_identity import cluster_id_problem, decide_cluster_identity
from kanal.metadata.config_admin import decide_alter_configs, describe_configs
from kanal.metadata.config_resource import effective_topic_config, topic_config_texts
from kanal.metadata.controller_registration import decide_register_controller
from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.election import (
    Election,
    decide_preferred_leader_elections,
    elect,
    elect_preferred,
    lost_disk,
    offline_reason,
)
from kanal.metadata.ids import (
    NO_LEADER,
    BrokerEpoch,
    BrokerId,
    ControllerEpoch,
    LeaderEpoch,
    MetadataOffset,
    PartitionEpoch,
    PartitionId,
    ProducerId,
    TopicId,
)
from kanal.metadata.image import (
    CLUSTER_DEFAULT_BROKER,
    BrokerRegistration,
    MetadataImage,
    PartitionState,
    RemoteLog,
    RemoteSegment,
    TopicImage,
)
from kanal.metadata.invariant import MetadataInvariantError
from kanal.metadata.leader_balance import decide_auto_leader_rebalance, decide_elect_leaders, leader_imbalance
from kanal.metadata.placement import place_replicas, place_replicas_by_load
from kanal.metadata.producer_ids import PRODUCER_ID_BLOCK_SIZE, decide_allocate_producer_ids
from kanal.metadata.reassignment import (
    decide_alter_partition_reassignments,
    decide_reassignment_progress,
    list_partition_reassignments,
)
from kanal.metadata.remote_log import decide_alter_remote_log
from kanal.metadata.scram_admin import decide_alter_user_scram_credentials, describe_user_scram_credentials
from kanal.metadata.snapshot import image_from_snapshot, image_to_snapshot
from kanal.metadata.topic_admin import (
    TOPIC_PARTITIONS_MAX,
    decide_create_partitions,
    decide_create_topics,
    decide_delete_topics,
)

__all__ = [
    "CLUSTER_DEFAULT_BROKER",
    "NO_LEADER",
    "PRODUCER_ID_BLOCK_SIZE",
    "TOPIC_PARTITIONS_MAX",
    "AclEntry",
    "AclResource",
    "AclSet",
    "AuthorizerConfig",
    "BrokerEpoch",
    "BrokerId",
    "BrokerRegistration",
    "ControllerEpoch",
    "Decision",
    "Election",
    "LeaderEpoch",
    "MetadataImage",
    "MetadataInvariantError",
    "MetadataOffset",
    "PartitionEpoch",
    "PartitionId",
    "PartitionState",
    "ProducerId",
    "RemoteLog",
    "RemoteSegment",
    "Stamp",
    "TopicId",
    "TopicImage",
    "apply",
    "apply_batch",
    "authorize",
    "check_image",
    "cluster_id_problem",
    "decide_allocate_producer_ids",
    "decide_alter_client_quotas",
    "decide_alter_configs",
    "decide_alter_partition",
    "decide_alter_partition_reassignments",
    "decide_alter_remote_log",
    "decide_alter_user_scram_credentials",
    "decide_auto_leader_rebalance",
    "decide_broker_heartbeat",
    "decide_cluster_identity",
    "decide_create_acls",
    "decide_create_partitions",
    "decide_create_topics",
    "decide_decommission_broker",
    "decide_delete_acls",
    "decide_delete_topics",
    "decide_elect_leaders",
    "decide_preferred_leader_elections",
    "decide_reassignment_progress",
    "decide_register_broker",
    "decide_register_controller",
    "decide_session_expirations",
    "decide_unregister_broker",
    "describe_acls",
    "describe_brokers",
    "describe_client_quotas",
    "describe_configs",
    "describe_user_scram_credentials",
    "effective_topic_config",
    "elect",
    "elect_preferred",
    "image_from_snapshot",
    "image_to_snapshot",
    "leader_imbalance",
    "list_partition_reassignments",
    "lost_disk",
    "offline_reason",
    "place_replicas",
    "place_replicas_by_load",
    "topic_config_texts",
]
