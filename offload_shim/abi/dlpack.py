"""DLPack's C structures (ctypes) and the binding of ``libosh_dlpack.so`` (native/dlpack.c).

The structures are dmlc/dlpack ``include/dlpack/dlpack.h``: ``DLManagedTensor`` (v0.8,
the unversioned capsule ``"dltensor"``) and ``DLManagedTensorVersioned`` (v1.0,
``"dltensor_versioned"``).  :func:`new_capsule` wraps one in a ``PyCapsule`` whose
destructor, and whose tensor's deleter, are C functions of ``libosh_dlpack.so``: they
save the pending Python error, call back ``ended(key)`` (``key`` = the tensor's
``manager_ctx``) and restore the error, so an export ends even when a consumer drops
or deletes it while an exception is set (NumPy does when it refuses a capsule).

Bound lazily on first use, never at import.  Used by :mod:`offload_shim.core.array`.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p

__all__ = ["FILENAME", "DLDevice", "DLDataType", "DLTensor", "DLManagedTensor",
           "DLManagedTensorVersioned", "CAPSULE_NAME", "CAPSULE_NAME_VERSIONED",
           "kDLCPU", "kDLCUDA", "new_capsule"]

FILENAME = "libosh_dlpack.so"

#: ``DLDeviceType`` values (dlpack.h)
kDLCPU = 1
kDLCUDA = 2

#: capsule names (module constants: a capsule keeps a pointer to its name)
CAPSULE_NAME = b"dltensor"
CAPSULE_NAME_VERSIONED = b"dltensor_versioned"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(c_int64)),
                ("strides", ctypes.POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


_Ended = ctypes.CFUNCTYPE(None, c_uint64)
_lib = None
_ended_cb = None            # the ctypes callback, kept alive for the process's life
_new = None
_bind_lock = threading.Lock()


def _bind(ended) -> None:
    with _bind_lock:
        if _lib is None:
            _bind_locked(ended)


def _bind_locked(ended) -> None:
    global _lib, _ended_cb, _new
    from .native import bundled_native_dir
    path = os.fspath(bundled_native_dir() / FILENAME)
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    except OSError as exc:
        raise BufferError(f"DLPack export needs {path} (build the package: pip install .): "
                          f"{exc}") from None
    api = ctypes.pythonapi
    addr = [ctypes.cast(getattr(api, n), c_void_p).value for n in (
        "PyGILState_Ensure", "PyGILState_Release", "PyErr_Fetch", "PyErr_Restore",
        "PyCapsule_IsValid", "PyCapsule_GetPointer")]
    cb = _Ended(ended)
    lib.osh_dlpack_init.restype = ctypes.c_int
    lib.osh_dlpack_init.argtypes = [c_void_p] * 7
    if lib.osh_dlpack_init(*addr, ctypes.cast(cb, c_void_p).value) != 0:
        raise BufferError(f"{path}: osh_dlpack_init refused the Python API addresses")
    new = api.PyCapsule_New
    new.restype = ctypes.py_object        # a new reference, which ctypes takes over
    new.argtypes = [c_void_p, ctypes.c_char_p, c_void_p]
    _lib, _ended_cb, _new = lib, cb, new


def new_capsule(managed, versioned: bool, ended):
    """A new ``PyCapsule`` over ``managed`` (a :class:`DLManagedTensor` or
    :class:`DLManagedTensorVersioned` that the caller keeps alive until ``ended``
    is called with its ``manager_ctx``); sets ``managed.deleter`` to the C deleter.
    ``ended(key)`` is the one Python callback of the process (the first call's is
    kept).  Raises BufferError when ``libosh_dlpack.so`` is missing."""
    if _lib is None:
        _bind(ended)
    if versioned:
        managed.deleter = ctypes.cast(_lib.osh_dlpack_deleter_versioned, c_void_p).value
        name = CAPSULE_NAME_VERSIONED
    else:
        managed.deleter = ctypes.cast(_lib.osh_dlpack_deleter, c_void_p).value
        name = CAPSULE_NAME
    return _new(ctypes.addressof(managed), name,
                ctypes.cast(_lib.osh_dlpack_capsule_destructor, c_void_p).value)
