/* an array of structs and a 2-D array, mapped as sections.
   feature: map-tofrom, map-partial-struct
*/
#include <stdio.h>
typedef struct { float x, y, z; int id; } particle;
int main(void) {
  particle ps[50];
  float grid[8][8];
  for (int i = 0; i < 50; i++) ps[i] = (particle){i, 2.0f * i, 0, i};
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) grid[i][j] = i + j;
#pragma omp target map(tofrom : ps[10 : 20], grid[2 : 4][0 : 8])
  {
    for (int i = 10; i < 30; i++) ps[i].z = ps[i].x + ps[i].y;
    for (int i = 2; i < 6; i++)
      for (int j = 0; j < 8; j++) grid[i][j] *= -1;
  }
  printf("z15=%.0f z40=%.0f g3=%.0f g7=%.0f\n", ps[15].z, ps[40].z, grid[3][3], grid[7][7]);
  return 0;
}
