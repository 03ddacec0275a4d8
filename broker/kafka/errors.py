"""kanal's ErrorCode as Kafka's error codes.

kanal's codes carry Kafka's names (errors.proto) but their own numbers, so the Kafka listener translates by
name; the few kanal codes Kafka has no name for map to the nearest Kafka error a client acts on the same
way. A test holds every kanal code to a Kafka code here."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as KafkaErrorCode

from kanal.v1.error import ErrorCode

_KAFKA_BY_NAME = {code.name.upper(): int(code) for code in KafkaErrorCode}
_NEAREST = {
    "INVALID_TOPIC": "INVALID_TOPIC_EXCEPTION",
    "STORAGE_ERROR": "KAFKA_STORAGE_ERROR",
    "AUTHENTICATION_FAILED": "SASL_AUTHENTICATION_FAILED",
    "AUTHORIZATION_FAILED": "CLUSTER_AUTHORIZATION_FAILED",
    # The controller quorum has no leader right now: retriable, as NOT_CONTROLLER is to Kafka's clients.
    "CONTROLLER_NOT_AVAILABLE": "NOT_CONTROLLER",
    "INVALID_QUOTA": "INVALID_REQUEST",
    "INVALID_QUORUM_CHANGE": "INVALID_REQUEST",
    "BROKER_HOLDS_REPLICAS": "INVALID_REQUEST",
    # The coordinator aborted the transaction (timeout): the producer must abort and begin another.
    "TRANSACTION_ABORTED": "TRANSACTION_ABORTABLE",
    "UNKNOWN_BROKER": "BROKER_ID_NOT_REGISTERED",
    # A controller write repeated after an attempt that did take effect (errors.proto): Kafka has no code
    # for "done already"; its clients retrying a create get TOPIC_ALREADY_EXISTS, a client error as well.
    "DUPLICATE_REQUEST": "INVALID_REQUEST",
    # Replication-only or command-line-only codes: never sent to a Kafka client on purpose.
    "INVALID_TRUNCATION": "UNKNOWN_SERVER_ERROR",
    "NO_CLUSTER": "UNKNOWN_SERVER_ERROR",
    "MISSING_DEPENDENCY": "UNKNOWN_SERVER_ERROR",
    # The schema registry's codes answer its REST and gRPC calls, never a Kafka request (a produced record a
    # topic's schema validation refuses is INVALID_RECORD, as Confluent Server answers).
    **dict.fromkeys(("INVALID_SCHEMA", "INCOMPATIBLE_SCHEMA", "SCHEMA_NOT_FOUND", "SUBJECT_NOT_FOUND",
                     "SCHEMA_VERSION_NOT_FOUND", "NOT_SOFT_DELETED", "SCHEMA_REFERENCED",
                     "REGISTRY_MODE_FORBIDS"), "INVALID_REQUEST"),
}
KAFKA_CODE = {int(code): _KAFKA_BY_NAME[_NEAREST.get(name, name)] for name, code in ErrorCode.items()}

NONE = 0
UNKNOWN_SERVER_ERROR = _KAFKA_BY_NAME["UNKNOWN_SERVER_ERROR"]
CORRUPT_MESSAGE = _KAFKA_BY_NAME["CORRUPT_MESSAGE"]
UNKNOWN_TOPIC_OR_PARTITION = _KAFKA_BY_NAME["UNKNOWN_TOPIC_OR_PARTITION"]
UNSUPPORTED_VERSION = _KAFKA_BY_NAME["UNSUPPORTED_VERSION"]
INVALID_REQUEST = _KAFKA_BY_NAME["INVALID_REQUEST"]
UNSUPPORTED_SASL_MECHANISM = _KAFKA_BY_NAME["UNSUPPORTED_SASL_MECHANISM"]
ILLEGAL_SASL_STATE = _KAFKA_BY_NAME["ILLEGAL_SASL_STATE"]
SASL_AUTHENTICATION_FAILED = _KAFKA_BY_NAME["SASL_AUTHENTICATION_FAILED"]
INCONSISTENT_GROUP_PROTOCOL = _KAFKA_BY_NAME["INCONSISTENT_GROUP_PROTOCOL"]
COORDINATOR_NOT_AVAILABLE = _KAFKA_BY_NAME["COORDINATOR_NOT_AVAILABLE"]
NOT_COORDINATOR = _KAFKA_BY_NAME["NOT_COORDINATOR"]
LEADER_NOT_AVAILABLE = _KAFKA_BY_NAME["LEADER_NOT_AVAILABLE"]
INVALID_RECORD = _KAFKA_BY_NAME["INVALID_RECORD"]
FETCH_SESSION_ID_NOT_FOUND = _KAFKA_BY_NAME["FETCH_SESSION_ID_NOT_FOUND"]


def kafka_code(code: int) -> int:
    """The Kafka error code of kanal's `code` (UNKNOWN_SERVER_ERROR for a number kanal does not define)."""
    return KAFKA_CODE.get(int(code), UNKNOWN_SERVER_ERROR)
