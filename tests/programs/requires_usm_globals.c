/* requires unified_shared_memory with declare target globals: the device copy of each
   is a reference pointer the runtime points at the host global when the image loads
   (libomptarget 19/22 itself; libomptarget 16's nextgen plugin, not its classic one:
   the first kernel then reads through a null pointer).
   feature: requires-usm, declare-target-globals, declare-target-link
   run: -
   run: LIBOMPTARGET_NEXTGEN_PLUGINS=0
*/
#include <omp.h>
#include <stdio.h>
#pragma omp requires unified_shared_memory
#pragma omp declare target
int counter = 10;
double table[4] = {1, 2, 3, 4};
#pragma omp end declare target
int linked[3] = {7, 8, 9};
#pragma omp declare target link(linked)
int main(void) {
  counter = 20;
  int seen = -1;
#pragma omp target map(from : seen)
  {
    seen = counter;
    counter += 1;
    for (int i = 0; i < 4; i++) table[i] *= 2;
  }
  printf("seen=%d host counter=%d table0=%.0f table3=%.0f\n", seen, counter, table[0],
         table[3]);
  int sum = -1;
#pragma omp target map(from : sum)
  {
    sum = linked[0] + linked[1] + linked[2];
    linked[1] = 80;
  }
  printf("linked sum=%d linked1=%d\n", sum, linked[1]);
  counter = 5;
#pragma omp target update to(counter)
#pragma omp target map(from : seen)
  seen = counter;
#pragma omp target update from(counter)
  printf("after update seen=%d counter=%d\n", seen, counter);
  /* the rows are the reference pointers', not the host globals' */
  int dev = omp_get_default_device();
  void *m = omp_get_mapped_ptr(&counter, dev);
  printf("present=%d mapped=%s\n", omp_target_is_present(&counter, dev),
         m == 0 ? "null" : m == (void *)&counter ? "host" : "other");
  return 0;
}
