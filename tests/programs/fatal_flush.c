/* a fatal error after buffered stdout (pipe: full buffering): what was printed with
   printf is lost in the abort, what was flushed is kept, exactly as libomptarget does.
   feature: diagnostics, fatal, exit-path
*/
#include <stdio.h>
int main(void) {
  printf("flushed line\n");
  fflush(stdout);
  printf("buffered line\n");
  int v = 0;
#pragma omp target update to(present : v)
  printf("never\n");
  return 0;
}
