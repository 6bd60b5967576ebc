"""libgomp 12's map kinds, target flags and device numbers (GCC 12
``include/gomp-constants.h``), the predicates libgomp reads the kinds with (the
``GOMP_MAP_COPY_TO_P`` / ``GOMP_MAP_COPY_FROM_P`` / ``GOMP_MAP_POINTER_P`` /
``GOMP_MAP_ALWAYS_*_P`` / ``GOMP_MAP_IMPLICIT_P`` macros of gomp-constants.h and
``get_kind`` of ``libgomp/target.c``) and the names the clauses spell, for the report.

Numbers and pure functions only, shared by the mapping (:mod:`.mapvars`, :mod:`.mapping`)
and the constructs (:mod:`.target`); it imports nothing, so it sits below them all.
"""

from __future__ import annotations

# -- gomp-constants.h (GCC 12): device numbers -------------------------------------------
GOMP_DEVICE_ICV = -1                        # the default-device-var ICV
GOMP_DEVICE_HOST_FALLBACK = -2              # if(false) or device(-2): run on the host

# -- gomp-constants.h (GCC 12) ----------------------------------------------------------
GOMP_MAP_FLAG_TO = 1 << 0
GOMP_MAP_FLAG_FROM = 1 << 1
GOMP_MAP_FLAG_SPECIAL_0 = 1 << 2
GOMP_MAP_FLAG_SPECIAL_1 = 1 << 3
GOMP_MAP_FLAG_SPECIAL_2 = 1 << 4
GOMP_MAP_FLAG_SPECIAL_3 = 1 << 5
GOMP_MAP_FLAG_SPECIAL_4 = 1 << 6
GOMP_MAP_FLAG_SPECIAL = GOMP_MAP_FLAG_SPECIAL_1 | GOMP_MAP_FLAG_SPECIAL_0
GOMP_MAP_DEEP_COPY = GOMP_MAP_FLAG_SPECIAL_4 | GOMP_MAP_FLAG_SPECIAL_2
GOMP_MAP_IMPLICIT = GOMP_MAP_FLAG_SPECIAL_3 | GOMP_MAP_FLAG_SPECIAL_4
GOMP_MAP_FLAG_SPECIAL_BITS = (GOMP_MAP_FLAG_SPECIAL_0 | GOMP_MAP_FLAG_SPECIAL_1
                              | GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FLAG_SPECIAL_3
                              | GOMP_MAP_FLAG_SPECIAL_4)
GOMP_MAP_FLAG_FORCE = 1 << 7

GOMP_MAP_ALLOC = 0
GOMP_MAP_TO = 1
GOMP_MAP_FROM = 2
GOMP_MAP_TOFROM = 3
GOMP_MAP_POINTER = GOMP_MAP_FLAG_SPECIAL_0 | 0
GOMP_MAP_TO_PSET = GOMP_MAP_FLAG_SPECIAL_0 | 1
GOMP_MAP_FORCE_PRESENT = GOMP_MAP_FLAG_SPECIAL_0 | 2
GOMP_MAP_DELETE = GOMP_MAP_FLAG_SPECIAL_0 | 3
GOMP_MAP_FORCE_DEVICEPTR = GOMP_MAP_FLAG_SPECIAL_1 | 0
GOMP_MAP_DEVICE_RESIDENT = GOMP_MAP_FLAG_SPECIAL_1 | 1
GOMP_MAP_LINK = GOMP_MAP_FLAG_SPECIAL_1 | 2
GOMP_MAP_IF_PRESENT = GOMP_MAP_FLAG_SPECIAL_1 | 3
GOMP_MAP_FIRSTPRIVATE = GOMP_MAP_FLAG_SPECIAL | 0
GOMP_MAP_FIRSTPRIVATE_INT = GOMP_MAP_FLAG_SPECIAL | 1
GOMP_MAP_USE_DEVICE_PTR = GOMP_MAP_FLAG_SPECIAL | 2
GOMP_MAP_ZERO_LEN_ARRAY_SECTION = GOMP_MAP_FLAG_SPECIAL | 3
GOMP_MAP_FORCE_ALLOC = GOMP_MAP_FLAG_FORCE | GOMP_MAP_ALLOC
GOMP_MAP_FORCE_TO = GOMP_MAP_FLAG_FORCE | GOMP_MAP_TO
GOMP_MAP_FORCE_FROM = GOMP_MAP_FLAG_FORCE | GOMP_MAP_FROM
GOMP_MAP_FORCE_TOFROM = GOMP_MAP_FLAG_FORCE | GOMP_MAP_TOFROM
GOMP_MAP_USE_DEVICE_PTR_IF_PRESENT = GOMP_MAP_FLAG_SPECIAL_2 | 0
GOMP_MAP_ALWAYS_TO = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_TO
GOMP_MAP_ALWAYS_FROM = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FROM
GOMP_MAP_ALWAYS_TOFROM = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_TOFROM
GOMP_MAP_STRUCT = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FLAG_SPECIAL | 0
GOMP_MAP_ALWAYS_POINTER = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FLAG_SPECIAL | 1
GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION = (GOMP_MAP_FLAG_SPECIAL_2
                                                 | GOMP_MAP_FLAG_SPECIAL | 2)
