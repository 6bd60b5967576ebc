/* How libomptarget 16 reads its environment: LIBOMPTARGET_INFO with std::stoi at the
   first construct that asks for it (no hex: 0x40 is 0; leading blanks, a sign and
   trailing text are accepted; no digits or a value beyond 32 bits ends the program with
   std::terminate, after what was printed before), LIBOMPTARGET_NEXTGEN_PLUGINS as a
   BoolEnvar (exact words only: 00 and 2 keep the default, the nextgen plugin, whose
   kernel line INFO 0x10 shows), LIBOMPTARGET_DEBUG with std::stoi at the first INFO
   statement (not 0: the release build prints no INFO line at all).
   feature: env-info, env-nextgen-plugins
   run: LIBOMPTARGET_INFO=0x40
   run: LIBOMPTARGET_INFO=+3abc
   run: LIBOMPTARGET_INFO=abc
   run: LIBOMPTARGET_INFO=
   run: LIBOMPTARGET_INFO=4294967295
   run: LIBOMPTARGET_INFO=16 LIBOMPTARGET_NEXTGEN_PLUGINS=00
   run: LIBOMPTARGET_INFO=16 LIBOMPTARGET_NEXTGEN_PLUGINS=Off
   run: LIBOMPTARGET_DEBUG=1 LIBOMPTARGET_INFO=-1
   run: LIBOMPTARGET_DEBUG=0 LIBOMPTARGET_INFO=-1
   run: LIBOMPTARGET_DEBUG=abc
*/
#include <omp.h>
#include <stdio.h>
int main(void) {
  int x = 1;
  printf("devices=%d\n", omp_get_num_devices());
  fflush(stdout);
#pragma omp target enter data map(to : x)
  printf("entered\n");
  fflush(stdout);
#pragma omp target map(tofrom : x)
  x += 41;
#pragma omp target exit data map(delete : x)
  printf("x=%d\n", x);
  return 0;
}
