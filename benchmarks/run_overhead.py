"""The ``run`` workload of the benchmark (``make bench``): compiled programs under
``offload-shim run`` against the real libomptarget 16, profile ``full``.

Writes ``benchmarks/results/run-overhead.{json,md,png}`` (git-ignored), replaces the
block between the ``bench-run:begin``/``bench-run:end`` marks of ``docs/benchmarks.md``
with the tables and copies the plot to ``docs/img/run-overhead.png``.  Everything is
done by :mod:`offload_shim.bench.run_overhead`; ``--profile quick`` for a shorter run,
``--no-docs`` to leave docs/ alone.  Like ``benchmarks/run.py`` it imports the
*installed* ``offload_shim`` (``pip install .[bench]``), never the source tree.
"""

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path
               if Path(p or os.getcwd()).resolve() not in (ROOT, ROOT / "benchmarks")]

from offload_shim.bench import run_overhead  # noqa: E402  (after the sys.path clean-up)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", choices=["tiny", "quick", "full"], default="full")
    ap.add_argument("--repeats", type=int, help="repetitions (default: the profile's)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args(argv)
    if Path(run_overhead.__file__).resolve().is_relative_to(ROOT / "offload_shim"):
        print(f"benchmarks/run_overhead.py: offload_shim imported from the source tree "
              f"({run_overhead.__file__}); install it with `pip install .[bench]`",
              file=sys.stderr)
        return 2
    out = run_overhead.run(args.profile, repeats=args.repeats,
                           progress=run_overhead._progress_printer(True))
    paths = run_overhead.write_outputs(out, args.out)
    print(run_overhead.format_text(out))
    if not args.no_docs and not out.get("skipped"):
        run_overhead.update_docs(out, ROOT / "docs" / "benchmarks.md")
        for p in paths["plots"]:
            img = ROOT / "docs" / "img"
            img.mkdir(exist_ok=True)
            shutil.copyfile(p, img / Path(p).name)
        print("benchmarks/run_overhead.py: tables and plot copied into docs/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