GOMP_MAP_DELETE_ZERO_LEN_ARRAY_SECTION = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_FLAG_SPECIAL | 3
GOMP_MAP_RELEASE = GOMP_MAP_FLAG_SPECIAL_2 | GOMP_MAP_DELETE
GOMP_MAP_ATTACH = GOMP_MAP_DEEP_COPY | 0
GOMP_MAP_DETACH = GOMP_MAP_DEEP_COPY | 1
GOMP_MAP_FORCE_DETACH = GOMP_MAP_DEEP_COPY | GOMP_MAP_FLAG_FORCE | 1
GOMP_MAP_ATTACH_ZERO_LENGTH_ARRAY_SECTION = GOMP_MAP_DEEP_COPY | 2

#: map kind -> the name its clause spells (report)
MAP_KIND_NAMES = {
    GOMP_MAP_ALLOC: "alloc", GOMP_MAP_TO: "to", GOMP_MAP_FROM: "from",
    GOMP_MAP_TOFROM: "tofrom", GOMP_MAP_POINTER: "pointer", GOMP_MAP_TO_PSET: "to_pset",
    GOMP_MAP_FORCE_PRESENT: "force_present", GOMP_MAP_DELETE: "delete",
    GOMP_MAP_FORCE_DEVICEPTR: "force_deviceptr", GOMP_MAP_DEVICE_RESIDENT: "device_resident",
    GOMP_MAP_LINK: "link", GOMP_MAP_IF_PRESENT: "if_present",
    GOMP_MAP_FIRSTPRIVATE: "firstprivate", GOMP_MAP_FIRSTPRIVATE_INT: "firstprivate_int",
    GOMP_MAP_USE_DEVICE_PTR: "use_device_ptr",
    GOMP_MAP_ZERO_LEN_ARRAY_SECTION: "zero_len_array_section",
    GOMP_MAP_FORCE_ALLOC: "force_alloc", GOMP_MAP_FORCE_TO: "force_to",
    GOMP_MAP_FORCE_FROM: "force_from", GOMP_MAP_FORCE_TOFROM: "force_tofrom",
    GOMP_MAP_USE_DEVICE_PTR_IF_PRESENT: "use_device_ptr_if_present",
    GOMP_MAP_ALWAYS_TO: "always_to", GOMP_MAP_ALWAYS_FROM: "always_from",
    GOMP_MAP_ALWAYS_TOFROM: "always_tofrom", GOMP_MAP_STRUCT: "struct",
    GOMP_MAP_ALWAYS_POINTER: "always_pointer",
    GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION: "pointer_to_zero_length_array_section",
    GOMP_MAP_DELETE_ZERO_LEN_ARRAY_SECTION: "delete_zero_len_array_section",
    GOMP_MAP_RELEASE: "release", GOMP_MAP_ATTACH: "attach", GOMP_MAP_DETACH: "detach",
    GOMP_MAP_FORCE_DETACH: "force_detach",
    GOMP_MAP_ATTACH_ZERO_LENGTH_ARRAY_SECTION: "attach_zero_length_array_section",
}

GOMP_TARGET_FLAG_NOWAIT = 1 << 0
GOMP_TARGET_FLAG_EXIT_DATA = 1 << 1

def copy_to_p(k: int) -> bool:
    """``GOMP_MAP_COPY_TO_P``."""
    return not (k & GOMP_MAP_FLAG_SPECIAL) and bool(k & GOMP_MAP_FLAG_TO)


