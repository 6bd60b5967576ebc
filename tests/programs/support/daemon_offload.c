/* A library whose target region a Python host's daemon threads run in a loop
 * (tests/test_interpose_exit_threads.py, support/daemon_host.py). */
int sum8(int k) {
  int a[8], s = 0;
  for (int i = 0; i < 8; i++)
    a[i] = i * k;
#pragma omp target map(tofrom : a) map(tofrom : s)
  for (int i = 0; i < 8; i++)
    s += a[i];
  return s;
}
