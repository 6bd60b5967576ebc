/* __tgt_activate_record_replay (libomptarget 19.1 / 22.1, the hook of the
   llvm-omp-kernel-record-replay tool): returns 0 for a device whatever the plugin could
   set up (libomptarget checks the plugin's answer with an assert only) and leaves the
   program's offset alone; a number that is no device (the initial device included)
   stops the program.  What the plugin says on stderr differs: libomptarget 19.1's /
   22.1's host plugin cannot size the device memory, the LLVM 16 plugins cannot record
   at all (offload_shim says so in one line), so the diagnostics are not compared.
   feature: api-record-replay
   clang: 19 22
   run: -
   run: initial
*/
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
int __tgt_activate_record_replay(int64_t dev, uint64_t size, void *vaddr, bool record,
                                 bool save_output, uint64_t *req_ptr_arg_offset);

int main(int argc, char **argv) {
  int x = 1;
#pragma omp target map(tofrom: x)
  x += 1;
  uint64_t off = 7;
  int rc = __tgt_activate_record_replay(omp_get_default_device(), 1 << 20, NULL, true,
                                        false, &off);
  printf("x=%d rc=%d offset=%llu\n", x, rc, (unsigned long long)off);
  fflush(stdout);
  if (argc > 1 && !strcmp(argv[1], "initial"))
    printf("initial rc=%d\n", __tgt_activate_record_replay(omp_get_initial_device(),
                                                           1 << 20, NULL, true, false,
                                                           &off));
  return 0;
}
