/* Kernels for liboffload's CUDA device (tests/test_liboffload_gpu.py), built with clang 22:
 *   clang-22 --target=nvptx64-nvidia-cuda -march=sm_52 -O2 -c -emit-llvm \
 *            -o ol_kernels.nvptx.bc ol_kernels.c   (LLVM bitcode: liboffload's CUDA plugin JITs it)
 *   clang-22 --target=nvptx64-nvidia-cuda -march=sm_52 -O2 -S -o ol_kernels.ptx ol_kernels.c
 * (Debian clang version 22.1.8 (1~deb12u1)).  The same kernels and global as
 * native/samples/kernels.c: increment(p, n), vec_add(a, b, c, n), double osh_scale = 3.0. */
__attribute__((nvptx_kernel)) void increment(long *p, long n) {
  for (long i = 0; i < n; i++) p[i] += 1;
}

__attribute__((nvptx_kernel)) void vec_add(const double *a, const double *b, double *c, long n) {
  for (long i = 0; i < n; i++) c[i] = a[i] + b[i];
}

double osh_scale = 3.0;
