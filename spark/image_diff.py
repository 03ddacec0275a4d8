"""ImageDiff: two metadata images compared through their canonical form, the metadata snapshot.

kanal.metadata.image_to_snapshot writes an image as the records that rebuild it, deterministically (sorted
by broker id, topic name, key; every record stamped alike), so two images are equal exactly when their
snapshots are, and the records present on one side only say what differs in the log's own vocabulary
("partition orders-2 leader 1 epoch 3" rather than an ad-hoc field list).
"""

from __future__ import annotations

from google.protobuf import json_format

from kanal.metadata import MetadataImage, image_to_snapshot
from kanal.v1 import metadata_pb2


def canonical_lines(image: MetadataImage) -> list[str]:
    """The image as one line of JSON per snapshot record, plus its offset and controller epoch."""
    snapshot = image_to_snapshot(image)
    lines = [f'{{"next_offset": {snapshot.next_offset}, "controller_epoch": {snapshot.controller_epoch}}}']
    lines += [_line(r) for r in snapshot.records]
    return lines


def _line(record: metadata_pb2.MetadataRecord) -> str:
    kind = record.WhichOneof("record")
    body = json_format.MessageToJson(getattr(record, kind), indent=None, preserving_proto_field_name=True,
                                     sort_keys=True)
    return f'{{"{kind}": {body}}}'


def diff_images(ours: MetadataImage, theirs: MetadataImage, our_name: str, their_name: str) -> list[str]:
    """What differs, one line per canonical record present on one side only; empty when equal."""
    a, b = canonical_lines(ours), canonical_lines(theirs)
    if a == b:
        return []
    set_a, set_b = set(a), set(b)
    only_a = [line for line in a if line not in set_b]
    only_b = [line for line in b if line not in set_a]
    return [f"only in {our_name}: {line}" for line in only_a] + [
        f"only in {their_name}: {line}" for line in only_b
    ]
