/* always: copies although the data is already present.
   feature: map-always, target-data
*/
#include <stdio.h>
int main(void) {
  int v = 1, seen_plain = 0, seen_always = 0;
#pragma omp target data map(to : v)
  {
    v = 2;
#pragma omp target map(to : v) map(from : seen_plain)
    seen_plain = v;
#pragma omp target map(always, to : v) map(from : seen_always)
    seen_always = v;
#pragma omp target map(always, from : v)
    v = 7;
    printf("inside: v=%d\n", v);
  }
  printf("plain=%d always=%d v=%d\n", seen_plain, seen_always, v);
  return 0;
}
