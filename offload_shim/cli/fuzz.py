"""``offload-shim fuzz``: generated OpenMP offload programs run under every real runtime
and under ``offload-shim run``; divergences shrunk and classed.

    offload-shim fuzz [--compilers 16,19,22] [--seed N] [--budget SECONDS]
                      [--programs N] [--json] [--out DIR] [--no-shrink]

Exit status: 0 when no divergence of class ``offload_shim`` was found (divergences of
the real runtimes among themselves, and differences where offload_shim follows an
upstream fix of a data-losing bug, are reported, not failed), 1 when one was, 2 for a
usage error or a compiler that cannot be used (named in one line).  docs/fuzzing.md
describes the generator, the classes and what the fuzzer found.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .common import (EXIT_USAGE, error, nonnegative_int, output_dir_problem, positive_float,
                     positive_int)


def _compilers(text: str) -> list[int]:
    import argparse
    out = []
    for tok in text.split(","):
        tok = tok.strip().removeprefix("clang-")
        if tok not in ("16", "19", "22"):
            raise argparse.ArgumentTypeError(f"{tok!r}: compilers are 16, 19 and 22")
        if int(tok) not in out:
            out.append(int(tok))
    return out


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "fuzz", help="generate OpenMP offload programs, run them under their own runtime "
        "and under offload-shim run, and report divergences (shrunk, classed)")
    p.add_argument("--compilers", type=_compilers, default=[16], metavar="16,19,22",
                   help="clang releases that build each program (default 16); each "
                        "program runs under the runtime its compiler links")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="master seed (default 0)")
    p.add_argument("--budget", type=positive_float, default=60.0, metavar="SECONDS",
                   help="wall-clock seconds for the campaign, shrinking included "
                        "(default 60)")
    p.add_argument("--programs", type=positive_int, default=None, metavar="N",
                   help="stop after N programs (default: when the budget is spent)")
    p.add_argument("--out", metavar="DIR", help="write each divergence's shrunk program "
                   "(.c) and its outputs (.txt) there")
    p.add_argument("--no-shrink", action="store_true", help="report divergences as found")
    p.add_argument("--json", action="store_true", help='print the result as JSON on stdout: {"programs": N, '
                   '"divergences": [{"class", "program", "outputs", ...}]}')
    p.set_defaults(func=cmd_fuzz)


def cmd_fuzz(args) -> int:
    from ..fuzz.runner import Campaign
    from ..fuzz.toolchains import ToolchainError, toolchain
    try:
        tcs = [toolchain(v) for v in args.compilers]
    except ToolchainError as exc:
        error(str(exc))
        return EXIT_USAGE
    bad = args.out is not None and output_dir_problem(args.out, "--out")
    if bad:
        error(bad)
        return EXIT_USAGE
    log = None if args.json else (lambda m: print(f"fuzz: {m}", file=sys.stderr, flush=True))
    camp = Campaign(tcs, seed=args.seed, budget=args.budget, shrink=not args.no_shrink,
                    limit=args.programs, log=log)
    try:
        camp.run()
    except subprocess.CalledProcessError as exc:
        error(f"a generated program does not build with {exc.cmd[0]} (a generator bug): "
              f"{(exc.stderr or '').strip().splitlines()[:3]}")
        return EXIT_USAGE
    paths = {}
    if args.out:
        out = Path(args.out)
        for i, d in enumerate(camp.divergences):
            stem = out / f"{d.cls}-{d.seed}"
            text = []
            for name, lines in d.outputs.items():
                text += [f"== {name}", *lines]
            try:                    # the folder was checked before the campaign; a failure
                stem.with_suffix(".c").write_text(d.source)     # now still prints the result
                stem.with_suffix(".txt").write_text("\n".join(text) + "\n")
            except OSError as exc:
                error(f"--out {out}: {exc.strerror or exc} (the divergence is printed below)")
                continue
            paths[i] = str(stem.with_suffix(".c"))
    counts = camp.counts()
    if args.json:
        print(json.dumps({"programs": camp.programs, "seed": args.seed,
                          "compilers": [tc.name for tc in tcs], "builds": camp.builds,
                          "counts": counts,
                          "divergences": [d.as_json(paths.get(i))
                                          for i, d in enumerate(camp.divergences)]}))
    else:
        print(f"fuzz: {camp.programs} programs, compilers {', '.join(tc.name for tc in tcs)}, "
              f"seed {args.seed}: {counts['offload_shim']} offload_shim, "
              f"{counts['fixed_upstream']} fixed_upstream, "
              f"{counts['runtimes']} runtimes, {counts['nondeterministic']} nondeterministic")
        for i, d in enumerate(camp.divergences):
            where = paths.get(i, "(use --out DIR to keep the program)")
            print(f"  {d.cls}: seed {d.seed}, {', '.join(d.compilers)}, "
                  f"{d.original_steps} -> {d.steps} steps: {where}")
    return 1 if counts["offload_shim"] else 0


__all__ = ["cmd_fuzz", "register_cli"]
