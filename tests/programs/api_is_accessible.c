/* omp_target_is_accessible (OpenMP 5.1; libomptarget 22.1 only, llvm-project PR #138294:
   clang-19's omp.h declares it, libomptarget 19.1 does not define it): NULL is never
   accessible (whatever the device number), host memory from the initial device is,
   also when named omp_initial_device (-1), from a device only where the device says it
   can reach the memory -- libomptarget 22.1's x86_64 host plugin never does, so 0 also
   for memory of the device itself and for a size of 0; a device number that is no
   device stops the program.
   feature: api-target-is-accessible
   clang: 22
   run: -
   run: OMP_TARGET_OFFLOAD=disabled
   run: minus-one
   run: bad
   run: past
*/
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  int n = omp_get_num_devices(), host = omp_get_initial_device();
  int dev = omp_get_default_device();
  int *x = malloc(64), stack = 0;
  printf("devices=%d host=%d\n", n, host);
  for (int d = 0; d <= n; d++)
    printf("device %d: heap=%d stack=%d size0=%d null=%d\n", d,
           omp_target_is_accessible(x, 64, d), omp_target_is_accessible(&stack, 4, d),
           omp_target_is_accessible(x, 0, d), omp_target_is_accessible(NULL, 4, d));
  int *dm = omp_target_alloc(64, dev);
  printf("device memory on its device=%d null on device 99=%d\n",
         omp_target_is_accessible(dm, 64, dev), omp_target_is_accessible(NULL, 4, 99));
  fflush(stdout);
  if (argc > 1 && !strcmp(argv[1], "minus-one"))
    printf("omp_initial_device=%d\n", omp_target_is_accessible(x, 4, -1));
  if (argc > 1 && !strcmp(argv[1], "bad"))
    printf("bad=%d\n", omp_target_is_accessible(x, 4, -3));
  if (argc > 1 && !strcmp(argv[1], "past"))
    printf("past=%d\n", omp_target_is_accessible(x, 4, host + 1));
  omp_target_free(dm, dev);
  free(x);
  return 0;
}
