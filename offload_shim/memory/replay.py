"""``python -m offload_shim.memory.replay LOG``: replay an event log against
several pool policies and print their statistics side by side.

The implementation lives in :mod:`offload_shim.memory._replay` (so that the
package attribute ``offload_shim.memory.replay`` stays the function); import
``main`` from there to call the CLI from Python.
"""

import sys

from offload_shim.memory._replay import main

if __name__ == "__main__":
    sys.exit(main())
