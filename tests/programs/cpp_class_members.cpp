/* C++: member functions and templates called in regions, a class mapped with its
   array member, this captured in a region.
   feature: cpp, map-member-of
*/
#include <cstdio>
#pragma omp declare target
template <typename T> T twice(T x) { return x + x; }
#pragma omp end declare target
struct Grid {
  int n;
  double v[16];
  void scale(double f) {
#pragma omp target map(tofrom : this->v[0 : n]) map(to : f)
    for (int i = 0; i < n; i++) v[i] = twice(v[i]) * f;
  }
};
int main() {
  Grid g;
  g.n = 16;
  for (int i = 0; i < 16; i++) g.v[i] = i;
  g.scale(0.5);
  int ti = 0;
#pragma omp target map(from : ti)
  ti = twice(21);
  std::printf("v15=%.1f ti=%d\n", g.v[15], ti);
  return 0;
}