def copy_from_p(k: int) -> bool:
    """``GOMP_MAP_COPY_FROM_P``."""
    return not (k & GOMP_MAP_FLAG_SPECIAL) and bool(k & GOMP_MAP_FLAG_FROM)


def pointer_p(k: int) -> bool:
    """``GOMP_MAP_POINTER_P``."""
    return k in (GOMP_MAP_POINTER, GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION)


def always_to_p(k: int) -> bool:
    return k in (GOMP_MAP_ALWAYS_TO, GOMP_MAP_ALWAYS_TOFROM)


def always_from_p(k: int) -> bool:
    return k in (GOMP_MAP_ALWAYS_FROM, GOMP_MAP_ALWAYS_TOFROM)


def implicit_p(k: int) -> bool:
    """``GOMP_MAP_IMPLICIT_P`` of a 16-bit kind."""
    return (k & GOMP_MAP_FLAG_SPECIAL_BITS) == GOMP_MAP_IMPLICIT


def get_kind(kinds, i: int) -> int:
    """``get_kind`` (short map kinds): the 16-bit kind without the implicit flag."""
    val = kinds[i]
    if implicit_p(val):
        val &= ~GOMP_MAP_IMPLICIT
    return val


def kind_name(kind: int) -> str:
    """The clause name of a map kind (low byte), ``0x..`` when unknown."""
    return MAP_KIND_NAMES.get(kind & 0xFF, f"{kind & 0xFF:#04x}")


__all__ = ["GOMP_DEVICE_HOST_FALLBACK", "GOMP_DEVICE_ICV", "GOMP_MAP_ALLOC",
           "GOMP_MAP_ALWAYS_FROM", "GOMP_MAP_ALWAYS_POINTER", "GOMP_MAP_ALWAYS_TO",
           "GOMP_MAP_ALWAYS_TOFROM", "GOMP_MAP_ATTACH",
           "GOMP_MAP_ATTACH_ZERO_LENGTH_ARRAY_SECTION", "GOMP_MAP_DEEP_COPY",
           "GOMP_MAP_DELETE", "GOMP_MAP_DELETE_ZERO_LEN_ARRAY_SECTION", "GOMP_MAP_DETACH",
           "GOMP_MAP_DEVICE_RESIDENT", "GOMP_MAP_FIRSTPRIVATE", "GOMP_MAP_FIRSTPRIVATE_INT",
           "GOMP_MAP_FLAG_FORCE", "GOMP_MAP_FLAG_FROM", "GOMP_MAP_FLAG_SPECIAL",
           "GOMP_MAP_FLAG_SPECIAL_0", "GOMP_MAP_FLAG_SPECIAL_1", "GOMP_MAP_FLAG_SPECIAL_2",
           "GOMP_MAP_FLAG_SPECIAL_3", "GOMP_MAP_FLAG_SPECIAL_4",
           "GOMP_MAP_FLAG_SPECIAL_BITS", "GOMP_MAP_FLAG_TO", "GOMP_MAP_FORCE_ALLOC",
           "GOMP_MAP_FORCE_DETACH", "GOMP_MAP_FORCE_DEVICEPTR", "GOMP_MAP_FORCE_FROM",
           "GOMP_MAP_FORCE_PRESENT", "GOMP_MAP_FORCE_TO", "GOMP_MAP_FORCE_TOFROM",
           "GOMP_MAP_FROM", "GOMP_MAP_IF_PRESENT", "GOMP_MAP_IMPLICIT", "GOMP_MAP_LINK",
           "GOMP_MAP_POINTER", "GOMP_MAP_POINTER_TO_ZERO_LENGTH_ARRAY_SECTION",
           "GOMP_MAP_RELEASE", "GOMP_MAP_STRUCT", "GOMP_MAP_TO", "GOMP_MAP_TOFROM",
           "GOMP_MAP_TO_PSET", "GOMP_MAP_USE_DEVICE_PTR",
           "GOMP_MAP_USE_DEVICE_PTR_IF_PRESENT", "GOMP_MAP_ZERO_LEN_ARRAY_SECTION",
           "GOMP_TARGET_FLAG_EXIT_DATA", "GOMP_TARGET_FLAG_NOWAIT", "MAP_KIND_NAMES",
           "always_from_p", "always_to_p", "copy_from_p", "copy_to_p", "get_kind",
           "implicit_p", "kind_name", "pointer_p"]
