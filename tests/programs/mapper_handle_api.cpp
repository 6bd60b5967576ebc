/* __tgt_push_mapper_component / __tgt_mapper_num_components on handles the program makes:
   libomptarget's handle is an llvm::SmallVector (buffer, 32-bit size and capacity, one
   element inline); a std::vector handle (llvm-project's declare_mapper_api.cpp test) and
   a SmallVector-shaped one grow as libomptarget grows them, and their destructors free
   what it allocated.
   feature: declare-mapper, mapper-handle
*/
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <vector>

struct MapComponentInfoTy {
  void *Base;
  void *Begin;
  int64_t Size;
  int64_t Type;
  void *Name;
};
struct MapperComponentsTy {
  std::vector<MapComponentInfoTy> Components;
};
/* llvm::SmallVector<MapComponentInfoTy> as libomptarget lays it out */
struct SmallComponents {
  MapComponentInfoTy *BeginX;
  uint32_t Size, Capacity;
  MapComponentInfoTy Inline[1];
  SmallComponents() : BeginX(Inline), Size(0), Capacity(1) {}
  ~SmallComponents() {
    if (BeginX != Inline)
      free(BeginX);
  }
};

extern "C" {
int64_t __tgt_mapper_num_components(void *rt_mapper_handle);
void __tgt_push_mapper_component(void *rt_mapper_handle, void *base, void *begin,
                                 int64_t size, int64_t type, void *name);
}

typedef struct { int n; int *p; } vec_t;
#pragma omp declare mapper(vec_t v) map(v, v.p[0 : v.n])

int main() {
  static int cells[8];
  {
    MapperComponentsTy MC;
    __tgt_push_mapper_component((void *)&MC, &cells[0], &cells[0], 4, 3, nullptr);
    __tgt_push_mapper_component((void *)&MC, &cells[1], &cells[1], 4, 3, nullptr);
    printf("vector handle: num=%" PRId64 "\n", __tgt_mapper_num_components((void *)&MC));
  }
  {
    SmallComponents SC;
    __tgt_push_mapper_component(&SC, &cells[0], &cells[0], 4, 1, nullptr);
    printf("small handle: num=%" PRId64 " inline=%d capacity=%u\n",
           __tgt_mapper_num_components(&SC), SC.BeginX == SC.Inline, SC.Capacity);
    for (int i = 1; i < 8; i++) {
      __tgt_push_mapper_component(&SC, &cells[i], &cells[i], 4 * i, 0x10 + i, nullptr);
      printf("  push %d: num=%" PRId64 " inline=%d capacity=%u\n", i,
             __tgt_mapper_num_components(&SC), SC.BeginX == SC.Inline, SC.Capacity);
    }
    for (uint32_t i = 0; i < SC.Size; i++)
      printf("  [%u] begin=cells+%d size=%" PRId64 " type=0x%" PRIx64 "\n", i,
             (int)((int *)SC.BeginX[i].Begin - cells), SC.BeginX[i].Size,
             (uint64_t)SC.BeginX[i].Type);
  }
  vec_t v = {6, (int *)calloc(6, sizeof(int))};
#pragma omp target map(tofrom : v)
  for (int i = 0; i < v.n; ++i) v.p[i] = 2 * i + 1;
  int s = 0;
  for (int i = 0; i < v.n; i++) s += v.p[i];
  printf("mapper region: sum=%d\n", s);
  free(v.p);
  return 0;
}
