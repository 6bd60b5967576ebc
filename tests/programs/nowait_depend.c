/* target nowait with depend clauses, then taskwait.
   feature: nowait, depend
*/
#include <stdio.h>
int main(void) {
  int a = 1, b = 0, c = 0;
#pragma omp parallel
#pragma omp single
  {
#pragma omp target nowait map(tofrom : a) depend(out : a)
    a += 10;
#pragma omp target nowait map(to : a) map(from : b) depend(in : a) depend(out : b)
    b = a * 2;
#pragma omp target nowait map(to : b) map(from : c) depend(in : b)
    c = b + 1;
#pragma omp taskwait
  }
  printf("a=%d b=%d c=%d\n", a, b, c);
  return 0;
}
