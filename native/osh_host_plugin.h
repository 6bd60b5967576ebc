/*
 * osh_host_plugin.h - public interface of libosh_hostplugin.so, the offload_shim
 * "host-malloc device" plugin.
 *
 * The library is an OpenMP offload plugin for BOTH plugin ABIs:
 *   - LLVM libomptarget, LLVM 16 nextgen shape (__tgt_rtl_*), and
 *   - GCC 12 libgomp (GOMP_OFFLOAD_*),
 * and exports the subset of LLVM liboffload's C API (ol*, OffloadAPI.h of LLVM 22) that
 * offload_shim drives, whose "device memory" is host malloc memory.  The three views keep
 * separate device tables; settings (number of devices, capacity, latency, fault injection)
 * are shared.
 *
 * This header declares:
 *   1. the GOMP `target_data` format accepted by GOMP_OFFLOAD_load_image;
 *   2. the control / inspection API (osh_host_*).
 * The plugin entry points themselves follow the upstream prototypes (see native/README.md).
 */
#ifndef OSH_HOST_PLUGIN_H
#define OSH_HOST_PLUGIN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GOMP target_data ------------------------------------------------------------ */

#define OSH_GOMP_TARGET_DATA_MAGIC 0x4748534fu /* "OSHG" little-endian */
#define OSH_GOMP_TARGET_DATA_FORMAT 1u

/* Passed as `target_data` to GOMP_OFFLOAD_load_image / unload_image.
 * The plugin keys a loaded image by this pointer (per device).
 * x86-64 layout: 64 bytes. */
struct osh_gomp_target_data {
  uint32_t magic;                 /* OSH_GOMP_TARGET_DATA_MAGIC */
  uint32_t format_version;        /* OSH_GOMP_TARGET_DATA_FORMAT (1) */
  const void *image;              /* x86-64 ELF shared object bytes */
  uint64_t image_size;            /* bytes */
  const char *const *func_names;  /* num_funcs kernel symbol names */
  const uint32_t *func_num_args;  /* num_funcs argument counts (each <= 16) */
  uint32_t num_funcs;
  uint32_t pad0;
  const char *const *var_names;   /* num_vars global symbol names */
  uint32_t num_vars;
  uint32_t pad1;
};

/* Maximum number of pointer-sized kernel arguments (both ABIs). */
#define OSH_HOST_MAX_KERNEL_ARGS 16
/* Maximum value accepted by osh_host_set_num_devices. */
#define OSH_HOST_MAX_DEVICES 256

/* ---- control / inspection API ------------------------------------------------------ */

/* Number of devices exposed by every view.  Only while the LLVM plugin is not initialised,
 * no GOMP device is initialised and liboffload (olInit) is not initialised.  0 ok, -1
 * refused.  Default 4, or the environment variable OFFLOAD_SHIM_HOST_NUM_DEVICES read at
 * first use. */
int osh_host_set_num_devices(int n);
/* Per-device capacity in bytes (both ABIs); bytes <= 0 = unlimited; dev -1 = all.
 * 0 ok, -1 bad device. */
int osh_host_set_capacity(int dev, int64_t bytes);
/* Busy-wait latency (ns) added to every alloc / free (both ABIs); values < 0 -> 0. */
void osh_host_set_latency(int64_t alloc_ns, int64_t free_ns);
/* Fault injection (GCC PR 68463): while n > 0, every load_binary/load_image
   reports a target table n entries shorter than the host table; 0 turns it off. */
void osh_host_set_table_shortfall(int n);
/* The nth call from now (1 = next) of entry point `entry` (full name) fails without doing
 * anything.  nth 0 clears.  0 ok, -1 unknown name or nth < 0. */
int osh_host_fail_nth(const char *entry, int64_t nth);
/* Calls of entry point `entry` since load or last reset; -1 unknown name. */
int64_t osh_host_call_count(const char *entry);
/* Live allocations / bytes; dev -1 = all devices; both ABIs summed; -1 bad device. */
int64_t osh_host_live_allocs(int dev);
int64_t osh_host_live_bytes(int dev);
/* Allocations freed by deinit_device/fini_device (leaked by the caller); dev -1 = all. */
int64_t osh_host_leaked_allocs(int dev);
/* Violations of the given kind (NULL = all kinds); -1 unknown kind. */
int64_t osh_host_violation_count(const char *kind);
/* Newline-separated "kind entry_point detail" lines, most recent last (last 256 kept).
 * Writes at most len-1 bytes plus NUL; returns bytes written (excluding NUL).
 * buf == NULL or len <= 0: returns the full length needed (excluding NUL). */
int osh_host_violation_log(char *buf, int64_t len);
/* Thread-local text of the last failure on the calling thread ("" if none). */
const char *osh_host_last_error(void);
/* 1 if the LLVM side is between init_plugin and deinit_plugin. */
int osh_host_is_plugin_initialized(void);
/* abi 0 = LLVM, 1 = GOMP, 2 = liboffload.  1 initialised, 0 not, -1 bad abi/device.
 * liboffload has no per-device init: for abi 2 "initialised" means the device has a live
 * queue (offload_shim's liboffload family creates one per device at device init). */
int osh_host_is_device_initialized(int abi, int dev);
/* liboffload view: olInit reference count (0 = not initialised). */
int osh_host_ol_refcount(void);
/* liboffload view: live queues / programs of device dev (-1 = all); -1 bad device. */
int64_t osh_host_ol_live_queues(int dev);
int64_t osh_host_ol_live_programs(int dev);
/* Clears call counters, violations (counts and log) and fail_nth settings; not state. */
void osh_host_reset_counters(void);
/* Name of the i-th entry point / violation kind, NULL past the end (enumeration). */
const char *osh_host_entry_point_name(int i);
const char *osh_host_violation_kind_name(int i);

/* Empty functions with the prototypes of __tgt_rtl_data_alloc / __tgt_rtl_data_delete
 * (LLVM 16): no state, no counter.  A ctypes pair into them is the cost floor of any
 * plugin call from Python (offload-shim bench, row floor:ctypes-nop).  nop_alloc returns
 * a fixed non-NULL address that is not memory; nop_delete returns 0. */
void *osh_host_nop_alloc(int32_t dev, int64_t size, void *host_ptr, int32_t kind);
int32_t osh_host_nop_delete(int32_t dev, void *ptr, int32_t kind);

#ifdef __cplusplus
}
#endif

#endif /* OSH_HOST_PLUGIN_H */
