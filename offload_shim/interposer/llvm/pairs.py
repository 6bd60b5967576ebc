"""The native repeat path of ``target enter data`` / ``target exit data`` pairs: what the
cheap path hands ``native/interposer_pair.c`` and how their rows come back.

A loop that maps data in and out again (``enter data map(to: b[0:n])`` ...
``exit data map(from: b[0:n])``, or a ``target data`` region around host code) makes,
under libomptarget 16, the same rows, copies and frees every time (``omptarget.cpp``
``targetDataBegin`` / ``targetDataEnd``; the nextgen plugins' memory manager hands the
enter the block the previous exit freed).  :func:`~.plan_data.begin` notes, for an
``enter data`` whose items all made new rows, a :class:`Made` on each row;
:func:`offer` -- called by :func:`~.plan_data.end` once an ``exit data`` removed exactly
those rows, item for item, and the table's stamp went back to the one before the
enter (:meth:`~.maptable.MappingTable.remove`: nothing else changed the table) -- hands
the pair to the C side on its second run under the same stamp
(:meth:`~.repeat.Repeats.offer_pair`), with the rows' device memory as a lease the C side
keeps between repeats (given back to the pool before any other use of it, as the kernel
repeats' leases are: :meth:`~.repeat.Repeats._evictor`).

Then the C side repeats the enter (its ``to`` copies into the lease) while the stamp is
the one it was handed under, leaving the rows *out*: rows of libomptarget's table that
are not in Python's, the stamp set to a value fixed for the pair; and the matching exit
(its ``from`` copies) while they are still out, setting the stamp back.  Any look-up of
Python's that meets the device while rows are out takes them in first
(:meth:`~.maptable.MappingTable.take_out`, from its ``lookup_raw``, ``find``,
``rows`` and the cheap path's entry): they become ordinary rows owning their blocks, and the
pair is forgotten.  A pair whose rows were taken in twice is not handed over again (a
loop with other constructs between its enter and exit would pay a hand-over per
iteration).  ``OFFLOAD_SHIM_NO_REPEAT=1`` turns this off with the other repeats.
"""

from __future__ import annotations

from ...abi import interposer as _abi
from . import maptable as _maptable

#: how many times a pair's rows may be taken in before its enter is not handed over again
MAX_TAKEN = 2


class Made:
    """An ``enter data`` whose items all made new rows (:func:`~.plan_data.begin`):
    ``plan`` its :class:`~.plan.Plan`, ``key`` its frame words (bases, begins, sizes,
    map types: bytes), ``types_p`` the address of its map-type array, ``n`` its items,
    ``mark`` (stamp, epoch) before its first insertion, ``rows`` its rows in insertion
    order, ``to`` per row whether its map copies to the device."""
    __slots__ = ("plan", "key", "types_p", "n", "mark", "rows", "to")

    def __init__(self, plan, key, types_p, n, mark, rows, to):
        self.plan, self.key, self.types_p, self.n = plan, key, types_p, n
        self.mark, self.rows, self.to = mark, rows, to


class Pair:
    """A pair the C side keeps: the lease of its rows' blocks (one per row, insertion
    order), the rows as ``(base, begin, end, name)``, the stamp before the enter and
    the one its repeats leave (``mid``), the enter's plan."""
    __slots__ = ("lease", "rows", "before", "mid", "plan")

    def __init__(self, lease, rows, before, mid, plan):
        self.lease, self.rows, self.before, self.mid, self.plan = (
            lease, rows, before, mid, plan)


#: token -> the pairs the C side keeps (their rows out or not); taken in by
#: :meth:`~.maptable.MappingTable.take_out`
PAIRS = _maptable.PAIRS


def offer(repeat, dm, plan, v, n: int, items, back) -> bool:
    """An ``exit data`` the cheap path has just done (:func:`~.plan_data.end`):
    ``items`` ``(row, hp, size, from)`` of each of its items, in the order it ended
    them, every row removed and the stamp back at the one before the rows' enter
    (:func:`~.plan_data._pair_of` said so), ``back`` its copies back.  When the rows are exactly those of one
    :class:`Made`, item for item, and the pair ran before under the same stamp, it is
    handed to the C side with the rows' blocks (:meth:`~.repeat.Repeats.offer_pair`).
    Whether the C side kept it: then the caller must not free the blocks."""
    made = items[0][0].made
    for ent, _hp, _size, _frm in items:
        ent.made = None                 # (a reference cycle through made.rows)
    if (made is None or len(items) != len(made.rows)
            or made.plan.taken >= MAX_TAKEN or v[_abi.FRAME_HOST_PTR]):
        return False
    for ent, hp, size, _frm in items:
        if ent not in made.rows or hp != ent.begin or size != ent.end - ent.begin:
            return False
    key = made.key + v[_abi.FRAME_HEAD:_abi.FRAME_HEAD + 4 * n].tobytes()
    return repeat.offer_pair(plan, key, dm, made, v, n, back)


__all__ = ["MAX_TAKEN", "Made", "PAIRS", "Pair", "offer"]
