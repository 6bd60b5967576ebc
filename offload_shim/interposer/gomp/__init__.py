"""The GCC wing of the interposer: libgomp 12's offload host side (GCC ``libgomp/
target.c``), split by subject.

==================  ==========================================================
:mod:`.target`      registration (``GOMP_offload_register_ver``), the constructs
                    (``GOMP_target_ext``, ``GOMP_target_data_ext``, ...) and the
                    ``omp_target_*`` API routines
:mod:`.mapping`     ``gomp_map_vars`` / ``gomp_unmap_vars`` / ``gomp_update`` for
                    one device
:mod:`.device`      a libgomp device with separate memory, on the host
==================  ==========================================================

Imports nothing itself: the embedded runtime of ``offload-shim run`` loads only the
modules it uses.
"""
