/* lambdas capturing scalars by reference and by value inside a region.
   feature: lambda-by-ref, map-tofrom
*/
#include <cstdio>
int main() {
  int n = 5, acc = 0;
  double w = 1.5, out = 0;
  auto f = [&]() { acc += n; out += w * n; };
#pragma omp target map(tofrom : acc, out) map(to : n, w, f)
  {
    f();
    f();
  }
  std::printf("acc=%d out=%.1f\n", acc, out);
  return 0;
}
