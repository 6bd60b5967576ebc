/* A host with no offload image of its own (built without OpenMP): dlopen an offload
 * library, run its target region, dlclose it (unless the third argument is "keep"),
 * argv[2] times.  Prints one line per cycle where something differs from the first. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
  int n = argc > 2 ? atoi(argv[2]) : 20, keep = argc > 3 && !strcmp(argv[3], "keep");
  int on = 0, wrong = 0, first = -1;
  for (int i = 0; i < n; i++) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "%s\n", dlerror());
      return 2;
    }
    int (*where)(int, int *) = (int (*)(int, int *))dlsym(h, "lib_where");
    int twice = 0, dev = where(i, &twice);
    wrong += twice != 2 * i;
    on += dev;
    if (first < 0)
      first = dev;
    else if (dev != first)
      printf("cycle %d: on the %s\n", i, dev ? "device" : "host");
    if (!keep)
      dlclose(h);
  }
  printf("cycles %d on device %d wrong %d\n", n, on, wrong);
  return 0;
}
