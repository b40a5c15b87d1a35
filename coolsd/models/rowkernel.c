/* coolsd row kernel (coolsd/models/rowkernel.py): y = x @ W in fp32 for a few rows, each weight read once.

   x: (M, K) fp32, row stride ldx floats; wp: W (K, N) packed as (N / 16, K, 16), fp32 or bf16, so that the 16
   columns a block computes lie in one contiguous stream; y: (M, N) fp32, contiguous. Rows go up to six at a time
   (ROWS_MM), each row's 16 columns in two AVX2 accumulators of 8. A bf16 weight widens exactly to fp32 in
   the register (its 16 bits are the high half of an fp32), so both weight types give the same bits. Each output
   is one FMA chain over k in order, so a row's result does not depend on how many rows share the call. N must
   be a multiple of 16. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline void load_f32(const float *w, __m256 *w0, __m256 *w1) {
  *w0 = _mm256_loadu_ps(w);
  *w1 = _mm256_loadu_ps(w + 8);
}

/* a bf16 block is packed interleaved, columns 0, 8, 1, 9, ..., 7, 15 (`rowkernel.pack`): each 32-bit lane holds
   column j in its low half and column 8 + j in its high half, so a shift and a mask widen all 16 (no shuffles) */
static inline void load_bf16(const uint16_t *w, __m256 *w0, __m256 *w1) {
  __m256i v = _mm256_loadu_si256((const __m256i *)w);
  *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  *w1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000)));
}

/* a block's length in weights: K rows of 16 columns */
#define STRIDE(K) ((long)(K) * 16)

/* R rows by B column blocks at a time: 2 R B accumulators, each one FMA chain over k in order (so an output's bits
   do not depend on R or B); the blocks past the last whole group of B run one at a time. y: row stride ldy. Where
   several blocks' accumulators take more than 8 of the 16 registers, an empty asm with a memory clobber after each
   block makes the compiler broadcast x again for the next block rather than keep R broadcasts live (3 rows by 2
   blocks: 12 accumulators, 2 weights and 1 broadcast fit, with no spill in the loop). While a group runs, its k-th
   line of each block is matched by a software prefetch (into L2) of the same line of the next group's blocks, so the
   next group streams in beside this one: more lines in flight than the hardware prefetcher keeps for 1-2 streams
   (choice). After the last group it names
   lines past W: a prefetch never faults, and the address is integer arithmetic. */
#define ROWS_KERNEL(R, B, T, LOAD)                                                                     \
  static void rows_##R##x##B##_##T(const float *x, long ldx, const T *wp, float *y, long ldy, int K,      \
                                   int N) {                                                           \
    int nb = 0;                                                                                        \
    for (; nb + B <= N / 16; nb += B) {                                                                \
      __m256 acc[B][2 * R];                                                                            \
      for (int b = 0; b < B; b++)                                                                      \
        for (int j = 0; j < 2 * R; j++) acc[b][j] = _mm256_setzero_ps();                               \
      const T *w = wp + nb * STRIDE(K);                                                            \
      for (int k = 0; k < K; k++) {                                                                    \
        if ((k * 16 * (int)sizeof(T)) % 64 == 0) /* a new line of each block */                         \
          for (int b = 0; b < B; b++)                                                                  \
            _mm_prefetch((const char *)((uintptr_t)w + ((B + b) * STRIDE(K) + (long)k * 16) * sizeof(T)), \
                         _MM_HINT_T1);                                                                 \
        _Pragma("GCC unroll 4") for (int b = 0; b < B; b++) {                                           \
          __m256 w0, w1;                                                                               \
          LOAD(w + b * STRIDE(K) + (long)k * 16, &w0, &w1);                                         \
          _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                         \
            __m256 xr = _mm256_broadcast_ss(x + r * ldx + k);                                          \
            acc[b][2 * r] = _mm256_fmadd_ps(xr, w0, acc[b][2 * r]);                                    \
            acc[b][2 * r + 1] = _mm256_fmadd_ps(xr, w1, acc[b][2 * r + 1]);                            \
          }                                                                                            \
          if (B > 1 && 2 * R * B > 8) __asm__ volatile("" ::: "memory");                               \
        }                                                                                              \
      }                                                                                                \
      for (int b = 0; b < B; b++)                                                                      \
        for (int r = 0; r < R; r++) {                                                                  \
          _mm256_storeu_ps(y + r * ldy + (nb + b) * 16, acc[b][2 * r]);                                \
          _mm256_storeu_ps(y + r * ldy + (nb + b) * 16 + 8, acc[b][2 * r + 1]);                        \
        }                                                                                              \
    }                                                                                                  \
    if (B > 1 && nb < N / 16)                                                                          \
      rows_##R##x1_##T(x, ldx, wp + nb * STRIDE(K), y + nb * 16, ldy, K, N - nb * 16);             \
  }

