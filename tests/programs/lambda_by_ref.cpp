/* a lambda that captures by reference, mapped into a region: its captured pointers
   point to device memory there.
   feature: lambda-by-ref
*/
#include <cstdio>
int main() {
  int a[8], total = 0;
  for (int i = 0; i < 8; i++) a[i] = i;
  int *pa = a;
  auto body = [&](int i) { pa[i] *= 3; };
#pragma omp target map(tofrom : a) map(to : body)
  for (int i = 0; i < 8; i++) body(i);
  for (int i = 0; i < 8; i++) total += a[i];
  std::printf("total=%d\n", total);
  return 0;
}
