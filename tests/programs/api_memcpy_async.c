/* omp_target_memcpy_async and omp_target_memcpy_rect_async (OpenMP 5.1; libomptarget
   19.1 / 22.1 run each as a hidden-helper task of libomp with the depend objects given;
   clang-16's omp.h declares them but libomptarget 16 has none): host->device->host
   with taskwait, a chain ordered by depend objects, copies made in a parallel region and
   consumed by tasks with depend clauses, a target nowait region that depends on a copy,
   device to device, host to host, NULL pointers (-1 at once), a zero length, the
   dimension query and 2-D sub-volumes.  Results are printed by the main thread after
   the waits.
   feature: api-target-memcpy-async
   clang: 19 22
   run: -
   run: OMP_TARGET_OFFLOAD=disabled
   run: LIBOMP_USE_HIDDEN_HELPER_TASK=0
*/
#include <omp.h>
#include <stdio.h>
#include <string.h>

#define N 64

static int sum(const int *a, int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += a[i];
  return s;
}

int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int ndev = omp_get_num_devices();
  int h[N], g[N];
  for (int i = 0; i < N; i++) h[i] = i + 1;
  int *d = omp_target_alloc(N * sizeof(int), dev);

  /* no depend objects, outside any parallel region: taskwait waits for it */
  int rc1 = omp_target_memcpy_async(d, h, sizeof h, 0, 0, dev, host, 0, NULL);
#pragma omp taskwait
  memset(g, 0, sizeof g);
  int rc2 = omp_target_memcpy_async(g, d, sizeof g, 0, 0, host, dev, 0, NULL);
#pragma omp taskwait
  printf("plain rc=%d %d sum=%d g[63]=%d\n", rc1, rc2, sum(g, N), g[N - 1]);

  /* a chain ordered by depend objects: h -> d (offset 16 bytes), d -> g */
  omp_depend_t out_d, in_d;
#pragma omp depobj(out_d) depend(out: d)
#pragma omp depobj(in_d) depend(in: d)
  for (int i = 0; i < N; i++) h[i] = 100 + i;
  memset(g, 0, sizeof g);
  int rc3 = omp_target_memcpy_async(d, h, 8 * sizeof(int), 16, 0, dev, host, 1, &out_d);
  int rc4 = omp_target_memcpy_async(g, d, 8 * sizeof(int), 0, 16, host, dev, 1, &in_d);
#pragma omp taskwait
  printf("chain rc=%d %d g[0]=%d g[7]=%d g[8]=%d\n", rc3, rc4, g[0], g[7], g[8]);
#pragma omp depobj(out_d) destroy
#pragma omp depobj(in_d) destroy

  /* in a parallel region: four chunks copied, each read back by a task that depends on
     its copy; the barrier at the end of the region waits for all of them */
  int part[4] = {0, 0, 0, 0};
  for (int i = 0; i < N; i++) h[i] = 2 * i;
#pragma omp parallel num_threads(4)
#pragma omp single
  {
    for (int c = 0; c < 4; c++) {
      omp_depend_t o;
      int *chunk = h + 16 * c;
#pragma omp depobj(o) depend(out: chunk[0])
      omp_target_memcpy_async(d, chunk, 16 * sizeof(int), 16 * c * sizeof(int), 0, dev,
                              host, 1, &o);
#pragma omp task depend(in: chunk[0]) firstprivate(c) shared(part)
      {
        int tmp[16];
        omp_target_memcpy(tmp, d, sizeof tmp, 0, 16 * c * sizeof(int), host, dev);
        part[c] = sum(tmp, 16);
      }
#pragma omp depobj(o) destroy
    }
  }
  printf("parallel parts %d %d %d %d\n", part[0], part[1], part[2], part[3]);

  /* a target nowait region that depends on an asynchronous copy through a variable */
  int token = 0, seen = -1;
  omp_depend_t tok;
#pragma omp depobj(tok) depend(out: token)
  for (int i = 0; i < N; i++) h[i] = 7;
  omp_target_memcpy_async(d, h, sizeof h, 0, 0, dev, host, 1, &tok);
#pragma omp target nowait depend(in: token) is_device_ptr(d) map(from: seen) device(dev)
  {
    int s = 0;
    for (int i = 0; i < N; i++) s += d[i];
    seen = s;
  }
#pragma omp taskwait
  printf("nowait target seen=%d\n", seen);
#pragma omp depobj(tok) destroy

  /* device to device (the first two devices when there are two) and host to host */
  if (ndev >= 2) {
    int *e = omp_target_alloc(N * sizeof(int), 1);
    omp_target_memcpy_async(e, d, sizeof h, 0, 0, 1, dev, 0, NULL);
#pragma omp taskwait
    memset(g, 0, sizeof g);
    omp_target_memcpy(g, e, sizeof g, 0, 0, host, 1);
    printf("device to device sum=%d\n", sum(g, N));
    omp_target_free(e, 1);
  }
  int hh[4] = {0, 0, 0, 0}, src[4] = {5, 6, 7, 8};
  int rc5 = omp_target_memcpy_async(hh, src, sizeof src, 0, 0, host, host, 0, NULL);
#pragma omp taskwait
  printf("host to host rc=%d %d %d %d %d\n", rc5, hh[0], hh[1], hh[2], hh[3]);

  /* NULL pointers fail at once; a zero length is a task that copies nothing */
  int rc6 = omp_target_memcpy_async(NULL, h, 4, 0, 0, dev, host, 0, NULL);
  int rc7 = omp_target_memcpy_async(d, NULL, 4, 0, 0, dev, host, 0, NULL);
  int rc8 = omp_target_memcpy_async(d, h, 0, 0, 0, dev, host, 0, NULL);
#pragma omp taskwait
  printf("null rc=%d %d zero rc=%d\n", rc6, rc7, rc8);

  /* rectangles: the query, a NULL pointer, a 2-D sub-volume there and back */
  int q = omp_target_memcpy_rect_async(NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, dev,
                                       host, 0, NULL);
  int m[6][8], back[6][8];
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 8; j++) m[i][j] = 10 * i + j;
  memset(back, 0, sizeof back);
  size_t dims[2] = {6, 8}, zero[2] = {0, 0}, vol[2] = {3, 4}, off[2] = {2, 3};
  int rc9 = omp_target_memcpy_rect_async(NULL, m, sizeof(int), 2, vol, zero, zero, dims,
                                         dims, dev, host, 0, NULL);
  omp_depend_t r_out, r_in;
#pragma omp depobj(r_out) depend(out: m)
#pragma omp depobj(r_in) depend(in: m)
  int rc10 = omp_target_memcpy_rect_async(d, m, sizeof(int), 2, dims, zero, zero, dims,
                                          dims, dev, host, 1, &r_out);
  int rc11 = omp_target_memcpy_rect_async(back, d, sizeof(int), 2, vol, off, off, dims,
                                          dims, host, dev, 1, &r_in);
#pragma omp taskwait
  printf("rect query=%d null=%d rc=%d %d\n", q, rc9, rc10, rc11);
  for (int i = 0; i < 6; i++) {
    for (int j = 0; j < 8; j++) printf("%3d", back[i][j]);
    printf("\n");
  }
#pragma omp depobj(r_out) destroy
#pragma omp depobj(r_in) destroy
  omp_target_free(d, dev);
  return 0;
}
