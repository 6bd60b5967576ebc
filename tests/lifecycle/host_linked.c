/* An OpenMP program linked to offload libraries (DT_NEEDED): lib_where (kernel),
 * lib_data (data directives only); with -DOWN_KERNEL it has a target region of its own;
 * argv[1], when given, is an offload library to dlopen (and dlclose unless argv[2] is
 * "keep").  Output is buffered (stdout piped): a crash at exit loses it. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int lib_where(int x, int *twice);
int lib_data(int x);

int main(int argc, char **argv)
{
  int twice = 0, dev = lib_where(21, &twice);
  printf("lib_where dev=%d twice=%d\n", dev, twice);
  printf("lib_data %d\n", lib_data(5));
#ifdef OWN_KERNEL
  int z = 0;
#pragma omp target map(from : z)
  z = 5;
  printf("own kernel z=%d\n", z);
#endif
  if (argc > 1) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "%s\n", dlerror());
      return 2;
    }
    int (*where)(int, int *) = (int (*)(int, int *))dlsym(h, "lib_where");
    dev = where(4, &twice);
    printf("dlopened dev=%d twice=%d\n", dev, twice);
    if (argc < 3 || strcmp(argv[2], "keep"))
      dlclose(h);
  }
  printf("done\n");
  return 0;
}
