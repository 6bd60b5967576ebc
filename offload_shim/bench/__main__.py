"""``python -m offload_shim.bench``: the benchmark (see :mod:`offload_shim.bench`).

A Ctrl-C before the run has started (while the modules load) ends the same
way as one during the run: one line, exit status 130."""
import sys

try:
    from . import main
    rc = main()
except KeyboardInterrupt:
    print("bench: interrupted", file=sys.stderr)
    rc = 130
sys.exit(rc)