/* (choice) one row four blocks at a time and two rows two at a time (8 accumulators), three rows two blocks at a
   time (12 accumulators: with one block, each k's 6 FMA chains would wait on the FMA latency), 4-6 rows one block
   at a time (8-12 accumulators) */
#define ROWS_KERNELS(T, LOAD)                                                                          \
  ROWS_KERNEL(1, 1, T, LOAD) ROWS_KERNEL(2, 1, T, LOAD) ROWS_KERNEL(3, 1, T, LOAD)                        \
  ROWS_KERNEL(4, 1, T, LOAD) ROWS_KERNEL(5, 1, T, LOAD) ROWS_KERNEL(6, 1, T, LOAD)                        \
  ROWS_KERNEL(1, 4, T, LOAD) ROWS_KERNEL(2, 2, T, LOAD) ROWS_KERNEL(3, 2, T, LOAD)

/* rows go six at a time, but eight as two fours (choice: two even halves rather than six and two) */
#define ROWS_MM(NAME, T)                                                                               \
  void NAME(const float *x, long ldx, const T *wp, float *y, int M, int K, int N) {                    \
    while (M > 0) {                                                                                    \
      int r = M == 8 ? 4 : M > 6 ? 6 : M;                                                              \
      switch (r) {                                                                                     \
        case 1: rows_1x4_##T(x, ldx, wp, y, N, K, N); break;                                           \
        case 2: rows_2x2_##T(x, ldx, wp, y, N, K, N); break;                                           \
        case 3: rows_3x2_##T(x, ldx, wp, y, N, K, N); break;                                           \
        case 4: rows_4x1_##T(x, ldx, wp, y, N, K, N); break;                                           \
        case 5: rows_5x1_##T(x, ldx, wp, y, N, K, N); break;                                           \
        default: rows_6x1_##T(x, ldx, wp, y, N, K, N);                                                 \
      }                                                                                                \
      x += r * ldx;                                                                                    \
      y += (long)r * N;                                                                                \
      M -= r;                                                                                          \
    }                                                                                                  \
  }

ROWS_KERNELS(float, load_f32)
ROWS_KERNELS(uint16_t, load_bf16)
ROWS_MM(coolsd_rows_mm, float)
ROWS_MM(coolsd_rows_mm_bf16, uint16_t)

/* ---- The look-alike channel's mixture (`rowkernel.ChannelMix`, used by `coolsd.models.channel`) ----

   out[r, x] = sum over the codes c that may become x, in ascending c, of probs[r, c] w[c -> x], each share rounded
   to fp32 before its add (no FMA contraction here), from 0: the order and roundings in which torch's `scatter_add_`
   adds the flattened (V k) shares into x, so the same bits, with each sum kept in a register. probs: (M, V) fp32;
   the channel by destination: x's sources src[start[x] .. start[x + 1]) and their weights w, every src in [0, V)
   (checked once by the caller); out: (M, V). */
