"""Typed ids of the metadata image, so that a broker id is never passed where an epoch is expected.

They are `NewType`s over int/str: free at run time, checked by mypy.
"""

from __future__ import annotations

from typing import NewType

# A broker's id, unique in the cluster, >= 0.
BrokerId = NewType("BrokerId", int)
# A broker registration's epoch: the metadata offset of its RegisterBrokerRecord.
BrokerEpoch = NewType("BrokerEpoch", int)
# A topic's id: a UUID string, new for each incarnation of a name.
TopicId = NewType("TopicId", str)
# A partition's index in its topic, 0-based.
PartitionId = NewType("PartitionId", int)
# Bumped on every leader change of a partition.
LeaderEpoch = NewType("LeaderEpoch", int)
# Bumped on every change of a partition (leader or ISR).
PartitionEpoch = NewType("PartitionEpoch", int)
# A position in the metadata log.
MetadataOffset = NewType("MetadataOffset", int)
# The Raft term of the controller that wrote a batch.
ControllerEpoch = NewType("ControllerEpoch", int)
# A producer id handed out in blocks for idempotent producers.
ProducerId = NewType("ProducerId", int)

# `leader` of a partition that has no leader (offline).
NO_LEADER = BrokerId(-1)
