"""What the Python side of the interposer holds, counted.

A host that ``dlopen``\\ s an offload library, runs a target region and ``dlclose``\\ s it,
over and over, registers and unregisters an image per cycle (libomptarget 16
``__tgt_register_lib`` / ``__tgt_unregister_lib``).  :func:`holdings` counts every
collection the interposer, its runtime and the plugin layer keep that such a cycle
could feed -- registrations, images and their bytes, what devices have loaded,
mapping-table rows, plans, buffers kept for plugins, the image-copy bookkeeping of
:mod:`offload_shim.plugins.leftovers`, remembered verdicts -- and, as a catch-all, the
number of objects the garbage collector tracks.  Taken after cycle k and after cycle
k + n, the counts must be equal: ``tests/test_lifecycle.py`` checks that on the
bundled and the LLVM 16 nextgen plugins.  Memory and time per cycle against
libomptarget 16 are the benchmark's (``offload-shim bench --workloads lifecycle``),
never a test's.
"""

from __future__ import annotations

import gc


def holdings(ip) -> dict[str, int]:
    """Counts (plain ints) of what Interposer ``ip`` and the layers under it hold now;
    the keys are stable across releases of this module:

    * registrations (:mod:`.rtl`): ``libraries``, ``records``, ``decoded``,
      ``generations`` (registered libraries), ``compilers`` (distinct texts, retired
      ones included), ``unsupported``, ``errors``;
    * images: ``registered`` (the runtime's registry), ``images`` (OffloadImage
      objects alive in the process) and ``image_bytes`` (their bytes, the only copy
      the package makes);
    * devices: ``loaded_images``, ``address_map_rows``, ``kernels``;
    * mapping: ``mappers``, ``mapping_rows``, ``retired_rows``, ``ctors_done``;
    * plans (:mod:`.plan`): ``plans``, ``frames``;
    * plugins: ``plugin_keepalive`` (:attr:`Plugin.kept_alive`);
    * ``copies_pending``, ``copies_foreign``, ``copies_removed``
      (:func:`offload_shim.plugins.leftovers.held`), ``verdicts``
      (:func:`offload_shim.core.verdicts.remembered`);
    * ``gc_objects``: ``len(gc.get_objects())`` after a full collection.

    Takes the interposer's registration lock; runs a full garbage collection
    (milliseconds)."""
    from ..core.images import OffloadImage
    from ..safety import verdicts
    from ..safety import leftovers
    with ip.registration_lock:
        rtls, rt = ip.rtls, ip.runtime
        devices = list(ip.devices)
        mappers = ip.device_mappers()
        out = {
            "libraries": len(rtls.libraries),
            "records": len(rtls.records),
            "decoded": rtls.decoded_count(),
            "generations": len(rtls.generations),
            "compilers": len(rtls.compilers()),
            "unsupported": len(rtls.unsupported),
            "errors": len(ip.errors),
            "registered": len(rt.images),
            "loaded_images": sum(len(d.loaded_images) for d in devices),
            "address_map_rows": sum(len(d.address_map) for d in devices),
            "kernels": sum(len(d.kernels) for d in devices),
            "mappers": len(mappers),
            "mapping_rows": sum(len(dm.snapshot()) for dm in mappers),
            "retired_rows": sum(len(dm.retired) for dm in mappers),
            "ctors_done": sum(len(dm.ctors_done) for dm in mappers),
            **ip.fast.held(),
            "plugin_keepalive": sum(p.kept_alive for p in rt.plugins),
            "verdicts": verdicts.remembered(),
        }
    out.update({f"copies_{k}": v for k, v in leftovers.held().items()})
    gc.collect()
    objs = gc.get_objects()
    imgs = [o for o in objs if isinstance(o, OffloadImage)]
    out["images"] = len(imgs)
    out["image_bytes"] = sum(len(i.data) for i in imgs)
    out["gc_objects"] = len(objs)
    return out


__all__ = ["holdings"]