#define MIX_ROWS(R)                                                                                     \
  __attribute__((optimize("fp-contract=off"))) static void mix_##R(const float *p, const long *start,         \
                                                                   const long *src, const float *w,           \
                                                                   float *o, int V) {                         \
    for (int x = 0; x < V; x++) {                                                                        \
      float sum[R] = {0};                                                                                \
      for (long e = start[x]; e < start[x + 1]; e++) {                                                   \
        long c = src[e];                                                                                 \
        float we = w[e];                                                                                 \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                             \
          float share = p[(long)r * V + c] * we;                                                         \
          sum[r] += share;                                                                               \
        }                                                                                                \
      }                                                                                                  \
      for (int r = 0; r < R; r++) o[(long)r * V + x] = sum[r];                                           \
    }                                                                                                    \
  }
MIX_ROWS(1) MIX_ROWS(2) MIX_ROWS(4)

void coolsd_channel_mix(const float *probs, const long *start, const long *src, const float *w, float *out, int M,
                        int V) {
  while (M > 0) { /* rows 4, 2 or 1 at a time: as many independent sums (an add waits on the one before it); at
                     most 4, as eight rows' probabilities (64 KB) overflow the L1 cache */
    int r = M >= 4 ? 4 : M >= 2 ? 2 : 1;
    switch (r) {
      case 4: mix_4(probs, start, src, w, out, V); break;
      case 2: mix_2(probs, start, src, w, out, V); break;
      default: mix_1(probs, start, src, w, out, V);
    }
    probs += (long)r * V;
    out += (long)r * V;
    M -= r;
  }
}

/* ---- The whole decoder layer stack for a few rows in one call (`rowkernel.StackKernel`, the fused path) ----

   The maths of `coolsd.models.llama.LayerStack._layers`, every intermediate in fp32, without ~25 torch calls a layer
   between the products. x: (M, D) the residual stream, M = G n rows (G guidance rows of n new tokens), updated
   in place; w: 4 L packed weights (qkv (D -> (hq + 2 hk) hd), o (hq hd -> D), gate_up (D -> 2 I), down
   (I -> D) per layer, RMSNorm weights folded in); cos, sin: (P, hq + hk, hd) RoPE tables (query rows scaled by
   1 / sqrt(hd), sin signed so that rotate-half is a roll by hd / 2); pos: (n,) table rows of the new tokens;
   kc, vc: (L, G, hk, S, hd) caches, slots [start, start + n) written; mask: (n, start + n) bytes, non-zero where
   a token may attend, or NULL for causal; P: the tables' rows. A query head h reads kv head h / (hq / hk).
   Returns 0, or 1 (hd > 512 or hq not a multiple of hk), 2 (no memory for the scratch), 3 (a position past P). */

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static float dot(const float *a, const float *b, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum(acc);
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

/* exp of 8 floats: 2^n e^r with n = round(x / ln 2), |r| <= ln 2 / 2, e^r by its degree-6 Taylor polynomial
   (relative error below 2e-7, about 2 float roundings); x below -87.3 gives 0, so exp(-inf) = 0 */
static inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(hi, _mm256_max_ps(lo, x)); /* x second: a NaN passes through, as in expf */
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);  /* ln 2 in two parts: exact n * hi part */
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(scale)));
}

/* v[i] = exp(v[i] - shift) for i < n, returns their sum */
static float exp_shifted(float *v, int n, float shift) {
  __m256 total = _mm256_setzero_ps(), sh = _mm256_set1_ps(shift);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(v + i), sh));
    _mm256_storeu_ps(v + i, e);
    total = _mm256_add_ps(total, e);
  }
  float s = hsum(total);
  for (; i < n; i++) s += (v[i] = expf(v[i] - shift));
  return s;
}

