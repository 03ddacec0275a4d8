"""The error a broken rule of the metadata image raises.

A record that does not fit the image (a PartitionChange for an unknown partition, a leader outside the
ISR, ...) means a decision was wrong or the log is damaged. Applying it anyway would let every replica
of the image drift silently, so `apply` raises this instead; nobody is meant to catch it except to stop
the process (or to fail a test). It is deliberately not a KanalError: those are expected failures that
end up in replies.
"""

from __future__ import annotations


class MetadataInvariantError(Exception):
    """A metadata record breaks an invariant of the image; the image is left as it was."""
