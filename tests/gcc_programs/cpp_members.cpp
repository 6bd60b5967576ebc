/* GCC conformance program (C++, g++-12): regions in member functions mapping sections
 * through the object's pointer member, a reference mapped tofrom, a std::vector's data.
 * osh-expect: same */
#include <cstdio>
#include <vector>

struct Grid {
  int n;
  double *v;

  double sum() const
  {
    double s = 0;
#pragma omp target map(to: v[0:n]) map(tofrom: s)
    for (int i = 0; i < n; i++)
      s += v[i];
    return s;
  }

  void scale(double f)
  {
#pragma omp target map(tofrom: v[0:n])
    for (int i = 0; i < n; i++)
      v[i] *= f;
  }
};

int main()
{
  std::vector<double> d(100);
  for (int i = 0; i < 100; i++)
    d[i] = i;
  Grid g{100, d.data()};
  g.scale(2.0);
  double &r = d[5];
#pragma omp target map(tofrom: r)
  r += 1000;
  std::printf("sum=%g d[5]=%g d[99]=%g\n", g.sum(), d[5], d[99]);
  return 0;
}
