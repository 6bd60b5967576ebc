"""The manager's accounting words, shared by its parts.

``_acc`` of a :class:`~offload_shim.memory.MemoryManager` holds the bytes in use
(block sizes) shifted left by :data:`SHIFT` bits plus the number of hits below them:
a hit adds ``block << SHIFT | 1``, so booking the bytes, the hit and the peak is one
addition and one comparison.
"""

from __future__ import annotations

#: bytes in use above, hits below (``MemoryManager._acc``)
SHIFT = 64
#: the hits part of ``_acc``
HITS = (1 << SHIFT) - 1
