/* The construct frame: the one crossing per construct from libosh_interposer.so to Python
 * (interposer.c frame_fill / frame_call).  A construct's arguments as an array of 64-bit
 * words in a per-thread frame, so that Python reads them from one memoryview it keeps per
 * frame (offload_shim/interposer/llvm/plan.py) instead of one ctypes conversion per argument
 * and array element.  The C side only copies: what to do with the construct is decided in
 * Python.
 *
 * This header is the one declaration of the layout.  offload_shim/abi/interposer.py
 * names the same words FRAME_<NAME> (OSH_FRAME_<NAME> here, same value); tests/
 * test_frame_layout.py parses this file and fails when the two differ.
 *
 * After the header (OSH_FRAME_HEAD words), when word OSH_FRAME_COPIED is 1:
 *   [HEAD + i], [HEAD + n + i], [HEAD + 2n + i], [HEAD + 3n + i]:
 *   bases[i], args[i], sizes[i], types[i] (only when n <= OSH_FRAME_MAX).
 *
 * KernelArgsTy (LLVM 16 omptarget.h, versions 1..3 share this prefix): uint32_t
 * Version, NumArgs; void **ArgBasePtrs, **ArgPtrs; int64_t *ArgSizes, *ArgTypes;
 * void **ArgNames, **ArgMappers. */
#ifndef OSH_INTERPOSER_FRAME_H
#define OSH_INTERPOSER_FRAME_H

/* word indices of the frame header */
enum osh_frame_word {
  OSH_FRAME_KIND = 0,       /* enum osh_frame_kind */
  OSH_FRAME_N = 1,          /* number of map arguments */
  OSH_FRAME_DEV = 2,        /* device (int64; -1, the default device, is resolved with
                               libomp's omp_get_default_device() when the process has it) */
  OSH_FRAME_LOC = 3,        /* ident_t *loc */
  OSH_FRAME_HOST_PTR = 4,   /* kernels: host_ptr; data constructs: 1 for the _nowait forms */
  OSH_FRAME_KARGS = 5,      /* kernels: KernelArgsTy *; 0 otherwise */
  OSH_FRAME_TEAMS = 6,      /* kernels: num_teams (int32); 0 otherwise */
  OSH_FRAME_THREADS = 7,    /* kernels: thread_limit (int32); 0 otherwise */
  OSH_FRAME_BASES_P = 8,    /* the arrays as passed: void **args_base */
  OSH_FRAME_ARGS_P = 9,     /* void **args */
  OSH_FRAME_SIZES_P = 10,   /* int64_t *arg_sizes */
  OSH_FRAME_TYPES_P = 11,   /* int64_t *arg_types */
  OSH_FRAME_NAMES_P = 12,   /* void **arg_names */
  OSH_FRAME_MAPPERS_P = 13, /* void **arg_mappers */
  OSH_FRAME_KARGS_VERSION = 14, /* kernels: KernelArgsTy Version; 0 otherwise */
  OSH_FRAME_COPIED = 15,    /* 1 when the words after the header hold copies of the arrays */
  OSH_FRAME_HEAD = 16       /* words in the header */
};

/* word OSH_FRAME_KIND: __tgt_target_data_{begin,end,update}_mapper, __tgt_target_kernel */
enum osh_frame_kind {
  OSH_FRAME_BEGIN = 0,
  OSH_FRAME_END = 1,
  OSH_FRAME_UPDATE = 2,
  OSH_FRAME_KERNEL = 3,
  /* crossings of the repeat path of kernel constructs (interposer_repeat.c), never a
   * construct of the program: word OSH_FRAME_N rows of 5 words after the header (row slot,
   * its generation, host begin, size, 1 when the construct's map of it has FROM) */
  OSH_FRAME_REPEAT_END = 4,     /* the last holder of rows that Python gave up dropped them */
  OSH_FRAME_REPEAT_FAILED = 5   /* a repeated launch failed (word OSH_FRAME_KARGS: the
                                   plugin's return code): the construct keeps its
                                   references, as the general code leaves them */
};

/* most arguments copied into a frame */
enum { OSH_FRAME_MAX = 256 };
#define OSH_FRAME_WORDS (OSH_FRAME_HEAD + 4 * OSH_FRAME_MAX)

/* Added to a data construct's kind by its _nowait entry points in the per-kind callback:
 * libomptarget 19.1 and 22.1 name them apart in their LIBOMPTARGET_INFO lines ("... with
 * being_nowait_mapper").  In a frame the kind stays 0..2 and word OSH_FRAME_HOST_PTR says
 * nowait. */
enum { OSH_DATA_NOWAIT = 0x10 };

#endif
