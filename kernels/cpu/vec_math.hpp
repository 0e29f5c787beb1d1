// Vectorized elementwise math shared by the CPU kernels (header only).
#pragma once

#include <cmath>

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12 flags the intrinsics' internal _mm512_undefined_ps() as "maybe
// uninitialized" once inlined (a false positive); silenced for users of this header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace llmk::kernels::cpu {

#if defined(__AVX512F__)
// exp(x) for 16 floats, within ~2 ulp on [-87, 88]; larger inputs saturate to
// exp(88.7) and smaller ones to exp(-87.3) (not to 0/inf: callers never need that).
inline __m512 exp512(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  // Taylor series of exp(r) for |r| <= ln2/2; degree 6 leaves ~1e-7 relative error.
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_mask_scalef_ps(p, static_cast<__mmask16>(0xffff), p, n);  // masked form: avoids GCC 12's undefined-register warning
}
#endif

inline float exp_scalar(float x) { return std::exp(x); }

}  // namespace llmk::kernels::cpu
