/* A descriptor without images whose one requires entry asks for unified shared
   memory, registered by main: under libomptarget 22.1 an EntryTy record is read
   whatever its Version (0 and 2 as well as 1: PluginManager::upgradeLegacyEntries
   looks at Reserved only), so the later constructs share host memory (y=5); 19.1 reads
   the 32-byte record this program builds for it and applies it too; 16 ignores
   requires entries (y=1).
   feature: requires-entries
   run: 0
   run: 1
   run: 2
   modes: exe
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#if __clang_major__ >= 20
struct entry { uint64_t reserved; uint16_t version, kind; uint32_t flags;
               void *addr; const char *name; uint64_t size, data; void *aux; };
#define REQUIRES(v, f) {0, (uint16_t)(v), 1, 0x10, 0, ".requires", 0, (f), 0}
#else
struct entry { void *addr; const char *name; uint64_t size; int32_t flags, data; };
#define REQUIRES(v, f) {0, ".requires", 0, 0x10, (f)}
#endif
struct bin_desc { int32_t n; void *images; struct entry *begin, *end; };
void __tgt_register_lib(struct bin_desc *);
void __tgt_unregister_lib(struct bin_desc *);
int main(int argc, char **argv) {
  int version = argc > 1 ? atoi(argv[1]) : 0;
  static struct entry table[1];
  static struct bin_desc desc = {0, 0, table, table + 1};
  table[0] = (struct entry)REQUIRES(version, 0x8);
  __tgt_register_lib(&desc);
  int x[1] = {1}, y = 0;
#pragma omp target enter data map(to : x)
  x[0] = 5;
#pragma omp target map(from : y)
  y = x[0];
  printf("version=%d y=%d\n", version, y);
#pragma omp target exit data map(delete : x)
  __tgt_unregister_lib(&desc);
  return 0;
}
