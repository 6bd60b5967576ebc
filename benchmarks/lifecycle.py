"""The ``lifecycle`` workload of the benchmark (``make bench``): dlopen / target region /
dlclose cycles and two threads' kernels under ``offload-shim run`` against the real
libomptarget 16, profile ``full``.

Writes ``benchmarks/results/lifecycle.{json,md}`` (git-ignored) and replaces the block
between the ``bench-lifecycle:begin``/``bench-lifecycle:end`` marks of
``docs/benchmarks.md`` with the table.  Everything is done by
:mod:`offload_shim.bench.lifecycle`; ``--profile quick`` for a shorter run,
``--no-docs`` to leave docs/ alone.  Like ``benchmarks/run.py`` it imports the
*installed* ``offload_shim`` (``pip install .[bench]``), never the source tree.
"""

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path
               if Path(p or os.getcwd()).resolve() not in (ROOT, ROOT / "benchmarks")]

from offload_shim.bench import lifecycle  # noqa: E402  (after the sys.path clean-up)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", choices=sorted(lifecycle.PROFILES), default="full")
    ap.add_argument("--repeats", type=int, help="repetitions (default: the profile's)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args(argv)
    if Path(lifecycle.__file__).resolve().is_relative_to(ROOT / "offload_shim"):
        print(f"benchmarks/lifecycle.py: offload_shim imported from the source tree "
              f"({lifecycle.__file__}); install it with `pip install .[bench]`",
              file=sys.stderr)
        return 2
    out = lifecycle.run(args.profile, repeats=args.repeats,
                        progress=lifecycle._progress_printer(True))
    lifecycle.write_outputs(out, args.out)
    print(lifecycle.format_text(out))
    if not args.no_docs and not out.get("skipped"):
        lifecycle.update_docs(out, ROOT / "docs" / "benchmarks.md")
        print("benchmarks/lifecycle.py: table copied into docs/benchmarks.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
