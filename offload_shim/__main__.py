"""``python -m offload_shim``: the command line (same as ``offload-shim``)."""
import sys

from .cli import main

sys.exit(main())
