/* the if clause: false runs the region on the host; data directives with if(false)
   do nothing.
   feature: kernel-if
*/
#include <omp.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int on_host = -1, on_dev = -1, v = 3;
  (void)argv;
#pragma omp target if (argc > 5) map(from : on_host)
  on_host = omp_is_initial_device();
#pragma omp target if (argc > 0) map(from : on_dev)
  on_dev = omp_is_initial_device();
#pragma omp target enter data map(to : v) if (0)
  printf("host=%d dev=%d present=%d\n", on_host, on_dev,
         omp_target_is_present(&v, omp_get_default_device()));
  return 0;
}
