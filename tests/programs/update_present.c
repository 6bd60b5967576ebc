/* target update with the present motion modifier on unmapped data: fatal.
   feature: update-present, diagnostics, fatal
   run: to
   run: from
*/
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  double v[2] = {1, 2};
  setvbuf(stdout, NULL, _IONBF, 0);
  printf("start\n");
  if (argc > 1 && !strcmp(argv[1], "from")) {
#pragma omp target update from(present : v)
  } else {
#pragma omp target update to(present : v[1:1])
  }
  printf("not reached\n");
  return 0;
}
