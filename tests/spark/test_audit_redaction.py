"""The audit's record JSON shows who set whose SCRAM credential, never the salt or the keys."""

from __future__ import annotations

import json

from kanal.spark.metadata_rows import record_json
from kanal.v1 import metadata_pb2


def test_scram_credential_records_are_shown_without_their_secrets():
    record = metadata_pb2.MetadataRecord(
        principal="User:admin",
        user_scram_credential=metadata_pb2.UserScramCredentialRecord(
            name="alice",
            mechanism="SCRAM-SHA-512",
            salt=b"s" * 16,
            stored_key=b"k" * 64,
            server_key=b"v" * 64,
            iterations=8192,
        ),
    )
    assert json.loads(record_json(record, "user_scram_credential")) == {
        "name": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 8192}
    removal = metadata_pb2.MetadataRecord(
        remove_user_scram_credential=metadata_pb2.RemoveUserScramCredentialRecord(
            name="alice", mechanism="SCRAM-SHA-512"
        )
    )
    assert json.loads(record_json(removal, "remove_user_scram_credential")) == {
        "name": "alice", "mechanism": "SCRAM-SHA-512"}
