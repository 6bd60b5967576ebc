/* C++: std::vector data mapped through data() and size().
   feature: cpp, map-tofrom
*/
#include <cstdio>
#include <numeric>
#include <vector>
int main() {
  std::vector<float> a(1000), b(1000);
  std::iota(a.begin(), a.end(), 0.0f);
  float *pa = a.data(), *pb = b.data();
  int n = (int)a.size();
#pragma omp target teams distribute parallel for map(to : pa[0 : n]) map(from : pb[0 : n])
  for (int i = 0; i < n; i++) pb[i] = pa[i] * 2.0f + 1.0f;
  std::printf("b0=%.1f b999=%.1f sum=%.1f\n", b[0], b[999], std::accumulate(b.begin(), b.end(), 0.0f));
  return 0;
}
