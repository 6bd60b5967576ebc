/* begin declare target indirect under requires unified_shared_memory: the indirect
   entries keep their device function pointers (libomptarget 22.1 skips them when it
   points the globals' reference pointers at the host; 19.1 writes them too and dies
   on the read-only global: a known difference).
   feature: declare-target-indirect, requires-usm
   clang: 19 22
*/
#include <omp.h>
#include <stdio.h>
#pragma omp requires unified_shared_memory
#pragma omp begin declare target indirect
int add_one(int x) { return x + 1; }
int twice(int x) { return 2 * x; }
#pragma omp end declare target
#pragma omp declare target
int bias = 100;
#pragma omp end declare target
typedef int (*fn_t)(int);
int main(void) {
  fn_t table[2] = {add_one, twice};
  bias = 1000;
  for (int i = 0; i < 2; i++) {
    fn_t f = table[i];
    int r = -1;
#pragma omp target firstprivate(f) map(from : r)
    r = f(10) + bias;
    printf("f%d(10)+bias=%d\n", i, r);
  }
  return 0;
}
