"""Controller quorum changes, the pure part: which changes are allowed, the record, apply and snapshots."""

from __future__ import annotations

import pytest

from kanal.metadata import MetadataInvariantError, apply, image_from_snapshot, image_to_snapshot
from kanal.metadata.image import QuorumVoter
from kanal.metadata.quorum_voters import (
    QuorumView,
    change_in_progress,
    decide_add_voter,
    decide_remove_voter,
    has_live_majority,
    voters_of,
)
from kanal.v1 import metadata_pb2, operations_pb2
from kanal.v1.error import ErrorCode

CONFIGURED = tuple(QuorumVoter(i, f"127.0.0.1:97{i:02d}", f"127.0.0.1:96{i:02d}") for i in (1, 2, 3))
MEMBERS = frozenset(v.raft_endpoint for v in CONFIGURED)


def view(live=(1, 2, 3), members=MEMBERS, active=1) -> QuorumView:
    return QuorumView(CONFIGURED, frozenset(live), frozenset(members), active)


def add(harness, controller_id=4, raft="127.0.0.1:9704", grpc="127.0.0.1:9604", live=True, live_ids=(1, 2, 3),
        **kw):
    request = operations_pb2.AddVoterRequest(
        controller_id=controller_id, raft_endpoint=raft, grpc_endpoint=grpc
    )
    return decide_add_voter(harness.image, request, view=view(live=live_ids, **kw), candidate_live=live,
                            **harness.ctx())


def remove(harness, controller_id, **kw):
    request = operations_pb2.RemoveVoterRequest(controller_id=controller_id)
    return decide_remove_voter(harness.image, request, view=view(**kw), **harness.ctx())


def refused(decision, fragment: str) -> None:
    assert decision.records == []
    assert decision.reply.error == ErrorCode.INVALID_QUORUM_CHANGE
    assert fragment in decision.reply.error_message, decision.reply.error_message


def test_majority_rule() -> None:
    assert has_live_majority([1, 2, 3], {1, 2})
    assert not has_live_majority([1, 2, 3], {1})
    assert not has_live_majority([1, 2, 3, 4], {1, 2})
    assert has_live_majority([1, 2, 3, 4], {1, 2, 4})
    assert has_live_majority([1], {1})


def test_voters_are_the_configured_ones_until_a_record_names_them(harness) -> None:
    assert voters_of(harness.image, CONFIGURED) == CONFIGURED
    harness.commit(add(harness))
    after = voters_of(harness.image, CONFIGURED)
    assert [v.controller_id for v in after] == [1, 2, 3, 4]
    assert after[3] == QuorumVoter(4, "127.0.0.1:9704", "127.0.0.1:9604")


def test_add_writes_the_whole_new_set(harness) -> None:
    decision = add(harness)
    assert decision.reply.error == ErrorCode.NONE
    assert list(decision.reply.voter_ids) == [1, 2, 3, 4]
    (record,) = decision.records
    assert [v.controller_id for v in record.voter_set.voters] == [1, 2, 3, 4]
    assert record.principal and record.request_id


def test_remove_writes_the_smaller_set(harness) -> None:
    decision = remove(harness, 2)
    assert decision.reply.error == ErrorCode.NONE
    harness.commit(decision)
    assert [v.controller_id for v in harness.image.voters] == [1, 3]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"controller_id": 2}, "is a voter already"),
        ({"raft": "127.0.0.1:9702"}, "Raft endpoints must be distinct"),
        ({"grpc": "127.0.0.1:9603"}, "gRPC endpoints must be distinct"),
        ({"raft": ""}, "needs an id >= 0"),
        ({"controller_id": -1}, "needs an id >= 0"),
        ({"live": False}, "did not answer"),
        ({"live_ids": (1,)}, "not a majority"),  # one live of three: with a live 4th, 2 of 4
        ({"members": MEMBERS | {"127.0.0.1:9709"}}, "in progress"),
    ],
)
def test_bad_adds_are_refused_with_no_record(harness, kwargs, fragment) -> None:
    refused(add(harness, **kwargs), fragment)


