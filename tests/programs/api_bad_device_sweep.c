/* Every device-memory routine of libomptarget 16's API (omp_target_alloc/free/memcpy/
   memcpy_rect/is_present/associate_ptr/disassociate_ptr, omp_get_mapped_ptr,
   llvm_omp_target_alloc_* / free_* / lock_mem / unlock_mem) called with device numbers
   below 0, every device, the initial device, one past it and far beyond; pointers are
   always ones the routine may use (device memory of that device, host memory), so the
   only misuse is the device number.  Results and the runtime's reports are compared.
   feature: api-bad-device
   run: -
   run: LIBOMPTARGET_INFO=32
*/
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
void *llvm_omp_target_alloc_device(size_t, int);
void *llvm_omp_target_alloc_host(size_t, int);
void *llvm_omp_target_alloc_shared(size_t, int);
void llvm_omp_target_free_device(void *, int);
void llvm_omp_target_free_host(void *, int);
void llvm_omp_target_free_shared(void *, int);
void *llvm_omp_target_lock_mem(void *, size_t, int);
void llvm_omp_target_unlock_mem(void *, int);

static int ndev, host;

static int valid(int d) { return d >= 0 && d < ndev; }

/* Device memory of d holding v (host memory when d is not a device). */
static void *buffer(int d, int v) {
  if (!valid(d)) {
    int *p = malloc(sizeof(int));
    *p = v;
    return p;
  }
  void *p = omp_target_alloc(sizeof(int), d);
  omp_target_memcpy(p, &v, sizeof v, 0, 0, d, host);
  return p;
}

static void release(void *p, int d) {
  if (valid(d))
    omp_target_free(p, d);
  else
    free(p);
}

static void one(const char *f, int d) {
  int x = 5, y = 0;
  long r = -99;
  if (!strcmp(f, "alloc") || !strcmp(f, "alloc_device") || !strcmp(f, "alloc_host") ||
      !strcmp(f, "alloc_shared")) {
    void *p = !strcmp(f, "alloc") ? omp_target_alloc(8, d)
              : !strcmp(f, "alloc_device") ? llvm_omp_target_alloc_device(8, d)
              : !strcmp(f, "alloc_host") ? llvm_omp_target_alloc_host(8, d)
                                         : llvm_omp_target_alloc_shared(8, d);
    r = p != 0;
    if (p && !strcmp(f, "alloc_host"))
      llvm_omp_target_free_host(p, d);
    else if (p && !strcmp(f, "alloc_shared"))
      llvm_omp_target_free_shared(p, d);
    else if (p && !strcmp(f, "alloc_device"))
      llvm_omp_target_free_device(p, d);
    else if (p)
      omp_target_free(p, d);
  } else if (!strcmp(f, "free") || !strcmp(f, "free_device")) {
    /* a device's own memory on that device; host memory for any other number */
    void *p = valid(d) ? omp_target_alloc(8, d) : malloc(8);
    if (!strcmp(f, "free"))
      omp_target_free(p, d);
    else
      llvm_omp_target_free_device(p, d);
    if (!valid(d) && d != host)
      free(p);        /* nothing freed it */
    r = 0;
  } else if (!strcmp(f, "is_present")) {
    r = omp_target_is_present(&x, d);
  } else if (!strcmp(f, "mapped_ptr")) {
    r = omp_get_mapped_ptr(&x, d) != 0;
  } else if (!strcmp(f, "memcpy_to") || !strcmp(f, "memcpy_from") || !strcmp(f, "rect_to") ||
             !strcmp(f, "rect_from")) {
    void *b = buffer(d, 7);
    size_t v[1] = {1}, o[1] = {0}, dm[1] = {1};
    if (!strcmp(f, "memcpy_to"))
      r = omp_target_memcpy(b, &x, sizeof x, 0, 0, d, host);
    else if (!strcmp(f, "memcpy_from"))
      r = omp_target_memcpy(&y, b, sizeof y, 0, 0, host, d);
    else if (!strcmp(f, "rect_to"))
      r = omp_target_memcpy_rect(b, &x, sizeof x, 1, v, o, o, dm, dm, d, host);
    else
      r = omp_target_memcpy_rect(&y, b, sizeof y, 1, v, o, o, dm, dm, host, d);
    if (r == 0 && !strcmp(f, "memcpy_to"))
      omp_target_memcpy(&y, b, sizeof y, 0, 0, host, valid(d) ? d : host);
    release(b, d);
    r = r * 100 + y;
  } else if (!strcmp(f, "associate")) {
    void *b = buffer(d, 3);
    r = omp_target_associate_ptr(&x, b, sizeof x, 0, d);
    r = r * 10 + omp_target_disassociate_ptr(&x, d);
    release(b, d);
  } else if (!strcmp(f, "disassociate")) {
    r = omp_target_disassociate_ptr(&x, d);
  } else if (!strcmp(f, "lock")) {
    void *p = llvm_omp_target_lock_mem(&x, sizeof x, d);
    r = p != 0;
    llvm_omp_target_unlock_mem(&x, d);
  }
  printf("%s(%d) -> %ld\n", f, d, r);
  fflush(stdout);
}

int main(int argc, char **argv) {
  static const char *all[] = {"alloc", "alloc_device", "alloc_host", "alloc_shared", "free",
                              "free_device", "is_present", "mapped_ptr", "memcpy_to",
                              "memcpy_from", "rect_to", "rect_from", "associate",
                              "disassociate", "lock", 0};
  ndev = omp_get_num_devices();
  host = omp_get_initial_device();
  int devs[] = {-5, -2, -1, 0, 1, ndev - 1, ndev, ndev + 1, 100, -100000};
  printf("devices=%d initial=%d\n", ndev, host);
  for (const char **f = argc > 1 ? (const char **)argv + 1 : all; *f; f++)
    for (unsigned i = 0; i < sizeof devs / sizeof *devs; i++)
      one(*f, devs[i]);
  return 0;
}
