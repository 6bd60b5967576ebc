/* GCC-specific target regions for offload_shim's interposer (issue 7, libgomp path).
 *
 * Build (nvptx offload image; keep any CUDA ptxas off the PATH: GCC 12's nvptx-as
 * then skips its verification step):
 *   gcc -fopenmp -foffload=nvptx-none -foffload-options=nvptx-none=-misa=sm_80 \
 *       -shared -fPIC -O1 gomp_regions.c -o libgomp_regions.so
 * Without a usable device libgomp runs every region through gomp_target_fallback; these
 * functions observe what that fallback does besides calling the region's host version:
 *   osh_gomp_level_in_target: the region runs with a fresh thread state (omp_get_level()
 *     is 0 inside a target region entered from a parallel region);
 *   osh_gomp_parallel_in_target: a parallel region inside the target region forms its own
 *     team (GOMP_parallel keeps resolving to libgomp);
 *   osh_gomp_nowait_depend: target nowait + depend + taskwait;
 *   osh_gomp_device(d): target device(d) (d outside 0..n-1 is fatal under
 *     OMP_TARGET_OFFLOAD=mandatory unless it is the initial device).
 */
#include <omp.h>
#include <stdint.h>

int64_t osh_gomp_level_in_target(void)
{
  int64_t levels = 0;
#pragma omp parallel num_threads(2) reduction(+ : levels)
  {
    int lvl = -1;
#pragma omp target map(from: lvl)
    lvl = omp_get_level();
    levels += 10 + lvl;                   /* 10 per thread when the level is reset */
  }
  return levels;
}

int64_t osh_gomp_parallel_in_target(void)
{
  int64_t sum = 0;
#pragma omp target map(tofrom: sum)
  {
#pragma omp parallel num_threads(3) reduction(+ : sum)
    sum += omp_get_thread_num() + 100;
  }
  return sum;
}

int64_t osh_gomp_nowait_depend(void)
{
  int a[64], b = 0;
  for (int i = 0; i < 64; i++) a[i] = i;
#pragma omp target map(tofrom: a) depend(out: a) nowait
  for (int i = 0; i < 64; i++) a[i] *= 3;
#pragma omp target map(to: a) map(tofrom: b) depend(in: a) nowait
  for (int i = 0; i < 64; i++) b += a[i];
#pragma omp taskwait
  return b;
}

int64_t osh_gomp_device(int64_t d)
{
  int64_t x = 41;
#pragma omp target device(d) map(tofrom: x)
  x += 1;
  return x;
}
