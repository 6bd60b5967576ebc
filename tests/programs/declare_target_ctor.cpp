/* constructors and destructors of declare-target globals run on the device when the
   image is loaded / unloaded (the device copy is built by its own constructor).
   feature: declare-target-ctor-dtor, declare-target-globals
*/
#include <cstdio>
struct Counter {
  int value;
  Counter() : value(41) { value += 1; }
  ~Counter() {}
};
#pragma omp declare target
Counter g;
#pragma omp end declare target
int main() {
  int seen = 0;
  g.value = 7;
#pragma omp target map(from : seen)
  seen = g.value;
  std::printf("device value=%d host value=%d\n", seen, g.value);
  return 0;
}
