"""MetadataFiles: the cluster's metadata image as the controllers' log files under a directory say it is,
in plain Python, for planning (copy_plan.py needs each partition's topic id and ISR before Spark reads).

The log is read with range_reader.py from the metadata plan (the longest controller copy, the others
standing in where it is damaged) and applied batch by batch with kanal.metadata.apply_batch, the one
apply of controllers, brokers and the audit's replay. A log whose start is past 0 begins from its
snapshot file (replay_start.py). Offsets no copy holds, or a batch that does not apply, stop the image
there: it is returned with a note saying where, so planning can go on with what is known.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf.message import DecodeError

from kanal.metadata import MetadataImage, MetadataInvariantError, apply_batch, image_from_snapshot
from kanal.metadata.log_codec import decode_entry
from kanal.spark.copy_plan import metadata_plan, read_items
from kanal.spark.range_reader import Clipped, read_item
from kanal.spark.replay_start import replay_start
from kanal.v1.error import KanalError

_WHOLE_LOG = 1 << 62  # one item for the whole log: planning reads it in one pass


def image_from_files(root: Path) -> tuple[MetadataImage | None, str]:
    """(the image, a note when it stops short of the log end); (None, "") when no metadata log is here."""
    try:
        plan = metadata_plan(root)
    except FileNotFoundError:
        return None, ""
    reference = plan.copy(plan.plans[0].primary)
    start = replay_start(reference) if reference is not None else None
    if start is not None and not start.replayable:
        return None, (
            f"the metadata log under {root} starts at offset {start.log_start_offset} with no readable "
            f"snapshot: no image, so the in-sync replicas are unknown"
        )
    image = MetadataImage()
    if start is not None and start.snapshot is not None:
        image = image_from_snapshot(start.snapshot.snapshot)
    first = start.offset if start is not None else 0
    for item in read_items(plan, _WHOLE_LOG):
        for got in read_item(item):
            if not isinstance(got, Clipped):
                if got.lost:
                    return image, f"the metadata image stops at offset {image.next_offset}: {got.text}"
                continue
            if got.entry.last_offset < first:
                continue
            try:
                batch = decode_entry(got.entry.batch).metadata_batch()
                apply_batch(image, batch, got.entry.base_offset)
            except (KanalError, MetadataInvariantError, DecodeError, ValueError) as exc:
                return image, f"the metadata image stops at offset {got.entry.base_offset}: {exc}"
    return image, ""
