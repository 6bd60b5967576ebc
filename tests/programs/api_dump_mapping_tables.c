/* ompx_dump_mapping_tables (libomptarget 19.1 / 22.1): the mapping table of every
   device on stdout (LIBOMPTARGET_INFO need not be set) -- "table empty" for a device with
   no mapping, else the heading at libomptarget:0:0, the columns and one row per mapping
   with its reference counts and, built with -g, the mapped expression and its place;
   before anything is mapped, with data entered on two devices, inside a target data
   region (a hold count with ompx_hold), after everything left.  The program's own lines
   and the dump share stdout's buffer (nothing flushed in between).
   feature: api-dump-mapping-tables
   clang: 19 22
   cflags: -g
   run: -
*/
#include <omp.h>
#include <stdio.h>
void ompx_dump_mapping_tables(void);

int main(void) {
  int a[16] = {0}, b[8] = {0}, c[4] = {0};
  int other = omp_get_num_devices() > 1 ? 1 : 0;
  printf("before\n");
  ompx_dump_mapping_tables();
#pragma omp target enter data map(to: a) device(other)
#pragma omp target enter data map(alloc: b[2:4])
#pragma omp target enter data map(to: b[2:4])
  printf("entered\n");
  ompx_dump_mapping_tables();
#pragma omp target data map(ompx_hold, tofrom: c)
  {
    printf("in data region\n");
    ompx_dump_mapping_tables();
  }
#pragma omp target exit data map(delete: a) device(other)
#pragma omp target exit data map(release: b[2:4])
#pragma omp target exit data map(release: b[2:4])
  printf("after\n");
  ompx_dump_mapping_tables();
  return 0;
}
