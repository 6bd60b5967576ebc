"""offload_shim.lazylog: the package logger without importing logging at start-up, and
the same records as logging.getLogger("offload_shim") once anything could receive them."""

from __future__ import annotations

import subprocess
import sys

CODE_NO_LOGGING = r"""
import sys
import offload_shim.core.runtime, offload_shim.core.device, offload_shim.interposer.bridge
from offload_shim.lazylog import log
log.debug("dropped %s", 1)
log.info("dropped %s", 2)
assert not log.isEnabledFor(10)
assert "logging" not in sys.modules, "imported"
log.warning("warned %s", 3)              # logging.lastResort: to stderr, as before
assert "logging" in sys.modules
"""


def test_no_logging_import_until_a_warning_and_warnings_reach_stderr():
    r = subprocess.run([sys.executable, "-c", CODE_NO_LOGGING], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "warned 3\n"


def test_records_reach_the_offload_shim_logger_once_logging_is_configured(caplog):
    import logging
    from offload_shim.lazylog import log
    with caplog.at_level(logging.DEBUG, logger="offload_shim"):
        log.debug("d %d", 1)
        log.info("i %d", 2)
        log.warning("w %d", 3)
        log.error("e %d", 4)
        assert log.isEnabledFor(logging.DEBUG)
        assert log.getEffectiveLevel() == logging.DEBUG      # the real logger's attributes
    got = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert got == [("offload_shim", "DEBUG", "d 1"), ("offload_shim", "INFO", "i 2"),
                   ("offload_shim", "WARNING", "w 3"), ("offload_shim", "ERROR", "e 4")]
