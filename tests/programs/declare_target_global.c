/* declare target globals: the device copy is separate, target update moves it.
   feature: declare-target-to, declare-target-globals, target-update
*/
#include <stdio.h>
#pragma omp declare target
int counter = 10;
double table[4] = {1, 2, 3, 4};
#pragma omp end declare target
int main(void) {
  counter = 20;
#pragma omp target
  {
    counter += 1;
    for (int i = 0; i < 4; i++) table[i] *= 2;
  }
  printf("host counter=%d table0=%.0f\n", counter, table[0]);
#pragma omp target update from(counter, table)
  printf("after update counter=%d table3=%.0f\n", counter, table[3]);
  counter = 0;
#pragma omp target update to(counter)
  int seen = -1;
#pragma omp target map(from : seen)
  seen = counter;
  printf("seen=%d\n", seen);
  return 0;
}