/* act[i] = SiLU(gate[i]) up[i] = gate[i] / (1 + exp(-gate[i])) up[i], i < n */
static void silu_times(const float *gate, const float *up, float *act, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(act + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; i++) act[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* out (M, D) = RMSNorm(x) without weight (folded into the next product) */
static void rms_norm(const float *x, float *out, int M, int D, float eps) {
  for (int r = 0; r < M; r++) {
    const float *xr = x + (long)r * D;
    float inv = 1.0f / sqrtf(dot(xr, xr, D) / D + eps);
    for (int i = 0; i < D; i++) out[(long)r * D + i] = xr[i] * inv;
  }
}

typedef struct {
  int G, n, D, L, hq, hk, hd, I, start;
  long S;
  float eps;
} Shape;

/* RoPE on the query and key heads of qkv (M, (hq + 2 hk) hd) in place; keys and values into the caches */
static void rope_and_cache(float *qkv, const float *cos, const float *sin, const long *pos, float *kc,
                           float *vc, const Shape *s) {
  int hd = s->hd, half = hd / 2, heads = s->hq + s->hk, Q = (s->hq + 2 * s->hk) * hd;
  float rot[512];
  for (int g = 0; g < s->G; g++)
    for (int t = 0; t < s->n; t++) {
      float *row = qkv + ((long)g * s->n + t) * Q;
      for (int j = 0; j < heads; j++) {
        float *in = row + j * hd;
        const float *c = cos + (pos[t] * heads + j) * hd, *sn = sin + (pos[t] * heads + j) * hd;
        for (int i = 0; i < hd; i++) rot[i] = in[i] * c[i] + in[(i + half) % hd] * sn[i];
        memcpy(in, rot, sizeof(float) * hd);
      }
      for (int j = 0; j < s->hk; j++) {
        long slot = (((long)g * s->hk + j) * s->S + s->start + t) * hd;
        memcpy(kc + slot, row + (s->hq + j) * hd, sizeof(float) * hd);
        memcpy(vc + slot, row + (heads + j) * hd, sizeof(float) * hd);
      }
    }
}

/* scores[j] = dot(q, keys[j]) for 4 keys a row `stride` apart: each the FMA chain and sum of `dot` (the same bits),
   the four chains interleaved (an FMA waits for the one before it); hd a multiple of 8 */
static inline void dot4(const float *q, const float *key, long stride, int hd, float *scores) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int i = 0; i < hd; i += 8) {
    __m256 qv = _mm256_loadu_ps(q + i);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(key + i), qv, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(key + stride + i), qv, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(key + 2 * stride + i), qv, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(key + 3 * stride + i), qv, a3);
  }
  scores[0] = hsum(a0);
  scores[1] = hsum(a1);
  scores[2] = hsum(a2);
  scores[3] = hsum(a3);
}

/* one query head of one row: out (hd) = softmax(q k^T + mask) v over `keys` keys (kh, vh: (keys, hd)); open(k):
   whether the row may attend key k; scores: scratch of `keys` floats. hd a multiple of 8 up to 64: the output
   stays in (up to) 8 registers over the keys, each lane the FMA chain over k of the loop below; else that loop. */
#define ATTEND_HEAD(OPEN)                                                                                  \
  do {                                                                                                     \
    float top = -INFINITY;                                                                                 \
    int k = 0;                                                                                             \
    if (hd % 8 == 0)                                                                                       \
      for (; k + 4 <= keys; k += 4) dot4(q, kh + (long)k * hd, hd, hd, scores + k);                        \
    for (; k < keys; k++) scores[k] = dot(q, kh + (long)k * hd, hd);                                       \
    for (k = 0; k < keys; k++) {                                                                           \
      if (!(OPEN)) scores[k] = -INFINITY;                                                                  \
      if (scores[k] > top) top = scores[k];                                                                \
    }                                                                                                      \
    float total = exp_shifted(scores, keys, top); /* a closed key: exp(-inf) = 0 */                        \
    if (hd % 8 == 0 && hd <= 64) {                                                                         \
      __m256 acc[8];                                                                                       \
      int chunks = hd / 8;                                                                                 \
      for (int c = 0; c < chunks; c++) acc[c] = _mm256_setzero_ps();                                      \
      for (k = 0; k < keys; k++) {                                                                         \
        if (scores[k] == 0.0f) continue;                                                                   \
        __m256 p = _mm256_set1_ps(scores[k]);                                                              \
        const float *vk = vh + (long)k * hd;                                                               \
        for (int c = 0; c < chunks; c++) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vk + 8 * c), acc[c]);  \
      }                                                                                                    \
      __m256 inv = _mm256_set1_ps(total);                                                                  \
      for (int c = 0; c < chunks; c++) _mm256_storeu_ps(out + 8 * c, _mm256_div_ps(acc[c], inv));         \
    } else {                                                                                               \
      memset(out, 0, sizeof(float) * hd);                                                                  \
      for (k = 0; k < keys; k++) {                                                                         \
        if (scores[k] == 0.0f) continue;                                                                   \
        float p = scores[k];                                                                               \
        for (int i = 0; i < hd; i++) out[i] = fmaf(p, vh[(long)k * hd + i], out[i]);                       \
      }                                                                                                    \
      for (int i = 0; i < hd; i++) out[i] /= total;                                                        \
    }                                                                                                      \
  } while (0)

