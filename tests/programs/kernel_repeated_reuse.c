/* kernel constructs with rows of their own repeated (offload_shim keeps their device
   memory between repeats in C) and device blocks read before they are written: the
   nextgen plugins' memory manager gives a construct the block the previous one freed
   (a `map(from:)` region that reads its block sees what `map(to:)` of another construct
   left there), and a `target data map(alloc:)` opened after a loop gets the block the
   loop's last construct freed, with the value that construct left in it; two blocks
   of one size change places from one construct to the next.
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
  /* two blocks of one size: each construct gets them in the other order (freed the
     last argument first, handed out the least recently freed first), so a `map(from:)`
     reads what the other map's block held */
  long u = 5, w = 9, acc = 0;
#pragma omp target map(to: u, w)
  { }
  for (int it = 0; it < 30; it++) {
#pragma omp target map(from: u, w)
    { long t = u; u = w + 1; w = t + 2; }
    acc = (acc * 3 + u * 7 + w) % 1000003;
  }
  printf("swap %ld %ld %ld\n", u, w, acc);
  return 0;
}
