/* coolsd row kernel (coolsd/models/rowkernel.py): y = x @ W in fp32 for a few rows, each weight read once.

   x: (M, K) fp32, row stride ldx floats; wp: W (K, N) packed as (N / 16, K, 16), fp32 or bf16, so that the 16
   columns a block computes lie in one contiguous stream; y: (M, N) fp32, contiguous. Rows go six at a time: 12
   AVX2 accumulators (two of 8 columns a row) and two weight registers. A bf16 weight widens exactly to fp32 in
   the register (its 16 bits are the high half of an fp32), so both weight types give the same bits. Each output
   is one FMA chain over k in order, so a row's result does not depend on how many rows share the call. N must
   be a multiple of 16. */
#include <immintrin.h>
#include <stdint.h>

static inline void load_f32(const float *w, __m256 *w0, __m256 *w1) {
  *w0 = _mm256_loadu_ps(w);
  *w1 = _mm256_loadu_ps(w + 8);
}

static inline void load_bf16(const uint16_t *w, __m256 *w0, __m256 *w1) {
  __m256i v = _mm256_loadu_si256((const __m256i *)w);
  *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16));
  *w1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16));
}

#define ROWS_KERNEL(R, T, LOAD)                                                                     \
  static void rows_##R##_##T(const float *x, long ldx, const T *wp, float *y, int K, int N) {       \
    for (int nb = 0; nb < N / 16; nb++) {                                                           \
      __m256 lo[R], hi[R];                                                                          \
      for (int r = 0; r < R; r++) { lo[r] = _mm256_setzero_ps(); hi[r] = _mm256_setzero_ps(); }     \
      const T *w = wp + (long)nb * K * 16;                                                          \
      for (int k = 0; k < K; k++, w += 16) {                                                        \
        __m256 w0, w1;                                                                              \
        LOAD(w, &w0, &w1);                                                                          \
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

#define ROWS_KERNELS(T, LOAD) \
  ROWS_KERNEL(1, T, LOAD) ROWS_KERNEL(2, T, LOAD) ROWS_KERNEL(3, T, LOAD) \
  ROWS_KERNEL(4, T, LOAD) ROWS_KERNEL(5, T, LOAD) ROWS_KERNEL(6, T, LOAD)

#define ROWS_MM(NAME, T)                                                                           \
  void NAME(const float *x, long ldx, const T *wp, float *y, int M, int K, int N) {                \
    while (M > 0) {                                                                                \
      int r = M > 6 ? 6 : M;                                                                       \
      switch (r) {                                                                                 \
        case 1: rows_1_##T(x, ldx, wp, y, K, N); break;                                            \
        case 2: rows_2_##T(x, ldx, wp, y, K, N); break;                                            \
        case 3: rows_3_##T(x, ldx, wp, y, K, N); break;                                            \
        case 4: rows_4_##T(x, ldx, wp, y, K, N); break;                                            \
        case 5: rows_5_##T(x, ldx, wp, y, K, N); break;                                            \
        default: rows_6_##T(x, ldx, wp, y, K, N);                                                  \
      }                                                                                            \
      x += r * ldx;                                                                                \
      y += (long)r * N;                                                                            \
      M -= r;                                                                                      \
    }                                                                                              \
  }

ROWS_KERNELS(float, load_f32)
ROWS_KERNELS(uint16_t, load_bf16)
ROWS_MM(coolsd_rows_mm, float)
ROWS_MM(coolsd_rows_mm_bf16, uint16_t)
