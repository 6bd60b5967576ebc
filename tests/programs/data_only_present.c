/* data directives only, 'present' on a variable that was never mapped: fatal.
   feature: map-present, image-no-kernel, fatal
   run: enter
   run: data
   run: exit
   run: update
*/
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  int v = 1;
  const char *m = argc > 1 ? argv[1] : "enter";
  if (!strcmp(m, "enter")) {
#pragma omp target enter data map(present, alloc : v)
  } else if (!strcmp(m, "data")) {
#pragma omp target data map(present, to : v)
    v++;
  } else if (!strcmp(m, "exit")) {
#pragma omp target exit data map(present, release : v)
  } else {
#pragma omp target update to(present : v)
  }
  printf("still here after %s\n", m);
  return 0;
}
