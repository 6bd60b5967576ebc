/* mappers for nested structs in C++ (a mapper that uses another type's mapper).
   feature: declare-mapper
*/
#include <cstdio>
#include <cstdlib>
struct Inner { int n; int *v; };
struct Outer { Inner a, b; int tag; };
#pragma omp declare mapper(Inner i) map(i, i.v[0 : i.n])
#pragma omp declare mapper(Outer o) map(o.a, o.b, o.tag)
int main() {
  Outer o;
  o.tag = 9;
  o.a.n = 3; o.a.v = (int *)calloc(3, sizeof(int));
  o.b.n = 2; o.b.v = (int *)calloc(2, sizeof(int));
#pragma omp target map(tofrom : o)
  {
    for (int i = 0; i < o.a.n; i++) o.a.v[i] = o.tag + i;
    for (int i = 0; i < o.b.n; i++) o.b.v[i] = -o.tag - i;
  }
  std::printf("a=%d,%d,%d b=%d,%d\n", o.a.v[0], o.a.v[1], o.a.v[2], o.b.v[0], o.b.v[1]);
  std::free(o.a.v);
  std::free(o.b.v);
  return 0;
}
