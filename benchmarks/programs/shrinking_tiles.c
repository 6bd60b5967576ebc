/* A tiled solver whose working set shrinks and grows again (adaptive refinement):
   each sweep maps a tile of n doubles with `target enter data`, runs a kernel on it,
   and unmaps it with `target exit data`; n goes down from 1000 to 100 by 10% steps and
   back up, three tiles live at once.  argv[1]: sweeps (default 100). */
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  long sweeps = argc > 1 ? atol(argv[1]) : 100;
  double *t[3];
  for (int k = 0; k < 3; k++) {
    t[k] = malloc(1000 * sizeof(double));
    for (int i = 0; i < 1000; i++) t[k][i] = k;
  }
  double check = 0;
  for (long s = 0; s < sweeps; s++) {
    int n = 1000;
    for (int step = 0; step < 44; step++) {
      n = step < 22 ? n - n / 10 : n + n / 9;
      if (n < 100) n = 100;
      if (n > 1000) n = 1000;
      for (int k = 0; k < 3; k++) {
        double *a = t[k];
        int m = n - 7 * k;
#pragma omp target enter data map(to : a[0 : m])
#pragma omp target map(tofrom : check)
        check += a[m - 1];
#pragma omp target exit data map(release : a[0 : m])
      }
    }
  }
  printf("%.0f\n", check);
  return 0;
}
