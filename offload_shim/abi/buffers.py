"""Addresses of Python buffers and byte arrays over raw memory (ctypes).

``buffer_address(obj)`` is the one way the package turns a writable,
C-contiguous buffer-protocol object into the address native code is given;
``byte_array_type(n, mixin)`` makes the ``c_ubyte[n]`` types that expose
memory the package allocated (``from_buffer(mmap)``/``from_address(addr)``).
"""

from __future__ import annotations

import ctypes
import functools


def buffer_address(obj) -> tuple[int, object]:
    """(address, keepalive) of the first byte of a writable, C-contiguous
    buffer ``obj`` of at least one byte; keep ``keepalive`` referenced while
    native code may use the address (it pins the buffer's export).  Raises
    TypeError (read-only or not a buffer), ValueError (empty or not
    C-contiguous)."""
    mv = memoryview(obj)
    if mv.readonly:
        raise TypeError("a read-only buffer has no writable address")
    if not mv.c_contiguous:
        raise ValueError("host buffer must be C-contiguous")
    if mv.nbytes == 0:
        raise ValueError("an empty buffer has no address")
    flat = mv.cast("B") if (mv.ndim != 1 or mv.format != "B") else mv
    arr = (ctypes.c_char * mv.nbytes).from_buffer(flat)
    return ctypes.addressof(arr), (mv, arr)


@functools.lru_cache(maxsize=256)
def byte_array_type(nbytes: int, mixin: type, name: str) -> type:
    """A ``c_ubyte * nbytes`` array type named ``name`` with the methods of
    ``mixin`` (cached per size).  Its ``from_buffer(obj)`` and
    ``from_address(addr)`` make instances; ``len()`` is ``nbytes``."""
    return type(name, (mixin, ctypes.c_ubyte * nbytes), {})


def address_of(arr) -> int:
    """Address of an instance of a :func:`byte_array_type` type."""
    return ctypes.addressof(arr)


__all__ = ["buffer_address", "byte_array_type", "address_of"]


def new_buffer(init: bytes | bytearray | memoryview | int) -> tuple[int, object]:
    """``(address, keepalive)`` of fresh host memory owned by Python: a copy
    of ``init``'s bytes, or ``init`` zeroed bytes (at least one byte, so the
    address is never NULL).  Freed when ``keepalive`` is dropped."""
    if isinstance(init, int):
        buf = ctypes.create_string_buffer(max(int(init), 1))
    else:
        data = bytes(init)
        buf = ctypes.create_string_buffer(data, max(len(data), 1))
    return ctypes.addressof(buf), buf


def bytes_address(data: bytes) -> int:
    """The address of the first byte of the immutable ``bytes`` object ``data``,
    without a copy: CPython never moves an object, so the address stays valid while
    ``data`` is referenced (the caller keeps it).  Native code may only read there.
    Raises TypeError for anything but ``bytes`` (a ``bytearray`` can be resized and
    moved: use :func:`buffer_address`)."""
    if type(data) is not bytes:
        raise TypeError(f"bytes_address needs bytes, not {type(data).__name__}")
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value


def read_bytes(addr: int, size: int) -> bytes:
    """A copy of ``size`` bytes at host address ``addr``."""
    return ctypes.string_at(addr, size) if size else b""


__all__ += ["bytes_address", "new_buffer", "read_bytes"]


_NOT_A_BUFFER = ("expected a buffer object (bytearray, array.array, numpy array, ctypes "
                 "array), not {}")


def host_view(buf, writable: bool) -> tuple[int, int, object]:
    """``(address, nbytes, keepalive)`` of a C-contiguous buffer-protocol object
    (``(0, 0, None)`` when empty); a read-only buffer is copied unless
    ``writable`` is asked for.  Raises TypeError (an int or str, or a read-only
    buffer with ``writable``; anything that is not a buffer), ValueError (not
    C-contiguous)."""
    if isinstance(buf, (int, str)):
        raise TypeError(_NOT_A_BUFFER.format(type(buf).__name__))
    try:
        mv = memoryview(buf)
    except ValueError:
        mv = _numpy_bytes(buf)
    except TypeError:
        hint = ""
        if hasattr(buf, "__dlpack__") and hasattr(buf, "ptr"):
            hint = (" (a device array: its memory is on the device -- copy with its "
                    "get()/set(), or give its .ptr where a device pointer goes)")
        raise TypeError(_NOT_A_BUFFER.format(type(buf).__name__) + hint) from None
    if not mv.c_contiguous:
        raise ValueError("host buffer must be C-contiguous")
    n = mv.nbytes
    if n == 0:
        return 0, 0, None
    if mv.readonly:
        if writable:
            raise TypeError("cannot retrieve into a read-only buffer")
        tmp = ctypes.create_string_buffer(mv.tobytes(), n)
        return ctypes.addressof(tmp), n, tmp
    flat = mv.cast("B") if (mv.ndim != 1 or mv.format != "B") else mv
    arr = (ctypes.c_char * n).from_buffer(flat)
    return ctypes.addressof(arr), n, arr


def _numpy_bytes(arr) -> memoryview:
    """The bytes of a NumPy array that exports no buffer: ``datetime64`` and
    ``timedelta64`` have no PEP 3118 format, so ``memoryview`` raises ValueError
    ("cannot include dtype 'M' in a buffer") although the memory is plain fixed-size
    items.  A C-contiguous array is viewed as ``uint8`` (no copy); anything else that
    is not a buffer re-raises memoryview's error."""
    dtype, flags = getattr(arr, "dtype", None), getattr(arr, "flags", None)
    if dtype is None or flags is None or getattr(dtype, "kind", None) not in ("M", "m"):
        return memoryview(arr)                  # raises the original error
    if not flags.c_contiguous:
        raise ValueError("host buffer must be C-contiguous")
    return memoryview(arr.reshape(-1).view("u1"))


__all__ += ["host_view"]
