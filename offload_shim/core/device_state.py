"""The states of a device, the launch holds of each thread and the size check of an
allocation, shared by :mod:`.device` and :mod:`.compiled`."""

from __future__ import annotations

import enum
import threading

__all__ = ["DeviceState", "READY", "OWN_LAUNCHES", "own_launches", "MAX_SIZE", "check_size"]

#: the plugins take sizes as int64_t (LLVM) / size_t (GOMP)
MAX_SIZE = (1 << 63) - 1


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


def check_size(size) -> None:
    """``Device.alloc``'s checks of ``size`` (bytes), run before a lazy init (a bad
    size never initialises the device; the pool checks again): TypeError for a
    non-int (bool included), ValueError outside ``0..MAX_SIZE``."""
    if type(size) is not int and (not isinstance(size, int) or isinstance(size, bool)):
        raise TypeError(f"size must be an int (bytes), not {type(size).__name__}")
    if size < 0 or size > MAX_SIZE:
        raise ValueError(f"allocation size {size} outside 0..2**63-1 bytes")
