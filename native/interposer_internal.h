/* Internal interface of libosh_interposer.so between interposer.c (libomptarget's entry
 * points, the callback table, the embedded CPython of offload-shim run) and
 * interposer_gomp.c (libgomp's entry points and GCC's omp_* API routines).  Not exported
 * (the version script keeps only the listed names global). */
#ifndef OSH_INTERPOSER_INTERNAL_H
#define OSH_INTERPOSER_INTERNAL_H

#include <stdint.h>

/* osh_interposer_calls() counter indices; offload_shim/abi/interposer.py CALL_COUNTERS
 * names them in this order. */
enum { C_REG, C_UNREG, C_REQ, C_KERNEL, C_DATA, C_ALLOC, C_FREE, C_MEMCPY, C_PRESENT,
       C_NUMDEV, C_GOMP_REG, C_GOMP_UNREG, C_FALLBACK, C_GOMP_TARGET, C_GOMP_DATA,
       C_GOMP_FALLBACK, C_GOMP_DEVICE, C_API, C_REPEAT, C_KREPEAT, C_KORPHAN, C_KWAIT, C_EREPEAT, C_XREPEAT,
       C_NCALLS };

void osh_ip_count(int which);
/* start the embedded CPython of offload-shim run once, if asked for and not running */
void osh_ip_ensure_python(void);
/* the GCC entry points': a failed boot leaves OMP_TARGET_OFFLOAD to libgomp */
void osh_ip_ensure_python_gomp(void);
/* take / release the GIL when this library started CPython (no-op otherwise: ctypes
 * callbacks take it themselves) */
int osh_ip_gil_take(void);
void osh_ip_gil_drop(int state);
/* offload_shim.interposer.embed.stop() has run (at exit); CPython is still initialised */
int osh_ip_python_stopped(void);
/* this library started (or joined) CPython and it has been finalised since: callbacks
 * into it must not run */
int osh_ip_python_gone(void);
/* PyRun_SimpleString(code) with the GIL, in the CPython this library started; -1 when it
 * started none */
int osh_ip_run_python(const char *code);

/* The generic API callback (interposer.c api_call): routine `which` with the 64-bit
 * arguments args[0..nargs); the value it answers, `dflt` when no Python table is
 * installed; aborts when Python printed a fatal message. */
uint64_t osh_ip_api_call(int which, const uint64_t *args, int nargs, uint64_t dflt);
/* which: 1..7 are interposer.c's OSH_API_* (libomptarget 16's api.cpp); these are the
 * routines libomptarget 19.1 / 22.1 added (interposer_api.c; offload_shim/abi/
 * interposer.py API_*) */
enum { OSH_API_IS_ACCESSIBLE = 8, OSH_API_UID_FROM_DEVICE, OSH_API_DEVICE_FROM_UID,
       OSH_API_DUMP_TABLES, OSH_API_RECORD_REPLAY, OSH_API_INTEROP };

/* The repeat path of `target update` (interposer_repeat.c): devices 0..OSH_REPEAT_DEVS-1,
 * constructs of at most OSH_REPEAT_MAXN items, OSH_REPEAT_SLOTS remembered at once (in
 * sets of OSH_REPEAT_WAYS).
 * osh_ip_repeat_update: 1 when the construct was done there (its device number resolved
 * already), 0 when Python must do it. */
enum { OSH_REPEAT_DEVS = 64, OSH_REPEAT_MAXN = 16, OSH_REPEAT_SLOTS = 256, OSH_REPEAT_WAYS = 4 };
int osh_ip_repeat_update(int64_t dev, int32_t n, void **bases, void **args, int64_t *sizes,
                         int64_t *types, void **mappers);
/* The repeat path of a kernel construct whose rows all exist (interposer_repeat.c):
 * kernels of at most OSH_REPEAT_MAXARGS arguments; OSH_REPEAT_ROWS rows of the mapping
 * tables can be held by repeats at once.  osh_ip_repeat_kernel: 1 when the construct was
 * done there (*rc: its callback code), 0 when Python must do it. */
