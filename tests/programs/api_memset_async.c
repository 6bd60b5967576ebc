/* omp_target_memset_async (OpenMP 6.0; libomptarget 19.1 / 22.1 fill on the device in a
   hidden-helper task with the depend objects given) and omp_target_memset: device
   memory filled and read back after taskwait, a fill ordered before an asynchronous copy
   by depend objects, fills made by the tasks of a parallel region, the initial device,
   a NULL pointer and zero bytes (the pointer comes back, nothing is filled), the
   returned pointer.
   feature: api-target-memset-async
   clang: 19 22
   run: -
   run: OMP_TARGET_OFFLOAD=disabled
*/
#include <omp.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  unsigned char g[64];
  unsigned char *d = omp_target_alloc(sizeof g, dev);

  void *r1 = omp_target_memset(d, 0x11, sizeof g, dev);
  void *r2 = omp_target_memset_async(d + 8, 0x22, 16, dev, 0, NULL);
#pragma omp taskwait
  memset(g, 0, sizeof g);
  omp_target_memcpy(g, d, sizeof g, 0, 0, host, dev);
  printf("ret %d %d bytes %x %x %x %x\n", r1 == d, r2 == d + 8, g[0], g[8], g[23], g[24]);

  /* fill, then copy back, ordered by depend objects on the same variable */
  omp_depend_t fill, read;
#pragma omp depobj(fill) depend(out: d)
#pragma omp depobj(read) depend(in: d)
  memset(g, 0, sizeof g);
  omp_target_memset_async(d, 0x5a, sizeof g, dev, 1, &fill);
  omp_target_memcpy_async(g, d, sizeof g, 0, 0, host, dev, 1, &read);
#pragma omp taskwait
  printf("ordered %x %x\n", g[0], g[63]);
#pragma omp depobj(fill) destroy
#pragma omp depobj(read) destroy

  /* the tasks of a parallel region each fill a quarter and wait for their fill (the
     fill is the task's child: neither the task's end nor the region's barrier waits
     for it -- under libomptarget as here) */
#pragma omp parallel num_threads(4)
#pragma omp single
  for (int c = 0; c < 4; c++) {
#pragma omp task firstprivate(c)
    {
      omp_target_memset_async(d + 16 * c, 0x30 + c, 16, dev, 0, NULL);
#pragma omp taskwait
    }
  }
  memset(g, 0, sizeof g);
  omp_target_memcpy(g, d, sizeof g, 0, 0, host, dev);
  printf("quarters %x %x %x %x\n", g[0], g[16], g[32], g[63]);

  /* the initial device, NULL and zero bytes */
  unsigned char hbuf[8] = {0};
  void *r3 = omp_target_memset_async(hbuf, 0x7f, 4, host, 0, NULL);
  void *r4 = omp_target_memset_async(NULL, 1, 4, dev, 0, NULL);
  void *r5 = omp_target_memset_async(d, 0, 0, dev, 0, NULL);
  void *r6 = omp_target_memset(NULL, 1, 4, dev);
  void *r7 = omp_target_memset(d, 0x44, 0, dev);
#pragma omp taskwait
  memset(g, 0, sizeof g);
  omp_target_memcpy(g, d, 4, 0, 0, host, dev);
  printf("host %x %x null %d %d zero %d %d unchanged %x\n", hbuf[0], hbuf[4], r4 == NULL,
         r6 == NULL, r5 == d, r7 == d, g[0]);
  omp_target_free(d, dev);
  return 0;
}
