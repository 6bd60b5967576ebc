/* the program's own exit status and exit() from main after offloading.
   feature: exit-path
   run: 0
   run: 3
   run: exit
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
  int x = 1;
#pragma omp target map(tofrom : x)
  x *= 7;
  printf("x=%d\n", x);
  if (argc > 1 && !strcmp(argv[1], "exit"))
    exit(5);
  return argc > 1 ? atoi(argv[1]) : 0;
}
