"""``offload-shim cache info|clear``: the verdict cache of the hostile-input checks.

    offload-shim cache info [--json]
    offload-shim cache clear

The cache (:mod:`offload_shim.safety.verdicts`) keeps one small file per verdict in
``$OFFLOAD_SHIM_CACHE_DIR`` (default ``~/.cache/offload_shim/verdicts``), at most
1,000 of them and none older than 30 days; it prunes itself on each write.  ``info``
prints the directory, the number of verdicts and their size against that bound;
``clear`` removes them all (the next runs repeat their checks once).  Exit status 0;
2 when the directory is not this user's alone (the cache does not use it, and
``clear`` does not empty it), is not a directory or cannot be read.
"""

from __future__ import annotations

import json
import sys


def cmd_cache(args) -> int:
    from ..safety import verdicts
    from .common import UsageError
    d = verdicts.configured_dir()
    import os
    if os.path.lexists(d) and not os.path.isdir(d):      # a file named by the variable
        raise UsageError(f"cache {args.action}: {d} is not a directory "
                         f"(${verdicts.CACHE_DIR_VAR})")
    if args.action == "clear":
        try:
            n = verdicts.clear(d)
        except OSError as exc:
            raise UsageError(f"cache clear: {exc}") from None
        print(f"removed {n} verdict{'s' if n != 1 else ''} from {d}")
        return 0
    try:
        u = verdicts.usage(d)
    except OSError as exc:
        raise UsageError(f"cache info: {d}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(u))
        return 0
    state = "on" if u["enabled"] else (
        f"off ({verdicts.NO_CACHE_VAR} is set)" if verdicts.cache_dir() is None
        else "off (the directory is not this user's alone)")
    age = "" if u["oldest_s"] is None else f", oldest {u['oldest_s'] / 86400:.1f} days"
    print(f"verdict cache {d}: {state}\n"
          f"  {u['entries']} verdicts, {u['bytes']:,} bytes ({u['disk_bytes']:,} on disk)"
          f"{age}\n"
          f"  bound: {u['max_entries']:,} verdicts, {u['max_age_s'] // 86400:g} days; "
          f"`offload-shim cache clear` empties it", file=sys.stdout)
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "cache", help="the verdict cache of the hostile-input checks: info (directory, "
        "use, bound) or clear")
    p.add_argument("action", choices=["info", "clear"],
                   help="info: the directory, how many verdicts and bytes, the bound "
                        "(1,000 verdicts, 30 days); clear: remove every verdict")
    p.add_argument("--json", action="store_true", help="info as one JSON object on stdout")
    p.set_defaults(func=cmd_cache)


__all__ = ["cmd_cache", "register_cli"]