enum { OSH_REPEAT_MAXARGS = 32, OSH_REPEAT_ROWS = 4096 };
int osh_ip_repeat_kernel(int64_t dev, void *loc, void *host_ptr, uint32_t version, int32_t n,
                         void **bases, void **args, int64_t *sizes, int64_t *types,
                         void **mappers, int *rc);
/* A crossing the repeat path makes itself (interposer.c): a frame of kind `kind`
 * (OSH_FRAME_REPEAT_END / OSH_FRAME_REPEAT_FAILED) with header words dev, loc, host_ptr
 * and `code` (word OSH_FRAME_KARGS), and n rows of 5 words after the header; the
 * construct callback's code, INT32_MIN when it cannot be made (no callback table, no
 * free frame, Python gone). */
int osh_ip_repeat_cross(int kind, int64_t dev, void *loc, void *host_ptr, int64_t code,
                        int32_t n, const uint64_t *words);

/* State of the repeat path that interposer_pair.c shares (interposer_repeat.c): the
 * per-device stamps and the epoch, whether repeats are on, the repeats in flight (all
 * threads / this thread), the lock of the remembered constructs, the kernel repeats in
 * flight with rows of their own per device. */
#include <pthread.h>
extern uint64_t rp_stamps[OSH_REPEAT_DEVS + 1];
extern int rp_on;
extern int64_t rp_inflight;
extern __thread int64_t rp_mine;
extern pthread_mutex_t rp_lock;
extern int64_t rk_cres[OSH_REPEAT_DEVS];
/* reservations of Python's cheap path outstanding per device (interposer_repeat.c) */
extern int32_t rs_count[OSH_REPEAT_DEVS];
/* Repeats of `target enter data` / `exit data` pairs (interposer_pair.c): 1 when the
 * construct was done there, 0 when Python must do it. */
int osh_ip_repeat_enter(int64_t dev, int32_t n, void **bases, void **args, int64_t *sizes,
                        int64_t *types, void **mappers);
int osh_ip_repeat_exit(int64_t dev, int32_t n, void **bases, void **args, int64_t *sizes,
                       int64_t *types, void **mappers);
/* (rp_lock held) forget the remembered pairs of device dev (-1: all) whose rows are not
 * out now (a reset); osh_ip_pair_drop: the same for one device's pool, writing their
 * lease tokens (at most max; *left grows by those kept: rows out or no room) */
void osh_ip_pair_forget(int64_t dev);
/* whether rows of a repeated `enter data` are out of Python's table on device dev */
int osh_ip_pair_out(int64_t dev);
int32_t osh_ip_pair_drop(int64_t dev, uint64_t *tokens, int32_t max, int32_t *left);
/* Rotations (interposer_rotation.c): a device pool's cached blocks of one size that
 * kernel repeats take and put back, least recently freed first; OSH_ROT_MAX at once, of
 * at most OSH_ROT_CAP blocks.  All under rp_lock.  osh_ip_rot_take: 1 and *ptr when
 * rotation q (of generation gen) is open and holds a block; osh_ip_rot_untake gives a
 * block taken back at the head, osh_ip_rot_put at the end (it was freed now);
 * osh_ip_rot_forget closes every rotation (a reset). */
enum { OSH_ROT_MAX = 32, OSH_ROT_CAP = 256 };
int osh_ip_rot_take(int32_t q, uint32_t gen, uint64_t *ptr);
void osh_ip_rot_untake(int32_t q, uint64_t ptr);
void osh_ip_rot_put(int32_t q, uint64_t ptr);
void osh_ip_rot_forget(void);

#define OSH_IP_CB(call)                                                                    \
  ({ int st_ = osh_ip_gil_take(); int r_ = (call); osh_ip_gil_drop(st_); r_; })

#endif
