/* requires flags that disagree with the first ones registered.  libomptarget 16 takes
   them from __tgt_register_requires (clang-16 calls it from each translation unit; here
   main calls it a second time): a value that differs in reverse_offload,
   unified_address or unified_shared_memory is fatal ("Libomptarget fatal error 1:
   '#pragma omp requires X' not used consistently!", abort); 19.1 and 22.1 only say
   that entry point was removed, and take the flags from the requires entries of each
   registered descriptor ("desc": a second descriptor, without images, carrying one
   requires entry in the layout of the compiler's release): fatal error 2, and they
   compare dynamic_allocators too.
   feature: requires-consistency
   run: legacy 1
   run: legacy 0xc
   run: legacy 0x18
   run: desc 1
   run: desc 8
   run: desc 0xc
   run: desc 0x18
   modes: exe
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#pragma omp requires unified_shared_memory
#if __clang_major__ >= 20
struct entry { uint64_t reserved; uint16_t version, kind; uint32_t flags;
               void *addr; const char *name; uint64_t size, data; void *aux; };
#define REQUIRES(f) {0, 1, 1, 0x10, 0, ".requires", 0, (f), 0}
#else
struct entry { void *addr; const char *name; uint64_t size; int32_t flags, data; };
#define REQUIRES(f) {0, ".requires", 0, 0x10, (f)}
#endif
struct bin_desc { int32_t n; void *images; struct entry *begin, *end; };
void __tgt_register_lib(struct bin_desc *);
void __tgt_unregister_lib(struct bin_desc *);
void __tgt_register_requires(int64_t);
int main(int argc, char **argv) {
  long flags = argc > 2 ? strtol(argv[2], 0, 0) : 1;
  int a[1] = {1};
  setvbuf(stdout, NULL, _IONBF, 0);
#pragma omp target map(tofrom : a)
  a[0]++;
  printf("a=%d\n", a[0]);
  if (argc > 1 && !strcmp(argv[1], "legacy")) {
    __tgt_register_requires(flags);
  } else {
    static struct entry table[1];
    static struct bin_desc desc = {0, 0, table, table + 1};
    table[0] = (struct entry)REQUIRES(flags);
    __tgt_register_lib(&desc);
    __tgt_unregister_lib(&desc);
  }
  printf("registered %#lx\n", flags);
  return 0;
}
