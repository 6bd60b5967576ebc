"""Run the full benchmark of issue 5 (``make bench``).

Writes ``benchmarks/results/{results.json,results.md,workloads.png,growth.png}``
(git-ignored) and copies the table, with the machine it ran on, into
``docs/benchmarks.md`` (between the ``bench:begin``/``bench:end`` marks) and the
two plots into ``docs/img/benchmarks-*.png``.
Everything is done by :mod:`offload_shim.bench` (profile ``full``); the
options are those of ``offload-shim bench`` plus ``--no-docs``.

It imports the *installed* ``offload_shim`` (``pip install .[bench]``), never
the source tree: the repository root is removed from ``sys.path`` first (it is
there when run as ``python -m`` or with ``PYTHONPATH=.``), because the source
tree lacks the built host plugin.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path
               if Path(p or os.getcwd()).resolve() not in (ROOT, ROOT / "benchmarks")]

from offload_shim import bench  # noqa: E402  (after the sys.path clean-up)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    docs = "--no-docs" not in argv
    argv = [a for a in argv if a != "--no-docs"]
    if "--out" not in argv:
        argv += ["--out", str(ROOT / "benchmarks" / "results")]
    if Path(bench.__file__).resolve().is_relative_to(ROOT / "offload_shim"):
        print(f"benchmarks/run.py: offload_shim imported from the source tree "
              f"({bench.__file__}); install it with `pip install .[bench]`", file=sys.stderr)
        return 2
    captured = {}
    rc = bench.main(argv, default_profile="full",
                    on_result=lambda out: captured.__setitem__("out", out))
    if rc == 0 and docs and "out" in captured:
        bench.update_docs(captured["out"], ROOT / "docs" / "benchmarks.md")
        import shutil
        results = Path(argv[argv.index("--out") + 1])
        img = ROOT / "docs" / "img"
        img.mkdir(exist_ok=True)
        for name in ("workloads.png", "growth.png"):
            if (results / name).exists():
                shutil.copyfile(results / name, img / f"benchmarks-{name}")
        print("benchmarks/run.py: table and plots copied into docs/", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
