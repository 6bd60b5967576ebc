/* a device constructor and destructor that print: the destructor runs at exit, after
   main returns.
   feature: declare-target-ctor-dtor, exit-path
*/
#include <cstdio>
struct Noisy {
  int id;
  Noisy() : id(3) {}
  ~Noisy() { std::printf("dtor %d\n", id); }
};
#pragma omp declare target
Noisy n;
#pragma omp end declare target
int main() {
  int v = 0;
#pragma omp target map(from : v)
  v = n.id * 2;
  std::printf("v=%d\n", v);
  return 0;
}
