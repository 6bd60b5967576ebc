/* declare target link: the global is mapped on demand by the constructs that use it.
   feature: declare-target-link
*/
#include <stdio.h>
int big[100];
#pragma omp declare target link(big)
int main(void) {
  for (int i = 0; i < 100; i++) big[i] = i;
#pragma omp target map(tofrom : big)
  for (int i = 0; i < 100; i++) big[i] += 1;
  long s = 0;
  for (int i = 0; i < 100; i++) s += big[i];
  printf("sum=%ld\n", s);
  return 0;
}
