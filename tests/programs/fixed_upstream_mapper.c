/* a struct mapped through a declare mapper that attaches its pointer member, mapped
   again by a region (with always, or plainly: the mapper's struct component is copied
   again while its count is 1): the device struct keeps the device pointer, so the
   region's writes reach the pointee (libomptarget 16 and 19.1 lose them, 22.1
   attaches again; docs/conformance.md "Fixed upstream",
   struct-copy-over-attached-pointer).
   feature: fixed-upstream, declare-mapper, map-always
   modes: exe
   run: -
   run: plain
*/
#include <stdio.h>
#include <string.h>
struct T { int n; int *p; };
#pragma omp declare mapper(struct T t) map(t, t.p[0 : t.n])
int main(int argc, char **argv) {
  int plain = argc > 1 && strcmp(argv[1], "plain") == 0;
  int data[4] = {1, 2, 3, 4};
  struct T t = {4, data};
#pragma omp target enter data map(to : t)
  if (plain) {
#pragma omp target map(to : t)
    {
      for (int i = 0; i < t.n; i++)
        t.p[i] *= 10;
    }
  } else {
#pragma omp target map(always, to : t)
    {
      for (int i = 0; i < t.n; i++)
        t.p[i] *= 10;
    }
  }
#pragma omp target exit data map(from : t)
  printf("%d %d %d %d\n", data[0], data[1], data[2], data[3]);
  return 0;
}
