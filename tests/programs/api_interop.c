/* The interop construct (OpenMP 5.1: clang calls __tgt_interop_init / _use / _destroy)
   with a program built by clang 19 or 22: no plugin offers a foreign runtime (libomptarget
   19.1's and 22.1's x86_64 host plugin as the LLVM 16 plugins under offload_shim), so
   init gives omp_interop_none -- 19.1 after asking the plugin for its device info (the
   nextgen plugin's "PluginInterface" error line), 22.1 silently -- and destroy of it does
   nothing; targetsync waits for its depend clause first (22.1); 22.1's use of it does
   nothing, 19.1's dereferences it (SIGSEGV, see docs/conformance.md); the property
   getters (libomp forwards them to the program's own libomptarget) dereference it too.
   feature: api-interop
   clang: 19 22
   run: -
   run: OMP_TARGET_OFFLOAD=disabled
   run: use
   run: sync
   run: getter
*/
#include <omp.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  int dev = omp_get_default_device();
  omp_interop_t obj = omp_interop_none;
  int x = 0;
  printf("case=%s\n", what);
  fflush(stdout);
  if (!strcmp(what, "sync")) {
#pragma omp parallel num_threads(2)
#pragma omp single
    {
#pragma omp task depend(out: x) shared(x)
      x = 42;
#pragma omp interop init(targetsync: obj) device(dev) depend(inout: x)
      printf("after init x=%d\n", x);
    }
  } else {
#pragma omp interop init(target: obj) device(dev)
  }
  printf("obj=%s\n", obj == omp_interop_none ? "none" : "set");
  fflush(stdout);
  if (!strcmp(what, "use")) {
#pragma omp interop use(obj) device(dev)
    printf("used\n");
    fflush(stdout);
  }
  if (!strcmp(what, "getter")) {
    int rc = 0;
    long id = (long)omp_get_interop_int(obj, omp_ipr_fr_id, &rc);
    printf("fr_id=%ld rc=%d\n", id, rc);
    fflush(stdout);
  }
#pragma omp interop destroy(obj) device(dev)
  printf("destroyed obj=%s\n", obj == omp_interop_none ? "none" : "set");
  return 0;
}
