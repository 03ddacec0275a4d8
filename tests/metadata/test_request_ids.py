"""The request ids the image remembers (metadata/request_ids.py): a decision's id is known once its batch
is applied (not while only decided), a repeat is refused without a change, the memory is bounded and
copies with the image."""

from __future__ import annotations

import pytest

from kanal.metadata import decide_create_topics, decide_delete_topics, request_ids
from kanal.metadata.request_ids import refuse_repeated
from kanal.v1 import admin_pb2
from kanal.v1.error import ErrorCode, KanalError


def _create(h, name: str, request_id: str):
    ctx = {**h.ctx(), "request_id": request_id}
    request = admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
        name=name, partitions=1, replication_factor=1)])
    return decide_create_topics(h.image, request, rng=h.rng, **ctx)


def test_an_applied_request_id_is_refused_again_and_a_new_one_is_not(cluster3) -> None:
    h = cluster3
    decision = _create(h, "t", "call-1")
    refuse_repeated(h.image, "call-1")  # decided, not applied: not known yet
    h.commit(decision)
    offset = h.image.next_offset - 1
    assert h.image.recent_request_ids["call-1"] == offset
    h.commit(decide_delete_topics(h.image, admin_pb2.DeleteTopicsRequest(names=["t"]), **h.ctx()))
    with pytest.raises(KanalError) as info:
        refuse_repeated(h.image, "call-1")
    assert info.value.code == ErrorCode.DUPLICATE_REQUEST
    assert f"metadata offset {offset}" in info.value.message
    refuse_repeated(h.image, "call-2")
    copy = h.image.copy()
    copy.recent_request_ids.clear()
    assert "call-1" in h.image.recent_request_ids  # the copy's memory is its own


def test_the_memory_keeps_the_newest_ids_up_to_its_bound(cluster3, monkeypatch) -> None:
    h = cluster3
    monkeypatch.setattr(request_ids, "REQUEST_IDS_REMEMBERED_MAX", 3)
    for n in range(5):
        h.commit(_create(h, f"t{n}", f"call-{n}"))
    assert list(h.image.recent_request_ids) == ["call-2", "call-3", "call-4"]
    refuse_repeated(h.image, "call-0")  # forgotten: the bound is by count
