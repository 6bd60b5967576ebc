/* begin declare target indirect (clang 19+): a host function pointer reaches a region
   and is called there; the runtime maps each indirect function to the device function
   (the device global of the entry holds its address).
   feature: declare-target-indirect
   clang: 19 22
*/
#include <omp.h>
#include <stdio.h>
#pragma omp begin declare target indirect
int add_one(int x) { return x + 1; }
int twice(int x) { return 2 * x; }
int square(int x) { return x * x; }
#pragma omp end declare target
typedef int (*fn_t)(int);
fn_t table[3] = {add_one, twice, square};
int main(void) {
  int dev = omp_get_default_device();
  for (int i = 0; i < 3; i++) {
    fn_t f = table[i];
    int r = -1;
#pragma omp target firstprivate(f) map(from : r)
    r = f(10);
    printf("f%d(10)=%d\n", i, r);
  }
  /* the function pointers of a struct passed by value */
  struct { fn_t f, g; } pair = {square, add_one};
  int r2 = -1;
#pragma omp target firstprivate(pair) map(from : r2)
  r2 = pair.f(pair.g(3));
  printf("square(add_one(3))=%d\n", r2);
  void *d = omp_get_mapped_ptr((void *)twice, dev);
  printf("present=%d mapped=%s\n", omp_target_is_present((void *)twice, dev),
         d == 0 ? "null" : d == (void *)twice ? "host" : "device");
  fn_t g = (fn_t)d;
  int r3 = -1;
#pragma omp target firstprivate(g) map(from : r3)
  r3 = g(21);
  printf("mapped(21)=%d\n", r3);
  return 0;
}
