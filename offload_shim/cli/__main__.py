"""``python -m offload_shim.cli``: the command line (same as ``offload-shim``)."""
import sys

from . import main

sys.exit(main())
