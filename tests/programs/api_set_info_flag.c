/* __tgt_set_info_flag turns LIBOMPTARGET_INFO output on at run time (data transfers).
   feature: env-info, api-set-info-flag
*/
#include <stdint.h>
#include <stdio.h>
void __tgt_set_info_flag(uint32_t);
int main(void) {
  int a[4] = {1, 2, 3, 4};
#pragma omp target map(tofrom : a)
  a[0] = 5;
  __tgt_set_info_flag(0x20);
#pragma omp target map(tofrom : a)
  a[1] = 6;
  __tgt_set_info_flag(0);
#pragma omp target map(tofrom : a)
  a[2] = 7;
  printf("%d %d %d %d\n", a[0], a[1], a[2], a[3]);
  return 0;
}