@pytest.mark.parametrize(
    "controller_id, kwargs, fragment",
    [
        (7, {}, "is not a voter"),
        (1, {}, "is the active controller"),
        (2, {"live": (1, 2)}, "not a majority"),  # 1 and 3 left, only 1 live
        (3, {"members": MEMBERS - {"127.0.0.1:9703"}}, "in progress"),
    ],
)
def test_bad_removals_are_refused_with_no_record(harness, controller_id, kwargs, fragment) -> None:
    refused(remove(harness, controller_id, **kwargs), fragment)


def test_a_second_change_is_refused_until_the_membership_follows(harness) -> None:
    harness.commit(add(harness))
    # The record is committed, pysyncobj's membership still lacks the new voter: in progress.
    refused(remove(harness, 3), "in progress")
    refused(add(harness, 5, "127.0.0.1:9705", "127.0.0.1:9605"), "in progress")
    # Once the membership matches, the next change goes through.
    decision = remove(harness, 3, members=MEMBERS | {"127.0.0.1:9704"}, live=(1, 2, 4))
    assert decision.reply.error == ErrorCode.NONE
    assert list(decision.reply.voter_ids) == [1, 2, 4]


def test_the_last_voter_is_never_removed(harness) -> None:
    harness.commit(remove(harness, 3))
    members = MEMBERS - {"127.0.0.1:9703"}
    harness.commit(remove(harness, 2, members=members, live=(1, 2)))
    refused(remove(harness, 1, members={"127.0.0.1:9701"}, live=(1,), active=-1), "last voter")


def test_change_in_progress_compares_raft_endpoints() -> None:
    assert change_in_progress(CONFIGURED, MEMBERS) is None
    assert "in progress" in (change_in_progress(CONFIGURED, MEMBERS - {"127.0.0.1:9701"}) or "")


def test_voter_set_survives_a_snapshot(harness) -> None:
    harness.commit(add(harness))
    again = image_from_snapshot(image_to_snapshot(harness.image))
    assert again.voters == harness.image.voters
    assert again == harness.image


def test_a_malformed_voter_set_record_does_not_apply(harness) -> None:
    twice = metadata_pb2.QuorumVoter(controller_id=1, raft_endpoint="a:1", grpc_endpoint="a:2")
    for voters in ([], [twice, twice]):
        record = metadata_pb2.MetadataRecord(voter_set=metadata_pb2.VoterSetRecord(voters=voters))
        with pytest.raises(MetadataInvariantError):
            apply(harness.image, record)
    assert harness.image.voters == ()


def test_removing_a_voter_drops_its_disk_identity_so_it_can_come_back_on_a_new_disk(harness) -> None:
    """Issue 40: a controller that lost its volume refused forever, even after `kanal quorum remove`."""
    from kanal.metadata import decide_register_controller
    from kanal.v1 import controller_pb2

    def register(directory: str):
        return harness.commit(decide_register_controller(
            harness.image, controller_pb2.RegisterControllerRequest(controller_id=2, directory_id=directory),
            **harness.ctx()))

    assert register("a" * 32).error == ErrorCode.NONE
    assert register("b" * 32).error == ErrorCode.INVALID_REQUEST  # the empty disk is refused
    decision = remove(harness, 2, live=(1, 3))
    kinds = [r.WhichOneof("record") for r in decision.records]
    assert kinds == ["voter_set", "controller_registration"]
    harness.commit(decision)
    assert 2 not in harness.image.controller_directories
    # Back on the new disk: recorded, then added again (the add itself is decide_add_voter's).
    assert register("b" * 32).error == ErrorCode.NONE
    assert harness.image.controller_directories[2] == "b" * 32
    assert image_from_snapshot(image_to_snapshot(harness.image)).controller_directories == {2: "b" * 32}


def test_a_registration_removal_for_a_voter_or_another_directory_does_not_apply(harness) -> None:
    harness.image.controller_directories[2] = "a" * 32
    other = metadata_pb2.ControllerRegistrationRecord(controller_id=2, directory_id="c" * 32, removed=True)
    with pytest.raises(MetadataInvariantError):
        apply(harness.image, metadata_pb2.MetadataRecord(controller_registration=other))
    harness.image.voters = CONFIGURED
    record = metadata_pb2.MetadataRecord(controller_registration=metadata_pb2.ControllerRegistrationRecord(
        controller_id=2, directory_id="a" * 32, removed=True))
    with pytest.raises(MetadataInvariantError, match="still a voter"):
        apply(harness.image, record)
