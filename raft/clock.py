"""The controller's clock: the one servers share (kanal.broker.storage.clock, see there)."""

from kanal.broker.storage.clock import Clock

__all__ = ["Clock"]
