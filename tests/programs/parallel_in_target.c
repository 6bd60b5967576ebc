/* a parallel region inside a target region, with a critical section.
   feature: kernel-parallel
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int count = 0, hits[64] = {0};
#pragma omp target map(tofrom : count, hits)
#pragma omp parallel num_threads(4)
  {
#pragma omp for
    for (int i = 0; i < 64; i++) hits[i] = 1;
#pragma omp critical
    count++;
  }
  int s = 0;
  for (int i = 0; i < 64; i++) s += hits[i];
  printf("threads=%d hits=%d\n", count, s);
  return 0;
}
