/* requires unified_shared_memory with the close modifier: close maps get device
   copies, other maps do not.
   feature: requires-usm, map-close
*/
#include <stdio.h>
#pragma omp requires unified_shared_memory
int main(void) {
  int a = 1, b = 1;
  void *pa = 0, *pb = 0;
#pragma omp target map(close, tofrom : a) map(tofrom : b) map(from : pa, pb)
  { pa = &a; pb = &b; a = 2; b = 2; }
  printf("close=%s plain=%s a=%d b=%d\n", pa == &a ? "same" : "copied",
         pb == &b ? "same" : "copied", a, b);
  return 0;
}
