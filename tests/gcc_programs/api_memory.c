/* GCC conformance program: omp_target_alloc / omp_target_memcpy / omp_target_free with
 * is_device_ptr regions, omp_target_memcpy_rect, omp_target_associate_ptr /
 * disassociate_ptr, on the default device (the host where there is none).
 * osh-expect: same */
#include <omp.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  enum { N = 100 };
  int h[N];
  for (int i = 0; i < N; i++)
    h[i] = i;
  int *d = omp_target_alloc(N * sizeof(int), dev);
  printf("alloc %s\n", d ? "ok" : "failed");
  int rc = omp_target_memcpy(d, h, N * sizeof(int), 0, 0, dev, host);
  printf("memcpy to: %d\n", rc);
#pragma omp target is_device_ptr(d) device(dev)
  for (int i = 0; i < N; i++)
    d[i] = d[i] * d[i];
  memset(h, 0, sizeof h);
  rc = omp_target_memcpy(h, d, 10 * sizeof(int), 0, 90 * sizeof(int), host, dev);
  printf("memcpy from: %d h[0]=%d h[9]=%d\n", rc, h[0], h[9]);

  /* a 4x5 block out of a 10x10 matrix */
  int m[10][10], blk[4][5];
  for (int i = 0; i < 10; i++)
    for (int j = 0; j < 10; j++)
      m[i][j] = 10 * i + j;
  size_t vol[2] = {4, 5}, doff[2] = {0, 0}, soff[2] = {3, 2};
  size_t ddim[2] = {10, 10}, sdim[2] = {10, 10};
  rc = omp_target_memcpy_rect(d, m, sizeof(int), 2, vol, doff, soff, ddim, sdim, dev, host);
  size_t ddim2[2] = {4, 5};
  rc |= omp_target_memcpy_rect(blk, d, sizeof(int), 2, vol, doff, doff, ddim2, ddim, host,
                               dev);
  printf("rect: %d blk[0][0]=%d blk[3][4]=%d\n", rc, blk[0][0], blk[3][4]);
  printf("rect dims: %d\n", omp_target_memcpy_rect(NULL, NULL, 0, 0, NULL, NULL, NULL, NULL,
                                                   NULL, dev, host) > 2);

  int x[N];
  for (int i = 0; i < N; i++)
    x[i] = 1;
  rc = omp_target_associate_ptr(x, d, sizeof x, 0, dev);
  printf("associate: %s\n", (rc == 0) == (dev != host) ? "ok" : "WRONG");
  if (rc == 0) {
    omp_target_memcpy(d, x, sizeof x, 0, 0, dev, host);
#pragma omp target map(tofrom: x) device(dev)
    for (int i = 0; i < N; i++)
      x[i] += 1;
    omp_target_memcpy(x, d, sizeof x, 0, 0, host, dev);
    rc = omp_target_disassociate_ptr(x, dev);
    printf("disassociate: %d\n", rc);
  } else {
    for (int i = 0; i < N; i++)
      x[i] += 1;
    printf("disassociate: 0\n");
  }
  printf("x[0]=%d x[99]=%d\n", x[0], x[99]);
  omp_target_free(d, dev);
  printf("present(NULL)=%d\n", omp_target_is_present(NULL, dev));
  return 0;
}
