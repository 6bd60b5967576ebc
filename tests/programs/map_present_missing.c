/* present on data that is not mapped: libomptarget's message, then a fatal error;
   stdout written before the abort is lost exactly as with the real runtime.
   feature: map-present, diagnostics, fatal
   run: target
   run: enter
   run: partial
*/
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  int a[8] = {0};
  const char *m = argc > 1 ? argv[1] : "target";
  printf("before %s\n", m);
  if (!strcmp(m, "target")) {
#pragma omp target map(present, to : a)
    a[0] = 1;
  } else if (!strcmp(m, "enter")) {
#pragma omp target enter data map(present, to : a[2:4])
  } else {
#pragma omp target enter data map(to : a[0:4])
#pragma omp target map(present, tofrom : a)
    a[0] = 1;
  }
  printf("after %s %d\n", m, a[0]);
  return 0;
}
