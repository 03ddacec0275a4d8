"""AlterClientQuotas and DescribeClientQuotas decisions."""

from __future__ import annotations

import math

from kanal.metadata import decide_alter_client_quotas, describe_client_quotas
from kanal.v1 import admin_pb2
from kanal.v1.error import ErrorCode

Entry = admin_pb2.AlterClientQuotasRequest.Entry


def entry(entity_type, name, *values) -> Entry:
    return Entry(
        entity=admin_pb2.QuotaEntity(entity_type=entity_type, entity_name=name),
        values=[admin_pb2.QuotaValue(key=k, value=v, remove=rm) for k, v, rm in values],
    )


def alter(h, *entries, validate_only=False):
    return decide_alter_client_quotas(
        h.image, admin_pb2.AlterClientQuotasRequest(entries=entries, validate_only=validate_only), **h.ctx()
    )


def test_set_change_and_remove_quotas(harness) -> None:
    h = harness
    h.commit(
        alter(
            h,
            entry("user", "alice", ("producer_byte_rate", 1e6, False), ("request_percentage", 150, False)),
            entry("client-id", "", ("consumer_byte_rate", 5e5, False)),
        )
    )
    assert h.image.client_quotas == {
        ("user", "alice"): {"producer_byte_rate": 1e6, "request_percentage": 150},
        ("client-id", ""): {"consumer_byte_rate": 5e5},
    }
    decision = alter(
        h,
        entry(
            "user",
            "alice",
            ("producer_byte_rate", 1e6, False),
            ("request_percentage", 0, True),
            ("consumer_byte_rate", 0, True),
        ),
    )
    # Same value again and removing an unset quota change nothing, so only one record.
    assert [(r.client_quota.key, r.client_quota.HasField("value")) for r in decision.records] == [
        ("request_percentage", False)
    ]
    h.commit(decision)
    assert h.image.client_quotas[("user", "alice")] == {"producer_byte_rate": 1e6}


def test_bad_entries_fail_whole_and_alone(harness) -> None:
    h = harness
    decision = alter(
        h,
        entry("user", "ok", ("producer_byte_rate", 10, False)),
        entry("group", "g", ("producer_byte_rate", 10, False)),
        entry("user", "bob", ("producer_byte_rate", 10, False), ("fetch_rate", 1, False)),
        entry("user", "carol", ("producer_byte_rate", 10, False), ("consumer_byte_rate", 0, False)),
        entry("user", "dave", ("producer_byte_rate", -1, False)),
        entry("user", "erin", ("producer_byte_rate", math.nan, False)),
        entry("user", "frank", ("producer_byte_rate", 1, False), ("producer_byte_rate", 2, False)),
        entry("user", "ok", ("consumer_byte_rate", 10, False)),
    )
    assert [r.error for r in decision.reply.results] == [ErrorCode.NONE] + [ErrorCode.INVALID_QUOTA] * 6 + [
        ErrorCode.INVALID_REQUEST
    ]
    assert "fetch_rate" in decision.reply.results[2].error_message
    assert "> 0" in decision.reply.results[3].error_message
    assert [(r.client_quota.entity_name, r.client_quota.key) for r in decision.records] == [
        ("ok", "producer_byte_rate")
    ]


def test_validate_only_writes_nothing(harness) -> None:
    decision = alter(harness, entry("user", "a", ("producer_byte_rate", 1, False)), validate_only=True)
    assert decision.records == [] and decision.reply.results[0].error == ErrorCode.NONE


def test_describe_filters_by_type_and_name(harness) -> None:
    h = harness
    h.commit(
        alter(
            h,
            entry("user", "b", ("producer_byte_rate", 2, False)),
            entry("user", "a", ("consumer_byte_rate", 1, False), ("producer_byte_rate", 3, False)),
            entry("client-id", "c", ("request_percentage", 50, False)),
        )
    )

    def names(entity_type="", entity_name=""):
        reply = describe_client_quotas(
            h.image, admin_pb2.DescribeClientQuotasRequest(entity_type=entity_type, entity_name=entity_name)
        )
        return [
            (e.entity.entity_type, e.entity.entity_name, [(v.key, v.value) for v in e.values])
            for e in reply.entries
        ]

    assert names() == [
        ("client-id", "c", [("request_percentage", 50)]),
        ("user", "a", [("consumer_byte_rate", 1), ("producer_byte_rate", 3)]),
        ("user", "b", [("producer_byte_rate", 2)]),
    ]
    assert [n for _, n, _ in names("user")] == ["a", "b"]
    assert [n for _, n, _ in names("user", "b")] == ["b"]
    assert names("client-id", "zzz") == []


def composite(user, client_id, *values) -> Entry:
    e = entry("user", user, *values)
    e.entity.client_id = client_id
    return e


def test_illegal_names_and_misplaced_client_ids_are_refused_and_change_nothing(harness) -> None:
    h = harness
    bad = [
        entry(
            "client-id", "caf\u00e9", ("producer_byte_rate", 1, False)
        ),  # not ASCII: cannot travel as metadata
        entry("client-id", "a\nb", ("producer_byte_rate", 1, False)),
        entry("client-id", "x" * 256, ("producer_byte_rate", 1, False)),
        entry("user", "bad\x00user", ("producer_byte_rate", 1, False)),
        entry("user", "u" * 256, ("producer_byte_rate", 1, False)),
        composite("alice", "caf\u00e9", ("producer_byte_rate", 1, False)),
    ]
    misplaced = entry("client-id", "app", ("producer_byte_rate", 1, False))
    misplaced.entity.client_id = "app"
    decision = alter(h, *bad, misplaced)
    assert [r.error for r in decision.reply.results] == [ErrorCode.INVALID_QUOTA] * 7
    assert decision.records == []
    assert "printable ASCII" in decision.reply.results[0].error_message
    assert "maximum is 255" in decision.reply.results[2].error_message
    assert "only a user entity takes a client id" in decision.reply.results[6].error_message
    # Legal names in other scripts are fine for users; the longest legal names are fine for both.
    h.commit(alter(h, entry("user", "Jos\u00e9", ("producer_byte_rate", 1, False)),
                   entry("client-id", "c" * 255, ("producer_byte_rate", 1, False))))
    assert set(h.image.client_quotas) == {("user", "Jos\u00e9"), ("client-id", "c" * 255)}


def test_user_client_id_entities_are_their_own_and_survive_a_snapshot(harness) -> None:
    from kanal.metadata.snapshot import image_from_snapshot, image_to_snapshot

    h = harness
    h.commit(alter(h, composite("alice", "app", ("producer_byte_rate", 5, False)),
                   composite("", "", ("consumer_byte_rate", 6, False)),
                   entry("user", "alice", ("producer_byte_rate", 7, False))))
    assert h.image.user_client_quotas == {("alice", "app"): {"producer_byte_rate": 5},
                                          ("", ""): {"consumer_byte_rate": 6}}
    assert h.image.client_quotas == {("user", "alice"): {"producer_byte_rate": 7}}
    reply = describe_client_quotas(h.image, admin_pb2.DescribeClientQuotasRequest(entity_type="user",
                                                                                  entity_name="alice"))
    assert [
        (e.entity.entity_name, e.entity.HasField("client_id"), e.entity.client_id) for e in reply.entries
    ] == [("alice", False, ""), ("alice", True, "app")]
    assert image_from_snapshot(image_to_snapshot(h.image)) == h.image
    h.commit(alter(h, composite("alice", "app", ("producer_byte_rate", 0, True))))
    assert h.image.user_client_quotas == {("", ""): {"consumer_byte_rate": 6}}
