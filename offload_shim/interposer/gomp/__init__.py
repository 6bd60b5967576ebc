"""The GCC wing of the interposer: libgomp 12's offload host side (GCC ``libgomp/
target.c`` and the headers it reads), split by subject.  Rooms from the top; each imports
only rooms below it.

==================  ==========================================================
:mod:`.lazy`        :class:`~.lazy.LazyGompSide`: the side below built at the
                    first ``GOMP_*`` call (clang programs never pay for it)
:mod:`.target`      registration (``GOMP_offload_register_ver``), the constructs
                    (``GOMP_target_ext``, ``GOMP_target_data_ext``, ...) and
                    ``resolve_device``'s decisions, the report
:mod:`.api`         the ``omp_target_*`` API routines of the host device
                    (mixed into :class:`~.target.GompSide`)
:mod:`.device`      a libgomp device with separate memory, on the host
:mod:`.mapping`     :class:`~.mapping.GompMapper`: ``gomp_unmap_vars_internal``,
                    ``gomp_update``, ``gomp_exit_data``, enter data, images
                    (``gomp_load_image_to_device``), associated pointers
:mod:`.mapvars`     ``gomp_map_vars_internal`` (``gomp_map_vars_existing``,
                    ``gomp_map_fields_existing``, ``gomp_map_pointer``,
                    ``gomp_map_val``)
:mod:`.refcount`    device copies, ``gomp_increment_refcount`` /
                    ``gomp_decrement_refcount``, ``gomp_attach_pointer`` /
                    ``gomp_detach_pointer``, ``gomp_remove_var`` / ``gomp_unref_tgt``
:mod:`.memmap`      libgomp.h's records (``splay_tree_key_s``,
                    ``target_mem_desc``, ``target_var_desc``) and the splay
                    tree's lookups (``gomp_map_lookup``, ``gomp_map_0len_lookup``)
:mod:`.kinds`       gomp-constants.h: map kinds, flags, device numbers
:mod:`.fatal`       ``gomp_fatal`` (:class:`~.fatal.GompFatal`) and its ``%p``
==================  ==========================================================

Imports nothing itself: the embedded runtime of ``offload-shim run`` loads only the
modules it uses.
"""
