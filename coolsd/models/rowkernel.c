/* coolsd row kernel (coolsd/models/rowkernel.py): y = x @ W in fp32 for a few rows, each weight read once.

   x: (M, K) fp32, row stride ldx floats; wp: W (K, N) packed as (N / 16, K, 16) fp32, so that the 16 columns a
   block computes lie in one contiguous stream; y: (M, N) fp32, contiguous. Rows go six at a time: 12 AVX2
   accumulators (two of 8 columns a row) and two weight registers. Each output is one FMA chain over k in order,
   so a row's result does not depend on how many rows share the call. N must be a multiple of 16. */
#include <immintrin.h>

#define ROWS_KERNEL(R)                                                                              \
  static void rows_##R(const float *x, long ldx, const float *wp, float *y, int K, int N) {         \
    for (int nb = 0; nb < N / 16; nb++) {                                                           \
      __m256 lo[R], hi[R];                                                                          \
      for (int r = 0; r < R; r++) { lo[r] = _mm256_setzero_ps(); hi[r] = _mm256_setzero_ps(); }     \
      const float *w = wp + (long)nb * K * 16;                                                      \
      for (int k = 0; k < K; k++, w += 16) {                                                        \
        __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);                                \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                        \
          __m256 xr = _mm256_broadcast_ss(x + r * ldx + k);                                         \
          lo[r] = _mm256_fmadd_ps(xr, w0, lo[r]);                                                   \
          hi[r] = _mm256_fmadd_ps(xr, w1, hi[r]);                                                   \
        }                                                                                           \
      }                                                                                             \
      for (int r = 0; r < R; r++) {                                                                 \
        _mm256_storeu_ps(y + (long)r * N + nb * 16, lo[r]);                                         \
        _mm256_storeu_ps(y + (long)r * N + nb * 16 + 8, hi[r]);                                     \
      }                                                                                             \
    }                                                                                               \
  }

ROWS_KERNEL(1)
ROWS_KERNEL(2)
ROWS_KERNEL(3)
ROWS_KERNEL(4)
ROWS_KERNEL(5)
ROWS_KERNEL(6)

void coolsd_rows_mm(const float *x, long ldx, const float *wp, float *y, int M, int K, int N) {
  while (M > 0) {
    int r = M > 6 ? 6 : M;
    switch (r) {
      case 1: rows_1(x, ldx, wp, y, K, N); break;
      case 2: rows_2(x, ldx, wp, y, K, N); break;
      case 3: rows_3(x, ldx, wp, y, K, N); break;
      case 4: rows_4(x, ldx, wp, y, K, N); break;
      case 5: rows_5(x, ldx, wp, y, K, N); break;
      default: rows_6(x, ldx, wp, y, K, N);
    }
    x += r * ldx;
    y += (long)r * N;
    M -= r;
  }
}
