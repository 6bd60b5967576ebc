/* kernel constructs with rows of their own repeated (offload_shim keeps their device
   memory between repeats in C) and device blocks read before they are written: the
   nextgen plugins' memory manager gives a construct the block the previous one freed
   (a `map(from:)` region that reads its block sees what `map(to:)` of another construct
   left there), and a `target data map(alloc:)` opened after a loop gets the block the
   loop's last construct freed, with the value that construct left in it.
   feature: map-from, memory-manager
   run: -
   run: OFFLOAD_SHIM_NO_REPEAT=1
*/
#include <stdio.h>
#define N 64
static long x = 0;
int main(void) {
  int a[N], b[N];
  long tot = 0;
  for (int it = 0; it < 20; it++) {
    for (int i = 0; i < N; i++) b[i] = it * 100 + i;
#pragma omp target map(to: b[0:N])
    { b[0] += 0; }
#pragma omp target map(from: a[0:N])
    { for (int i = 0; i < N; i++) a[i] = a[i] + 1; }
    tot += a[5];
  }
  printf("tot %ld\n", tot);
  for (int it = 0; it < 10; it++) {
#pragma omp target map(tofrom: x)
    { x += 1; }
  }
#pragma omp target data map(alloc: x)
  {
    for (int it = 0; it < 10; it++) {
#pragma omp target map(tofrom: x)
      { x += 1; }
    }
#pragma omp target update from(x)
    printf("in %ld\n", x);
  }
  for (int it = 0; it < 10; it++) {
#pragma omp target map(tofrom: x)
    { x += 1; }
  }
  printf("end %ld\n", x);
  return 0;
}
