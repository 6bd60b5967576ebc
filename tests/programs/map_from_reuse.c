/* map(from:) data a region reads before it writes it: its device block is one a
   previous construct freed, the same every run (the nextgen plugins' memory manager,
   LLVM's MemoryManagerTy: a block of exactly the size, the least recently freed of
   them first).  The cheap path of offload-shim run and its general code
   (OFFLOAD_SHIM_NO_PLAN=1) alike.
   feature: map-from, memory-manager
   run: -
   run: OFFLOAD_SHIM_NO_PLAN=1
*/
#include <stdio.h>
#define N 64
static int sum(const int *v, int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return s;
}
int main(void) {
  int a[N], b[N], c[N], d[N];
  double w[N / 4];
  for (int i = 0; i < N; i++) a[i] = 3 * i + 1;
#pragma omp target map(to : a)
  { a[0] += 0; }
  /* b gets a's block: it still holds a */
#pragma omp target map(from : b)
  {
    int s = 0;
    for (int i = 0; i < N; i++) s += b[i];
    for (int i = 0; i < N; i++) b[i] = i;
    b[0] = s;
  }
  printf("b: first region's data, sum=%d\n", b[0]);
  /* the same region again and again: each run reads what the previous one left */
  for (int k = 0; k < 3; k++) {
#pragma omp target map(from : c)
    {
      int s = 0;
      for (int i = 0; i < N; i++) s += c[i];
      for (int i = 0; i < N; i++) c[i] = k + 1;
      c[1] = s;
    }
    printf("run %d: c1=%d\n", k, c[1]);
  }
  /* a block of another size in between leaves it alone */
  for (int i = 0; i < N / 4; i++) w[i] = 0.5;
#pragma omp target map(tofrom : w)
  { w[0] += 1; }
  /* a data region takes the block the last kernel freed */
#pragma omp target enter data map(alloc : d)
#pragma omp target update from(d)
  printf("enter data: sum=%d\n", sum(d, N));
  for (int i = 0; i < N; i++) d[i] = 5;
#pragma omp target update to(d)
#pragma omp target exit data map(delete : d)
  /* ... and a kernel takes the block the data region freed */
#pragma omp target map(from : c)
  {
    int s = 0;
    for (int i = 0; i < N; i++) s += c[i];
    c[0] = s;
  }
  printf("after exit data: c0=%d\n", c[0]);
  /* two blocks of one size: a construct frees its rows in reverse argument order and
     the next request of the size gets the least recently freed block */
  int x[N], y[N], p[N], q[N];
  for (int i = 0; i < N; i++) {
    x[i] = 1;
    y[i] = 2;
  }
#pragma omp target map(tofrom : x, y)
  { x[0] += 0; y[0] += 0; }
#pragma omp target map(from : p, q)
  {
    int sp = 0, sq = 0;
    for (int i = 0; i < N; i++) {
      sp += p[i];
      sq += q[i];
    }
    for (int i = 0; i < N; i++) p[i] = q[i] = 3;
    p[0] = sp;
    q[0] = sq;
  }
  printf("two blocks: p0=%d q0=%d\n", p[0], q[0]);
  for (int k = 0; k < 3; k++) {
#pragma omp target map(from : q)
    {
      int s = 0;
      for (int i = 0; i < N; i++) s += q[i];
      for (int i = 0; i < N; i++) q[i] = 10 + k;
      q[0] = s;
    }
    printf("two blocks, run %d: q0=%d\n", k, q[0]);
  }
  return 0;
}
