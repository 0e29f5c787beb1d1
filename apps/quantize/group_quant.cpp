#include "apps/quantize/group_quant.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/dtype.hpp"

extern "C" {
// LAPACK (OpenBLAS exports it): Cholesky factor and inverse from it, column-major.
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info);
}

namespace llmk::quantize {
namespace {

struct Group {
  float scale;
  uint32_t zero;
};

Group fit(double lo, double hi, uint32_t maxq, uint32_t min_zero) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  if (hi == lo) lo = -1.0, hi = 1.0;  // an all-zero group: any scale rounds it to its zero point
  float s = f16_to_f32(f32_to_f16(static_cast<float>((hi - lo) / maxq)));
  if (!(s > 0.0f)) s = 6.103515625e-05f;  // the smallest normal f16
  const double z = std::nearbyint(-lo / s);
  return {s, static_cast<uint32_t>(std::clamp(z, static_cast<double>(min_zero), static_cast<double>(maxq)))};
}

uint32_t round_q(double w, const Group& g, uint32_t maxq) {
  const double q = std::nearbyint(w / g.scale) + g.zero;
  return static_cast<uint32_t>(std::clamp(q, 0.0, static_cast<double>(maxq)));
}

float dequant(const Group& g, uint32_t q) {
  return g.scale * static_cast<float>(static_cast<int32_t>(q) - static_cast<int32_t>(g.zero));
}

void check_shape(int64_t out, int64_t in, const QuantSpec& spec) {
  if (spec.bits != 4 && spec.bits != 8) throw std::invalid_argument("bits must be 4 or 8");
  const int64_t group = spec.group_for(in);
  if (in % group != 0)
    throw std::invalid_argument("group size " + std::to_string(group) + " does not divide in_features " +
                                std::to_string(in));
  if (out <= 0 || in <= 0) throw std::invalid_argument("empty weight");
}

}  // namespace

Hessian::Hessian(int64_t in_features) : in_(in_features), sum_(static_cast<size_t>(in_features * in_features), 0.0f) {}

void Hessian::add(const float* x, int64_t rows) {
  if (rows <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(in_), static_cast<int>(in_),
              static_cast<int>(rows), 1.0f, x, static_cast<int>(in_), x, static_cast<int>(in_), 1.0f, sum_.data(),
              static_cast<int>(in_));
  rows_ += rows;
}

std::vector<double> Hessian::mean() const {
  std::vector<double> h(sum_.size());
  const double inv = rows_ > 0 ? 1.0 / static_cast<double>(rows_) : 0.0;
  for (size_t i = 0; i < h.size(); ++i) h[i] = sum_[i] * inv;
  return h;
}

QuantizedLinear rtn_quantize(const float* w, int64_t out, int64_t in, const QuantSpec& spec) {
  check_shape(out, in, spec);
  const int64_t group = spec.group_for(in), groups = in / group;
  const uint32_t maxq = (1u << spec.bits) - 1;
  QuantizedLinear r{IntGroupsWeight(spec.bits, static_cast<uint32_t>(group), static_cast<uint32_t>(out),
                                    static_cast<uint32_t>(in)),
                    std::vector<float>(static_cast<size_t>(out * in))};
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < out; ++n)
    for (int64_t g = 0; g < groups; ++g) {
      const float* row = w + n * in + g * group;
      const auto [lo, hi] = std::minmax_element(row, row + group);
      const Group p = fit(*lo, *hi, maxq, spec.min_zero);
      r.weight.scales[static_cast<size_t>(n * groups + g)] = p.scale;
      r.weight.zeros[static_cast<size_t>(n * groups + g)] = static_cast<uint8_t>(p.zero);
      for (int64_t k = 0; k < group; ++k) {
        const uint32_t q = round_q(row[k], p, maxq);
        r.weight.set_q(n, g * group + k, q);
        r.dequantized[static_cast<size_t>(n * in + g * group + k)] = dequant(p, q);
      }
    }
  return r;
}

