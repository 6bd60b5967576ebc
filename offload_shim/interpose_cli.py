"""``offload-shim run-library``: load a compiled OpenMP library through the
interposer and call its functions (issue 7).

    offload-shim run-library --library libomp_regions.so --call osh_region_saxpy \\
        [--call ...] [--plugin PATH ...] [--policy disabled|default|mandatory] [--json]

Each ``--call NAME`` calls ``int64_t NAME(void)`` and prints the value.  Without
``--plugin`` the runtime uses every host plugin found (:meth:`Runtime.discover`,
``host_only``).  ``--bundled`` adds the bundled host plugin.  Exit status 0 when every
call returned and the library unregistered cleanly on ``dlclose``.
"""

from __future__ import annotations

import json
import sys


def cmd_run_library(args) -> int:
    import offload_shim as osh
    from .interpose import call_counts
    if args.plugin:
        rt = osh.Runtime(args.plugin, bundled=args.bundled)
    else:
        rt = osh.Runtime.discover(host_only=True, bundled=args.bundled)
    out: dict = {"library": args.library, "plugins": [p.name for p in rt.plugins],
                 "results": {}}
    ok = True
    with rt, osh.interpose(rt, policy=args.policy) as ip:
        lib = ip.load_library(args.library)
        out["images"] = [i.name for imgs in ip.libraries.values() for i in imgs]
        out["unsupported"] = [msg for _, msg in ip.unsupported]
        out["devices"] = len(ip.devices)
        for name in args.call:
            out["results"][name] = int(lib.call(name))
            if not args.json:
                print(f"{name} = {out['results'][name]}", flush=True)
        out["device_labels"] = [d.label for d in ip.devices]
        out["initialised"] = [d.label for d in ip.devices if d.initialized]
        ip.unload_library(lib)
        out["registered_after_close"] = len(ip.libraries) + len(rt.images)
        out["mappings_after_close"] = sum(len(ip.mappings(i)) for i in range(len(ip.devices)))
        out["errors"] = list(ip.errors)
        ok = out["registered_after_close"] == 0 and not ip.errors
    out["calls"] = call_counts()
    if args.json:
        print(json.dumps(out))
    else:
        print(f"plugins: {', '.join(out['plugins']) or 'none'}; devices: {out['devices']}; "
              f"images: {out['images']}; unsupported: {out['unsupported']}")
        print(f"interposed calls: {out['calls']}")
        print(f"after dlclose: {out['registered_after_close']} images registered")
        for e in out["errors"]:
            print(f"error: {e}")
    return 0 if ok else 1


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("run-library",
                              help="load a compiled OpenMP library through the interposer "
                                   "and call its functions")
    p.add_argument("--library", required=True, help="shared library built with "
                   "clang-16 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu")
    p.add_argument("--call", action="append", default=[], metavar="FUNC",
                   help="call int64_t FUNC(void) (repeatable)")
    p.add_argument("--plugin", action="append", default=[], help="plugin path (repeatable)")
    p.add_argument("--bundled", action="store_true", help="add the bundled host plugin")
    p.add_argument("--policy", choices=["disabled", "default", "mandatory"],
                   help="override OMP_TARGET_OFFLOAD")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_run_library)


if __name__ == "__main__":
    from .cli import main
    sys.exit(main(["run-library", *sys.argv[1:]]))
