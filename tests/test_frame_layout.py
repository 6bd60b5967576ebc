"""The construct frame is declared once, in ``native/interposer_frame.h``; the Python
names of :mod:`offload_shim.abi.interposer` (``FRAME_*``, ``DATA_NOWAIT``) must carry
the header's values.  The header is parsed here, so a word added, removed or moved on
either side fails this test (as ``host_plugin.c``'s ``_Static_assert``s pin
``KernelArgsTy``)."""

from __future__ import annotations

import os
import re

import pytest

from offload_shim.abi import interposer as abi

HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "native", "interposer_frame.h")


def _header_values() -> dict[str, int]:
    """``{NAME: value}`` of every enumerator of the header (``OSH_`` dropped); every
    enumerator must give its value explicitly, so nothing is counted implicitly."""
    with open(HEADER, encoding="utf-8") as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    out = {}
    for body in re.findall(r"\benum\b[^{;]*\{([^}]*)\}", text):
        for item in filter(None, (x.strip() for x in body.split(","))):
            m = re.fullmatch(r"OSH_(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)", item)
            assert m, f"enumerator without an explicit value in {HEADER}: {item!r}"
            out[m.group(1)] = int(m.group(2), 0)
    m = re.search(r"#define\s+OSH_FRAME_WORDS\s+\(OSH_FRAME_HEAD \+ 4 \* OSH_FRAME_MAX\)",
                  text)
    assert m, "OSH_FRAME_WORDS is no longer HEAD + 4 * MAX: update abi.FRAME_WORDS"
    out["FRAME_WORDS"] = out["FRAME_HEAD"] + 4 * out["FRAME_MAX"]
    return out


def test_every_frame_name_has_the_header_value():
    header = _header_values()
    python = {n: getattr(abi, n) for n in dir(abi)
              if n.startswith("FRAME_") or n == "DATA_NOWAIT"}
    assert python == header


def test_the_header_words_are_distinct_and_dense():
    header = _header_values()
    words = sorted(v for n, v in header.items()
                   if n.startswith("FRAME_") and n not in
                   ("FRAME_HEAD", "FRAME_MAX", "FRAME_WORDS", "FRAME_BEGIN", "FRAME_END",
                    "FRAME_UPDATE", "FRAME_KERNEL", "FRAME_REPEAT_END",
                    "FRAME_REPEAT_FAILED"))
    assert words == list(range(header["FRAME_HEAD"]))


@pytest.mark.parametrize("name", ["FRAME_BEGIN", "FRAME_END", "FRAME_UPDATE"])
def test_data_kinds_stay_below_the_nowait_bit(name):
    assert getattr(abi, name) & abi.DATA_NOWAIT == 0


def test_the_bridge_includes_the_header_and_indexes_no_frame_word_by_number():
    native = os.path.dirname(HEADER)
    with open(os.path.join(native, "interposer.c"), encoding="utf-8") as f:
        text = f.read()
    assert '#include "interposer_frame.h"' in text
    assert not re.findall(r"\bfr?\[\d+\]", text)
