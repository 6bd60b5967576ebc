/* an image with declare-target globals and no kernel: target update moves them.
   feature: declare-target-globals, image-no-kernel, target-update
*/
#include <stdio.h>
#pragma omp declare target
int gv[3] = {7, 8, 9};
#pragma omp end declare target
int main(void) {
  gv[0] = 0;
#pragma omp target update from(gv)
  printf("gv=%d %d %d\n", gv[0], gv[1], gv[2]);
  gv[2] = 90;
#pragma omp target update to(gv[2 : 1])
  gv[2] = 0;
#pragma omp target update from(gv[2 : 1])
  printf("gv2=%d\n", gv[2]);
  return 0;
}