/* att (M, hq hd) = softmax(q k^T + mask) v per row and query head; scores: scratch of start + n floats. Every
   score is computed, then a closed key's set to -inf (so a key's score never depends on the mask) */
static void attend(const float *qkv, const float *kc, const float *vc, const unsigned char *mask, float *att,
                   float *scores, const Shape *s) {
  int hd = s->hd, Q = (s->hq + 2 * s->hk) * hd, keys = s->start + s->n, group = s->hq / s->hk;
  for (int g = 0; g < s->G; g++)
    for (int t = 0; t < s->n; t++)
      for (int h = 0; h < s->hq; h++) {
        const float *q = qkv + ((long)g * s->n + t) * Q + h * hd;
        const float *kh = kc + ((long)g * s->hk + h / group) * s->S * hd;
        const float *vh = vc + ((long)g * s->hk + h / group) * s->S * hd;
        float *out = att + ((long)g * s->n + t) * s->hq * hd + h * hd;
        if (mask) {
          const unsigned char *row = mask + (long)t * keys;
          ATTEND_HEAD(row[k] != 0);
        } else {
          int last = s->start + t;
          ATTEND_HEAD(k <= last);
        }
      }
}

/* the kernel's exp and SiLU-times over arrays of n floats, for its tests (tests/models/test_rowkernel.py) */
void coolsd_exp(const float *x, float *y, int n) {
  memcpy(y, x, sizeof(float) * n);
  exp_shifted(y, n, 0.0f);
}

void coolsd_silu_times(const float *gate, const float *up, float *act, int n) { silu_times(gate, up, act, n); }

#define LAYERS(NAME, T, MM)                                                                            \
  int NAME(float *x, const T *const *w, const float *cos, const float *sin, const long *pos, float *kc,    \
           float *vc, const unsigned char *mask, int G, int n, int D, int L, int hq, int hk, int hd, int I, \
           long S, int start, float eps, long P) {                                                        \
    Shape s = {G, n, D, L, hq, hk, hd, I, start, S, eps};                                                 \
    int M = G * n, Q = (hq + 2 * hk) * hd, A = hq * hd;                                                   \
    if (hd > 512 || hq % hk) return 1;                                                                    \
    for (int t = 0; t < n; t++)                                                                           \
      if (pos[t] < 0 || pos[t] >= P) return 3;                                                            \
    float *ws = malloc(sizeof(float) * ((long)M * (D + Q + A + 3 * I + D) + start + n));                  \
    if (!ws) return 2;                                                                                    \
    float *xn = ws, *qkv = xn + (long)M * D, *att = qkv + (long)M * Q, *gu = att + (long)M * A;           \
    float *act = gu + (long)M * 2 * I, *y = act + (long)M * I, *scores = y + (long)M * D;                 \
    long layer_cache = (long)G * hk * S * hd;                                                             \
    for (int l = 0; l < L; l++) {                                                                         \
      rms_norm(x, xn, M, D, eps);                                                                         \
      MM(xn, D, w[4 * l], qkv, M, D, Q);                                                                  \
      rope_and_cache(qkv, cos, sin, pos, kc + l * layer_cache, vc + l * layer_cache, &s);                  \
      attend(qkv, kc + l * layer_cache, vc + l * layer_cache, mask, att, scores, &s);                     \
      MM(att, A, w[4 * l + 1], y, M, A, D);                                                               \
      for (long i = 0; i < (long)M * D; i++) x[i] += y[i];                                                \
      rms_norm(x, xn, M, D, eps);                                                                         \
      MM(xn, D, w[4 * l + 2], gu, M, D, 2 * I);                                                           \
      for (int r = 0; r < M; r++)                                                                         \
        silu_times(gu + (long)r * 2 * I, gu + (long)r * 2 * I + I, act + (long)r * I, I);                \
      MM(act, I, w[4 * l + 3], y, M, I, D);                                                               \
      for (long i = 0; i < (long)M * D; i++) x[i] += y[i];                                                \
    }                                                                                                     \
    free(ws);                                                                                             \
    return 0;                                                                                             \
  }

