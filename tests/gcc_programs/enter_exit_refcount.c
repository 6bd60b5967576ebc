/* GCC conformance program: target enter/exit data with reference counts: two enters,
 * release, from on the last reference, delete, always, and omp_target_is_present after
 * each step, checked against what the reference counts say (on the initial device there
 * is nothing to check, so both print "ok").
 * osh-expect: same */
#include <omp.h>
#include <stdio.h>

static int on_dev(void *p)
{
  int d = omp_get_default_device();
  if (d == omp_get_initial_device())
    return -1;                      /* nothing to check on the host */
  return omp_target_is_present(p, d);
}

static void show(const char *what, int *x, int expect_present)
{
  int r = on_dev(x);
  printf("%-18s %s\n", what, r < 0 || r == expect_present ? "ok" : "WRONG");
}

int main(void)
{
  int x[16];
  for (int i = 0; i < 16; i++)
    x[i] = i;
  show("start", x, 0);
#pragma omp target enter data map(to: x)
#pragma omp target enter data map(to: x)
  show("two enters", x, 1);
#pragma omp target
  for (int i = 0; i < 16; i++)
    x[i] += 100;
#pragma omp target exit data map(release: x)
  show("one release", x, 1);
#pragma omp target exit data map(from: x)
  show("from (last ref)", x, 0);
  printf("x[0]=%d x[15]=%d\n", x[0], x[15]);

#pragma omp target enter data map(to: x[0:8])
#pragma omp target enter data map(to: x[0:8])
#pragma omp target exit data map(delete: x[0:8])
  show("delete", x, 0);

#pragma omp target enter data map(to: x)
  for (int i = 0; i < 16; i++)
    x[i] = -i;
#pragma omp target map(always, to: x)
  for (int i = 0; i < 16; i++)
    x[i] *= 3;
#pragma omp target exit data map(always, from: x)
  printf("always: x[1]=%d x[15]=%d\n", x[1], x[15]);
  show("end", x, 0);
  return 0;
}
