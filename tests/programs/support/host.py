"""Library mode of the conformance programs: load lib<program>.so with ctypes, run its
main through osh_program_run (entry.c) and exit with its status, as a Python program
that uses an OpenMP offload library does.  Usage: python host.py LIB [ARGS...]"""
import ctypes
import os
import sys

os.environ["OSH_PROGRAM_ARGS"] = "\x1f".join(sys.argv[2:])
lib = ctypes.CDLL(os.path.abspath(sys.argv[1]))
run = lib.osh_program_run
run.restype = ctypes.c_int64
sys.exit(int(run()) & 0xFF)
