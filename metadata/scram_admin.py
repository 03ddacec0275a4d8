"""SCRAM credential decisions: AlterUserScramCredentials and DescribeUserScramCredentials (a read).

AlterUserScramCredentials, with Kafka's rules: the changes are grouped by user and each user's changes
succeed or fail together (INVALID_REQUEST naming the problem, and no record for that user): a user name
that is empty or has control characters, an unknown mechanism, iterations outside 4096..16384, a salt
outside 16..64 bytes, a salted password of the wrong length for the mechanism's hash, the same
(user, mechanism) named twice, or a deletion of a credential the user does not have. An upsertion writes
a UserScramCredentialRecord (StoredKey and ServerKey made from the salted password here: the password
and the salted password are never written), a deletion a RemoveUserScramCredentialRecord. Records carry
the caller's principal, so `kanal audit` shows who changed whose credentials.

DescribeUserScramCredentials: mechanisms and iterations per user, never salts or keys; a named user
without credentials is INVALID_REQUEST in its result.
"""

from __future__ import annotations

import hashlib

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.image import MetadataImage
from kanal.security.scram import (
    SALT_BYTES_MAX,
    SALT_BYTES_MIN,
    check_iterations,
    check_mechanism,
    check_user_name,
    credential_from_salted,
)
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

# One item of an AlterUserScramCredentials request: a deletion or an upsertion of a user's credential.
ScramChange = admin_pb2.ScramCredentialDeletion | admin_pb2.ScramCredentialUpsertion


def decide_alter_user_scram_credentials(
    image: MetadataImage,
    request: admin_pb2.AlterUserScramCredentialsRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[admin_pb2.AlterUserScramCredentialsResponse]:
    stamp = Stamp(now_ms, principal, request_id)
    by_user: dict[str, list[ScramChange]] = {}
    for change in [*request.deletions, *request.upsertions]:
        by_user.setdefault(change.name, []).append(change)
    records: list[metadata_pb2.MetadataRecord] = []
    results = []
    for user in sorted(by_user):
        try:
            user_records = _user_records(image, stamp, user, by_user[user])
        except KanalError as exc:
            results.append(admin_pb2.AlterUserScramCredentialsResponse.Result(
                user=user, error=exc.code, error_message=exc.message))
            continue
        results.append(admin_pb2.AlterUserScramCredentialsResponse.Result(user=user))
        records.extend(user_records)
    return Decision(records, admin_pb2.AlterUserScramCredentialsResponse(results=results))


def _user_records(
    image: MetadataImage, stamp: Stamp, user: str, changes: list[ScramChange]
) -> list[metadata_pb2.MetadataRecord]:
    check_user_name(user)
    current = image.scram_credentials.get(user, {})
    seen: set[str] = set()
    records = []
    for change in changes:
        hash_name = check_mechanism(change.mechanism)
        if change.mechanism in seen:
            raise KanalError(ErrorCode.INVALID_REQUEST,
                             f"{change.mechanism} of user {user!r} is named more than once in one request")
        seen.add(change.mechanism)
        if isinstance(change, admin_pb2.ScramCredentialDeletion):
            if change.mechanism not in current:
                raise KanalError(
                    ErrorCode.INVALID_REQUEST, f"user {user!r} has no {change.mechanism} credential"
                )
            records.append(stamp.record(remove_user_scram_credential=metadata_pb2.RemoveUserScramCredentialRecord(
                name=user, mechanism=change.mechanism)))
            continue
        check_iterations(change.iterations)
        if not SALT_BYTES_MIN <= len(change.salt) <= SALT_BYTES_MAX:
            raise KanalError(
                ErrorCode.INVALID_REQUEST,
                f"the salt must be {SALT_BYTES_MIN}..{SALT_BYTES_MAX} bytes, got {len(change.salt)}",
            )
        if len(change.salted_password) != hashlib.new(hash_name).digest_size:
            raise KanalError(
                ErrorCode.INVALID_REQUEST,
                f"a {change.mechanism} salted password is {hashlib.new(hash_name).digest_size} bytes, "
                f"got {len(change.salted_password)}",
            )
        c = credential_from_salted(change.mechanism, change.salt, change.iterations, change.salted_password)
        records.append(stamp.record(user_scram_credential=metadata_pb2.UserScramCredentialRecord(
            name=user, mechanism=c.mechanism, salt=c.salt, stored_key=c.stored_key, server_key=c.server_key,
            iterations=c.iterations)))
    return records


def describe_user_scram_credentials(
    image: MetadataImage, request: admin_pb2.DescribeUserScramCredentialsRequest
) -> admin_pb2.DescribeUserScramCredentialsResponse:
    Result = admin_pb2.DescribeUserScramCredentialsResponse.Result
    Info = admin_pb2.DescribeUserScramCredentialsResponse.CredentialInfo
    results = []
    for user in sorted(set(request.users) if request.users else image.scram_credentials):
        credentials = image.scram_credentials.get(user)
        if not credentials:
            results.append(Result(user=user, error=ErrorCode.INVALID_REQUEST,
                                  error_message=f"user {user!r} has no SCRAM credentials"))
            continue
        results.append(Result(user=user, credentials=[Info(mechanism=m, iterations=credentials[m].iterations)
                                                      for m in sorted(credentials)]))
    return admin_pb2.DescribeUserScramCredentialsResponse(results=results)
