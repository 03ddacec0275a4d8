"""Config resources: which topics and brokers have configs, and which keys and values they accept.

Topic resources are named by topic name and accept the keys of `topic_config.TOPIC_CONFIG_KEYS`.

Broker resources are named by broker id in decimal, or "" for the cluster-wide default. They accept the
same keys, as defaults for topics: the effective value of a key for a topic on broker b is the topic's
own value, else broker b's, else the cluster default's, else the built-in default. The controller itself
reads only the topic and cluster-default levels (for unclean.leader.election.enable: an election is not
a per-broker matter); brokers use all four levels for the logs they host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kanal.metadata.image import CLUSTER_DEFAULT_BROKER, MetadataImage
from kanal.metadata.topic_config import (
    TOPIC_CONFIG_KEYS,
    effective_topic_configs,
    parse_topic_config,
    read_stored_topic_config,
)
from kanal.v1.error import ErrorCode, KanalError


def check_broker_resource_name(name: str) -> None:
    """Raise INVALID_REQUEST unless `name` is "" (cluster default) or a broker id in canonical decimal."""
    if name == CLUSTER_DEFAULT_BROKER:
        return
    if not name.isdigit() or not name.isascii() or str(int(name)) != name:
        raise KanalError(
            ErrorCode.INVALID_REQUEST,
            f"broker config resource {name!r} is not a broker id in decimal (or '' for the cluster default)",
        )


def check_config_value(key: str, value: str) -> Any:
    """The typed value by the admission rule; INVALID_CONFIG for an unknown key or a bad value (both
    resource kinds). AlterConfigs and CreateTopics admit only what this admits."""
    return parse_topic_config(key, value)


def check_stored_config_value(key: str, value: str) -> Any:
    """The typed value of a ConfigRecord being replayed: what check_config_value admits, and what an older
    version admitted (topic_config.read_stored_topic_config), so an old metadata log still replays."""
    return read_stored_topic_config(key, value)


def check_config_key(key: str) -> None:
    """Raise INVALID_CONFIG for a key no resource accepts (DELETE of an unknown key is an error too)."""
    if key not in TOPIC_CONFIG_KEYS:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"unknown config key {key!r}")


def topic_config_texts(image: MetadataImage, topic_name: str, broker_id: int | None = None) -> dict[str, str]:
    """Config texts that apply to a topic: cluster default < broker `broker_id` (if given) < topic."""
    texts: dict[str, str] = dict(image.broker_configs.get(CLUSTER_DEFAULT_BROKER, {}))
    if broker_id is not None:
        texts.update(image.broker_configs.get(str(broker_id), {}))
    topic = image.topics.get(topic_name)
    if topic is not None:
        texts.update(topic.configs)
    return texts


def effective_topic_config(
    image: MetadataImage, topic_name: str, broker_id: int | None = None
) -> dict[str, Any]:
    """Typed value of every topic key for this topic (and broker, when given), defaults filled in."""
    return effective_topic_configs(topic_config_texts(image, topic_name, broker_id))


def unclean_election_enabled(topic_configs: Mapping[str, str], cluster_defaults: Mapping[str, str]) -> bool:
    """unclean.leader.election.enable for a topic: its own value, else the cluster default, else false."""
    key = "unclean.leader.election.enable"
    text = topic_configs.get(key, cluster_defaults.get(key))
    return (
        bool(read_stored_topic_config(key, text))
        if text is not None
        else bool(TOPIC_CONFIG_KEYS[key].default)
    )
