"""Python host of lib_regions.c (tests/test_gcc_conformance.py): loads the library with
ctypes and prints what each function returns."""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
for name in ("lib_saxpy", "lib_enter_exit", "lib_teams"):  # not lib_devices: differs
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int64
    print(f"{name}={fn()}", flush=True)
