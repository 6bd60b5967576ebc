"""The states of a device and the launch holds of each thread, shared by
:mod:`.device` and :mod:`.compiled`."""

from __future__ import annotations

import enum
import threading

__all__ = ["DeviceState", "READY", "OWN_LAUNCHES", "own_launches"]


class DeviceState(enum.Enum):
    UNINIT = "uninit"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


READY = DeviceState.READY

#: per thread: image id -> launches of that image this thread is inside (its kernels run
#: on this thread's stack, so an unload from this thread cannot wait for them)
OWN_LAUNCHES = threading.local()


def own_launches(image_id: int) -> int:
    """Launches of image ``image_id`` the calling thread is inside now."""
    return OWN_LAUNCHES.__dict__.get(image_id, 0)
