/* First-private arguments packed into one device buffer as libomptarget 16's
   PrivateArgumentManagerTy does: each takes Size + Size % 8 bytes at the running sum
   (13 bytes take 18; 1024 bytes is the most packed, 1025 get their own allocation); the
   DATA_TRANSFER line shows the packed size and a neighbouring mapping's name.
   feature: firstprivate
   run: LIBOMPTARGET_INFO=32 a
   run: LIBOMPTARGET_INFO=32 b
   run: LIBOMPTARGET_INFO=32 c
   run: c
   cflags: -g
*/
#include <stdio.h>
#include <string.h>
typedef struct { char v[3]; } s3;
typedef struct { char v[13]; } s13;
typedef struct { int v[3]; } s12;
typedef struct { double d; char c; } s16;
typedef struct { char v[1024]; } s1024;
typedef struct { char v[1025]; } s1025;
int main(int argc, char **argv) {
  char which = argc > 1 ? argv[1][0] : 'c';
  s3 a = {{1, 2, 3}};
  s13 b;
  s12 c = {{4, 5, 6}};
  s16 d = {2.5, 7};
  static s1024 e;
  static s1025 f;
  char g[5] = "abcd", h[7] = "abcdef", k[9] = "abcdefgh";
  memset(b.v, 9, sizeof b.v);
  memset(e.v, 1, sizeof e.v);
  memset(f.v, 2, sizeof f.v);
  long r = 0;
  if (which == 'a') {
#pragma omp target firstprivate(a, b, c, g) map(from : r)
    r = a.v[2] + b.v[12] + c.v[1] + g[3];
  } else if (which == 'b') {
#pragma omp target firstprivate(d, h, k, a) map(from : r)
    r = (long)(d.d * 2) + d.c + h[5] + k[7] + a.v[0];
  } else {
#pragma omp target firstprivate(b, e, f, c) map(from : r)
    r = b.v[0] + e.v[1023] + f.v[1024] + c.v[2];
  }
  printf("%c r=%ld\n", which, r);
  return 0;
}
