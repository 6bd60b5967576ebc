/* API routines given a device number that is neither a device nor the initial device:
   libomptarget 16 answers (0, NULL), libomptarget 19.1 and 22.1 stop the program with
   "omptarget fatal error -1: ... device number '-1' out of range, only 4 devices
   available" (the wording differs between 19 and 22) and abort.
   expect (16): p=0 alloc=null; (19, 22): exit by SIGABRT after the message */
#include <omp.h>
#include <stdio.h>
int main(void) {
  int x = 0;
#pragma omp target map(tofrom: x)
  x = 1;
  printf("p=%d\n", omp_target_is_present(&x, -1));
  fflush(stdout);
  void *q = omp_target_alloc(8, -1);
  printf("alloc=%s\n", q ? "ok" : "null");
  fflush(stdout);
  return 0;
}
