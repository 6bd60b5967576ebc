/* Rows of varying length mapped one at a time (a ragged array: sparse-matrix rows,
   particle lists per cell): each step maps a row of 100..1000 doubles (800..8000
   bytes, inside the pool's 8 KiB threshold) to the device, sums it in a target region
   and frees it.  Row lengths come from a fixed LCG, so every run sees the same sizes.
   argv[1]: steps (default 2000). */
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  long steps = argc > 1 ? atol(argv[1]) : 2000;
  double *row = malloc(1000 * sizeof(double));
  for (int i = 0; i < 1000; i++) row[i] = 1.0;
  unsigned x = 12345;
  double total = 0;
  for (long s = 0; s < steps; s++) {
    x = x * 1103515245u + 12345u;
    int n = 100 + (int)((x >> 8) % 901);
    double sum = 0;
#pragma omp target map(to : row[0 : n]) map(tofrom : sum)
    for (int i = 0; i < n; i++) sum += row[i];
    total += sum;
  }
  printf("%.0f\n", total);
  free(row);
  return 0;
}