LAYERS(coolsd_layers, float, coolsd_rows_mm)
LAYERS(coolsd_layers_bf16, uint16_t, coolsd_rows_mm_bf16)

/* ---- An Eagle head's whole step in one call (`rowkernel.EagleKernel`, the fused path) ----

   What `coolsd.models.eagle.EagleDrafter.forward` computes, in fp32: x = [embed[ids[t]]; hidden] @ fc
   + fc_bias, the layer stack above on x (its arguments after `x`), logits = (x @ head) / temperature. embed: (E, D)
   fp32 rows; ids: (n,) shared by the G rows; hidden: (M, D) fp32, M = G n; fc: (2 D -> D), head: (D -> V) packed
   like the stack's weights; x: (M, D) out, the head's features; logits: (M, V) out. Returns the stack's status, or
   2 (no memory), 4 (an id outside the E rows). */
#define EAGLE(NAME, T, MM, STACK)                                                                        \
  int NAME(const float *embed, long E, const long *ids, const float *hidden, const T *fc, const float *fc_bias, \
           const T *head, int V, float temperature, float *x, float *logits, const T *const *w,              \
           const float *cos, const float *sin, const long *pos, float *kc, float *vc,                      \
           const unsigned char *mask, int G, int n, int D, int L, int hq, int hk, int hd, int I, long S,     \
           int start, float eps, long P) {                                                                 \
    long M = (long)G * n;                                                                                  \
    if (M <= 0) return 0;                                                                                  \
    for (int t = 0; t < n; t++)                                                                            \
      if (ids[t] < 0 || ids[t] >= E) return 4;                                                             \
    float *pair = malloc(sizeof(float) * M * 2 * D);                                                       \
    if (!pair) return 2;                                                                                   \
    for (long r = 0; r < M; r++) {                                                                         \
      memcpy(pair + r * 2 * D, embed + ids[r % n] * D, sizeof(float) * D);                                 \
      memcpy(pair + r * 2 * D + D, hidden + r * D, sizeof(float) * D);                                     \
    }                                                                                                      \
    MM(pair, 2 * D, fc, x, (int)M, 2 * D, D);                                                              \
    free(pair);                                                                                            \
    for (long r = 0; r < M; r++)                                                                           \
      for (int i = 0; i < D; i++) x[r * D + i] += fc_bias[i];                                              \
    int status = STACK(x, w, cos, sin, pos, kc, vc, mask, G, n, D, L, hq, hk, hd, I, S, start, eps, P);    \
    if (status) return status;                                                                             \
    MM(x, D, head, logits, (int)M, D, V);                                                                  \
    for (long i = 0; i < M * V; i++) logits[i] /= temperature;                                             \
    return 0;                                                                                              \
  }

EAGLE(coolsd_eagle, float, coolsd_rows_mm, coolsd_layers)
EAGLE(coolsd_eagle_bf16, uint16_t, coolsd_rows_mm_bf16, coolsd_layers_bf16)
