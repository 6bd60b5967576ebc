/* four host threads map the same and different data at once: enter/exit data with
   reference counts, target update, target data, kernels reading shared data and
   writing their own, kernels whose threads ask omp_target_is_present (the operations
   of each thread drawn from the seed argument).  After the join: every buffer,
   whether the shared ones are present, and how many `exit data` each takes until it
   is gone (its reference count).
   feature: kernel-threads, target-enter-data, target-exit-data, target-update, target-data
   run: 1
   run: 77
*/
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#define T 4
#define NS 3
#define NP 2
#define LEN 32
#define STEPS 40
static long S[NS][LEN];
static long P[T][NP][LEN];

static unsigned draw(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (*s >> 16) & 0x7fff;
}

int main(int argc, char **argv) {
  unsigned seed = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 1;
  int steps = argc > 2 ? atoi(argv[2]) : STEPS;
  for (int s = 0; s < NS; s++)
    for (int i = 0; i < LEN; i++)
      S[s][i] = 1000 * s + i;
  for (int t = 0; t < T; t++)
    for (int p = 0; p < NP; p++)
      for (int i = 0; i < LEN; i++)
        P[t][p][i] = 100 * t + 10 * p + i;
  int held[T][NS] = {{0}}, absent[T] = {0}, team = 0;
  omp_set_max_active_levels(2); /* the parallel loops inside kernels get threads */
#pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num();
    if (t == 0)
      team = omp_get_num_threads();
    unsigned st = seed * 7919u + (unsigned)t * 104729u;
    for (int step = 0; step < steps; step++) {
      int op = draw(&st) % 8, s = draw(&st) % NS, p = draw(&st) % NP;
      long *sb = S[s], *pb = P[t][p];
      switch (op) {
      case 0: {
#pragma omp target enter data map(to : sb[0 : LEN])
        held[t][s]++;
        break;
      }
      case 1:
        if (held[t][s]) {
#pragma omp target exit data map(release : sb[0 : LEN])
          held[t][s]--;
        }
        break;
      case 2:
#pragma omp target map(tofrom : pb[0 : LEN]) map(to : sb[0 : LEN])
        for (int i = 0; i < LEN; i++)
          pb[i] += sb[i] % 7 + 1;
        break;
      case 3:
        if (held[t][s]) {
          absent[t] += !omp_target_is_present(sb, 0);
#pragma omp target update to(sb[0 : LEN])
#pragma omp target update from(sb[0 : LEN])
        }
        break;
      case 4:
#pragma omp target data map(to : pb[0 : LEN], sb[0 : LEN])
        {
#pragma omp target
          for (int i = 0; i < LEN; i++)
            pb[i] += sb[i] % 3 + 2;
#pragma omp target update from(pb[0 : LEN])
        }
        break;
      case 5: {
#pragma omp target enter data map(to : pb[0 : LEN])
#pragma omp target
        for (int i = 0; i < LEN; i++)
          pb[i] += 3;
#pragma omp target exit data map(from : pb[0 : LEN])
        break;
      }
      case 6:
        if (held[t][s]) {
#pragma omp target exit data map(from : sb[0 : LEN])
          held[t][s]--;
        }
        break;
      case 7: {
        uintptr_t hs = (uintptr_t)sb;
        int seen = 0;
#pragma omp target map(tofrom : seen) firstprivate(hs)
#pragma omp parallel for num_threads(2) reduction(+ : seen)
        for (int i = 0; i < 4; i++)
          seen += omp_target_is_present((void *)hs, 0);
        absent[t] += held[t][s] && seen != 4;
        break;
      }
      }
    }
  }
  printf("team of %d, shared data absent while held: %d %d %d %d\n", team, absent[0],
         absent[1], absent[2], absent[3]);
  for (int t = 0; t < T; t++)
    for (int p = 0; p < NP; p++) {
      long sum = 0;
      for (int i = 0; i < LEN; i++)
        sum += P[t][p][i] * (i + 1);
      printf("P[%d][%d] %ld\n", t, p, sum);
    }
  for (int s = 0; s < NS; s++) {
    long sum = 0;
    int total = 0;
    for (int i = 0; i < LEN; i++)
      sum += S[s][i] * (i + 1);
    for (int t = 0; t < T; t++)
      total += held[t][s];
    int present = omp_target_is_present(S[s], 0), exits = 0;
    long *sb = S[s];
    while (omp_target_is_present(sb, 0) && exits < 1000) {
#pragma omp target exit data map(release : sb[0 : LEN])
      exits++;
    }
    printf("S[%d] %ld held %d present %d exits until absent %d\n", s, sum, total, present,
           exits);
  }
  return 0;
}
