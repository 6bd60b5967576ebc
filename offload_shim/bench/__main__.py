"""``python -m offload_shim.bench``: the benchmark (see :mod:`offload_shim.bench`)."""
import sys

from . import main

sys.exit(main())
