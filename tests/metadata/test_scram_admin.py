"""AlterUserScramCredentials / DescribeUserScramCredentials decisions, their records in the image, and the
snapshot of the credentials."""

from __future__ import annotations

import pytest

from kanal.metadata import (
    MetadataImage,
    MetadataInvariantError,
    apply,
    decide_alter_user_scram_credentials,
    describe_user_scram_credentials,
    image_from_snapshot,
    image_to_snapshot,
)
from kanal.security.scram import salted_password, verify_password
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

SALT = b"0123456789abcdef"


def upsert(name, mechanism="SCRAM-SHA-256", password="pw", iterations=4096, salt=SALT):
    hash_name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}.get(mechanism, "sha256")
    return admin_pb2.ScramCredentialUpsertion(
        name=name,
        mechanism=mechanism,
        iterations=iterations,
        salt=salt,
        salted_password=salted_password(hash_name, password, salt, iterations),
    )


def delete(name, mechanism="SCRAM-SHA-256"):
    return admin_pb2.ScramCredentialDeletion(name=name, mechanism=mechanism)


def alter(h, upsertions=(), deletions=(), principal="User:admin"):
    request = admin_pb2.AlterUserScramCredentialsRequest(
        upsertions=list(upsertions), deletions=list(deletions)
    )
    return decide_alter_user_scram_credentials(h.image, request, **h.ctx(principal))


def errors(response):
    return {r.user: r.error for r in response.results}


def test_create_change_and_delete_credentials(harness) -> None:
    h = harness
    decision = alter(h, [upsert("alice"), upsert("alice", "SCRAM-SHA-512"), upsert("bob", password="b")])
    assert errors(decision.reply) == {"alice": ErrorCode.NONE, "bob": ErrorCode.NONE}
    # The records carry the keys and the caller's principal, never the password or the salted password.
    for record in decision.records:
        assert record.principal == "User:admin"
        body = record.user_scram_credential
        assert b"pw" not in body.SerializeToString().replace(SALT, b"")
        assert body.stored_key and body.server_key and body.iterations == 4096
    h.commit(decision)
    assert sorted(h.image.scram_credentials) == ["alice", "bob"]
    assert verify_password(h.image.scram_credentials["alice"]["SCRAM-SHA-512"], "pw")
    h.commit(alter(h, [upsert("alice", password="new")]))  # a new password replaces the old one
    assert verify_password(h.image.scram_credentials["alice"]["SCRAM-SHA-256"], "new")
    assert not verify_password(h.image.scram_credentials["alice"]["SCRAM-SHA-256"], "pw")
    h.commit(alter(h, deletions=[delete("alice"), delete("alice", "SCRAM-SHA-512")]))
    assert sorted(h.image.scram_credentials) == ["bob"]  # a user with no credential left is gone


def test_a_users_changes_fail_together_and_others_go_ahead(harness) -> None:
    h = harness
    decision = alter(h, [upsert("alice"), upsert("alice", "SCRAM-SHA-1"), upsert("bob")])
    assert errors(decision.reply) == {"alice": ErrorCode.INVALID_REQUEST, "bob": ErrorCode.NONE}
    assert [r.user_scram_credential.name for r in decision.records] == ["bob"]


@pytest.mark.parametrize(("change", "why"), [
    (upsert("alice", iterations=4095), "iterations"),
    (upsert("alice", iterations=16385), "iterations"),
    (upsert("alice", salt=b"short"), "salt"),
    (admin_pb2.ScramCredentialUpsertion(name="alice", mechanism="SCRAM-SHA-512", iterations=4096, salt=SALT,
                                        salted_password=b"x" * 32), "salted password"),
    (upsert(""), "user name"),
    (upsert("a\x00b"), "user name"),
])
def test_bad_upsertions_are_refused(harness, change, why) -> None:
    decision = alter(harness, [change])
    assert decision.records == []
    assert decision.reply.results[0].error == ErrorCode.INVALID_REQUEST, why


def test_deleting_a_missing_credential_and_naming_one_twice_are_refused(harness) -> None:
    h = harness
    assert errors(alter(h, deletions=[delete("ghost")]).reply) == {"ghost": ErrorCode.INVALID_REQUEST}
    h.commit(alter(h, [upsert("alice")]))
    twice = alter(h, [upsert("alice")], [delete("alice")])
    assert errors(twice.reply) == {"alice": ErrorCode.INVALID_REQUEST} and twice.records == []


def test_describe_shows_mechanisms_and_iterations_only(harness) -> None:
    h = harness
    h.commit(alter(h, [upsert("alice"), upsert("alice", "SCRAM-SHA-512", iterations=8192), upsert("bob")]))
    every = describe_user_scram_credentials(h.image, admin_pb2.DescribeUserScramCredentialsRequest())
    assert [(r.user, [(c.mechanism, c.iterations) for c in r.credentials]) for r in every.results] == [
        ("alice", [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)]), ("bob", [("SCRAM-SHA-256", 4096)])]
    named = describe_user_scram_credentials(h.image, admin_pb2.DescribeUserScramCredentialsRequest(
        users=["bob", "ghost"]))
    assert [(r.user, r.error) for r in named.results] == [
        ("bob", ErrorCode.NONE),
        ("ghost", ErrorCode.INVALID_REQUEST),
    ]


def test_credentials_survive_a_snapshot(harness) -> None:
    h = harness
    h.commit(alter(h, [upsert("alice"), upsert("alice", "SCRAM-SHA-512"), upsert("bob")]))
    rebuilt = image_from_snapshot(image_to_snapshot(h.image))
    assert rebuilt.scram_credentials == h.image.scram_credentials


def test_apply_refuses_records_that_do_not_fit() -> None:
    image = MetadataImage()
    with pytest.raises(MetadataInvariantError):
        apply(
            image,
            metadata_pb2.MetadataRecord(
                remove_user_scram_credential=metadata_pb2.RemoveUserScramCredentialRecord(
                    name="alice", mechanism="SCRAM-SHA-256"
                )
            ),
        )
    with pytest.raises(MetadataInvariantError):
        apply(
            image,
            metadata_pb2.MetadataRecord(
                user_scram_credential=metadata_pb2.UserScramCredentialRecord(
                    name="alice",
                    mechanism="SCRAM-SHA-256",
                    iterations=10,
                    salt=SALT,
                    stored_key=b"k",
                    server_key=b"k",
                )
            ),
        )
    assert image.scram_credentials == {}
