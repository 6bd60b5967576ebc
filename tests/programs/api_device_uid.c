/* omp_get_uid_from_device / omp_get_device_from_uid (OpenMP 6.0; libomptarget 22.1
   only, llvm-project PR #164392): the UID of every device and of the initial device
   ("HOST"), the same pointer for the same device, every UID back to its device number
   (also from a copy of the text), omp_invalid_device for NULL and an unknown UID,
   NULL for omp_invalid_device; a device number that is no device stops the program.
   feature: api-device-uid
   clang: 22
   run: -
   run: OMP_TARGET_OFFLOAD=disabled
   run: bad
   run: past
*/
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  int n = omp_get_num_devices(), host = omp_get_initial_device();
  printf("devices=%d host=%d\n", n, host);
  for (int d = 0; d <= n; d++) {
    const char *u = omp_get_uid_from_device(d);
    char *copy = u ? strdup(u) : NULL;
    printf("uid(%d)=%s same=%d back=%d copy back=%d\n", d, u ? u : "(null)",
           u == omp_get_uid_from_device(d), u ? omp_get_device_from_uid(u) : -99,
           copy ? omp_get_device_from_uid(copy) : -99);
    free(copy);
  }
  const char *inv = omp_get_uid_from_device(omp_invalid_device);
  printf("invalid device uid=%s\n", inv ? inv : "(null)");
  printf("from NULL=%d unknown=%d HOST=%d host lowercase=%d empty=%d\n",
         omp_get_device_from_uid(NULL), omp_get_device_from_uid("no-such-device"),
         omp_get_device_from_uid("HOST"), omp_get_device_from_uid("host"),
         omp_get_device_from_uid(""));
  fflush(stdout);
  if (argc > 1 && !strcmp(argv[1], "bad"))
    printf("uid(-1)=%p\n", (const void *)omp_get_uid_from_device(-1));
  if (argc > 1 && !strcmp(argv[1], "past"))
    printf("uid(n+1)=%p\n", (const void *)omp_get_uid_from_device(host + 1));
  return 0;
}