QuantizedLinear gptq_quantize(const float* w, int64_t out, int64_t in, const Hessian& hessian, const QuantSpec& spec) {
  check_shape(out, in, spec);
  if (hessian.in_features() != in) throw std::invalid_argument("the Hessian's size is not in_features");
  const int64_t group = spec.group_for(in), groups = in / group;
  const uint32_t maxq = (1u << spec.bits) - 1;
  std::vector<double> h = hessian.mean();
  // Column-major copy of w: wt[k * out + n] (column k of w is contiguous).
  std::vector<double> wt(static_cast<size_t>(in * out));
  for (int64_t n = 0; n < out; ++n)
    for (int64_t k = 0; k < in; ++k) wt[static_cast<size_t>(k * out + n)] = w[n * in + k];
  // Inputs never seen carry no information: their weights go to zero (as the paper's code does).
  for (int64_t k = 0; k < in; ++k)
    if (h[static_cast<size_t>(k * in + k)] == 0.0) {
      h[static_cast<size_t>(k * in + k)] = 1.0;
      std::fill(wt.begin() + k * out, wt.begin() + (k + 1) * out, 0.0);
    }
  std::vector<uint32_t> perm(static_cast<size_t>(in));
  std::iota(perm.begin(), perm.end(), 0u);
  if (spec.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](uint32_t a, uint32_t b) {
      return h[static_cast<size_t>(a) * in + a] > h[static_cast<size_t>(b) * in + b];
    });
  std::vector<double> wp(wt.size()), hp(h.size());
  double mean_diag = 0.0;
  for (int64_t i = 0; i < in; ++i) {
    std::copy_n(wt.begin() + perm[i] * out, out, wp.begin() + i * out);
    for (int64_t j = 0; j < in; ++j) hp[static_cast<size_t>(i * in + j)] = h[static_cast<size_t>(perm[i]) * in + perm[j]];
    mean_diag += hp[static_cast<size_t>(i * in + i)];
  }
  const double damp = spec.damp * mean_diag / static_cast<double>(in);
  for (int64_t i = 0; i < in; ++i) hp[static_cast<size_t>(i * in + i)] += damp;

  // U: the upper Cholesky factor of H^-1 (H^-1 = U^T U), row-major.
  const int n = static_cast<int>(in);
  int info = 0;
  dpotrf_("U", &n, hp.data(), &n, &info);
  if (info == 0) dpotri_("U", &n, hp.data(), &n, &info);
  if (info != 0) throw std::runtime_error("the damped Hessian is not positive definite (raise the damping)");
  for (int64_t j = 0; j < in; ++j)  // column-major upper triangle -> full symmetric
    for (int64_t i = 0; i < j; ++i) hp[static_cast<size_t>(j + i * in)] = hp[static_cast<size_t>(i + j * in)];
  dpotrf_("U", &n, hp.data(), &n, &info);
  if (info != 0) throw std::runtime_error("the inverse Hessian is not positive definite (raise the damping)");
  std::vector<double> u(hp.size(), 0.0);
  for (int64_t i = 0; i < in; ++i)
    for (int64_t j = i; j < in; ++j) u[static_cast<size_t>(i * in + j)] = hp[static_cast<size_t>(i + j * in)];

  QuantizedLinear r{IntGroupsWeight(spec.bits, static_cast<uint32_t>(group), static_cast<uint32_t>(out),
                                    static_cast<uint32_t>(in)),
                    std::vector<float>(static_cast<size_t>(out * in))};
  std::vector<Group> params(static_cast<size_t>(out));
  const int64_t block = std::max<int64_t>(1, spec.block);
  std::vector<double> err(static_cast<size_t>(block * out));
  for (int64_t i1 = 0; i1 < in; i1 += block) {
    const int64_t i2 = std::min(i1 + block, in);
    for (int64_t i = i1; i < i2; ++i) {
      double* col = wp.data() + i * out;
      if (i % group == 0) {
        const int64_t g = i / group;
        for (int64_t o = 0; o < out; ++o) {
          double lo = col[o], hi = col[o];
          for (int64_t k = i; k < i + group; ++k) lo = std::min(lo, wp[static_cast<size_t>(k * out + o)]),
                                                  hi = std::max(hi, wp[static_cast<size_t>(k * out + o)]);
          params[static_cast<size_t>(o)] = fit(lo, hi, maxq, spec.min_zero);
          r.weight.scales[static_cast<size_t>(o * groups + g)] = params[static_cast<size_t>(o)].scale;
          r.weight.zeros[static_cast<size_t>(o * groups + g)] = static_cast<uint8_t>(params[static_cast<size_t>(o)].zero);
        }
      }
      const double d = u[static_cast<size_t>(i * in + i)];
      double* e = err.data() + (i - i1) * out;
      for (int64_t o = 0; o < out; ++o) {
        const Group& p = params[static_cast<size_t>(o)];
        const uint32_t q = round_q(col[o], p, maxq);
        const float dq = dequant(p, q);
        r.weight.set_q(o, i, q);
        r.dequantized[static_cast<size_t>(o * in + perm[i])] = dq;
        e[o] = (col[o] - dq) / d;
      }
      for (int64_t j = i + 1; j < i2; ++j) {
        const double uij = u[static_cast<size_t>(i * in + j)];
        double* cj = wp.data() + j * out;
        for (int64_t o = 0; o < out; ++o) cj[o] -= e[o] * uij;
      }
    }
    if (i2 < in)  // the columns after the block take the block's errors at once
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(in - i2), static_cast<int>(out),
                  static_cast<int>(i2 - i1), -1.0, u.data() + i1 * in + i2, static_cast<int>(in), err.data(),
                  static_cast<int>(out), 1.0, wp.data() + i2 * out, static_cast<int>(out));
  }
  bool permuted = false;
  for (int64_t i = 0; i < in; ++i) permuted = permuted || perm[i] != static_cast<uint32_t>(i);
  if (permuted) r.weight.input_order = perm;
  return r;
}

double output_error(const float* x, int64_t rows, const float* a, const float* b, int64_t out, int64_t in) {
  std::vector<float> diff(static_cast<size_t>(out * in));
  for (size_t i = 0; i < diff.size(); ++i) diff[i] = a[i] - b[i];
  std::vector<float> y(static_cast<size_t>(rows * out));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(out),
              static_cast<int>(in), 1.0f, x, static_cast<int>(in), diff.data(), static_cast<int>(in), 0.0f, y.data(),
              static_cast<int>(out));
  double sum = 0.0;
  for (float v : y) sum += static_cast<double>(v) * v;
  return rows > 0 ? sum / static_cast<double>(rows) : 0.0;
}

}  // namespace llmk::quantize
