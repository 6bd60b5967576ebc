/* offloading from an atexit handler and from a destructor function, after main.
   feature: exit-path
*/
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static int v = 1;
static void at_exit(void) {
  int r = 0, host = -1;
#pragma omp target map(from : r, host) map(to : v)
  {
    r = v + 100;
    host = omp_is_initial_device();
  }
  printf("atexit r=%d on_host=%d\n", r, host);
}
__attribute__((destructor)) static void dtor(void) {
  int r = 0, host = -1;
#pragma omp target map(from : r, host)
  {
    r = 55;
    host = omp_is_initial_device();
  }
  printf("destructor r=%d on_host=%d\n", r, host);
}
int main(void) {
  atexit(at_exit);
#pragma omp target map(tofrom : v)
  v = 41;
  printf("main v=%d\n", v);
  return 0;
}
