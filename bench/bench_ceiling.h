/* bench_ceiling.h -- the reduction kernel behind the machine's ceiling: build/reduce_ceiling and
   the %ceil column of the reducing collectives' benchmarks (bench_common.h) both time this one
   implementation, so the two report the same ceiling.

   bench_ceil_sum(in, k, out, nout, n, stream): out[o][i] = in[0][i] + ... + in[k-1][i] for every
   o < nout and i < n (floats). nout = 1 is the k-into-1 shape (ReduceScatter, Reduce); nout = k
   is the AllReduce shape (k inputs into k outputs, every output gets the sum). It is hand-written
   and outside shardkit on purpose: a rate any code on this machine can reach, not shardkit's own.
   On x86 it is SSE2 (the x86-64 baseline, so no dispatch) with 4 independent sums of 4 lanes;
   `stream` asks for non-temporal stores, which skip the read-for-ownership of output lines not in
   cache (a third of the traffic of an ordinary store stream beyond the caches) but are slower when
   the outputs would have stayed in cache, so the caller picks. Elsewhere the portable loop below,
   with ordinary stores. Inputs need only float alignment; an output not 16-byte aligned gets
   unaligned ordinary stores. */
#ifndef BENCH_CEILING_H
#define BENCH_CEILING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Elements i0..n-1 one at a time: the tail after the vector loop, or everything without SSE2. */
static inline void bench_ceil__scalar(float *const *in, int k, float *const *out, int nout, size_t i0, size_t n) {
  for (size_t i = i0; i < n; i++) {
    float s = in[0][i];
    for (int r = 1; r < k; r++) s += in[r][i];
    for (int o = 0; o < nout; o++) out[o][i] = s;
  }
}

#if defined(__SSE2__)
/* 16 floats per step; stores as `nt` says (non-temporal needs every output 16-byte aligned). */
static inline size_t bench_ceil__sse(float *const *in, int k, float *const *out, int nout, size_t n, bool nt) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128 s0 = _mm_loadu_ps(in[0] + i), s1 = _mm_loadu_ps(in[0] + i + 4);
    __m128 s2 = _mm_loadu_ps(in[0] + i + 8), s3 = _mm_loadu_ps(in[0] + i + 12);
    for (int r = 1; r < k; r++) {
      s0 = _mm_add_ps(s0, _mm_loadu_ps(in[r] + i));
      s1 = _mm_add_ps(s1, _mm_loadu_ps(in[r] + i + 4));
      s2 = _mm_add_ps(s2, _mm_loadu_ps(in[r] + i + 8));
      s3 = _mm_add_ps(s3, _mm_loadu_ps(in[r] + i + 12));
    }
    for (int o = 0; o < nout; o++) {
      float *d = out[o] + i;
      if (nt) {
        _mm_stream_ps(d, s0), _mm_stream_ps(d + 4, s1), _mm_stream_ps(d + 8, s2), _mm_stream_ps(d + 12, s3);
      } else {
        _mm_storeu_ps(d, s0), _mm_storeu_ps(d + 4, s1), _mm_storeu_ps(d + 8, s2), _mm_storeu_ps(d + 12, s3);
      }
    }
  }
  /* non-temporal stores are weakly ordered: fence them before another thread reads the outputs */
  if (nt) _mm_sfence();
  return i;
}
#endif

static inline void bench_ceil_sum(float *const *in, int k, float *const *out, int nout, size_t n, bool stream) {
  size_t done = 0;
  if (k < 1 || nout < 1) return; /* nothing to sum, or nowhere to put it */
#if defined(__SSE2__)
  bool aligned = true;
  for (int o = 0; o < nout; o++) aligned = aligned && ((uintptr_t)out[o] & 15) == 0;
  done = bench_ceil__sse(in, k, out, nout, n, stream && aligned);
#else
  (void)stream;
#endif
  bench_ceil__scalar(in, k, out, nout, done, n);
}

#endif /* BENCH_CEILING_H */
