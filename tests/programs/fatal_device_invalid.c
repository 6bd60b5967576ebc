/* a construct on a device number that does not exist: libomptarget 16's report and
   fatal error (four lines); 19.1's and 22.1's one fatal line (22.1 prints the
   construct's arguments first under LIBOMPTARGET_INFO=1, 19.1 does not); data
   directives too.
   feature: diagnostics, fatal, device-numbering
   run: target
   run: data
   run: LIBOMPTARGET_INFO=1 target
   run: LIBOMPTARGET_INFO=1 data
*/
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  int x = 0;
  setvbuf(stdout, NULL, _IONBF, 0);
  printf("start\n");
  if (argc > 1 && !strcmp(argv[1], "data")) {
#pragma omp target enter data map(to : x) device(17)
  } else {
#pragma omp target device(17) map(tofrom : x)
    x++;
  }
  printf("x=%d\n", x);
  return 0;
}
