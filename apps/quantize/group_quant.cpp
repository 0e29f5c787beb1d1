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

// Leave-one-out sensitivities of the weights of one group of one output (group_quant.hpp): v the
// group's weights, c[k] = 1 / [H^-1]_kk; s[k] the drop in the group's weighted error without v[k].
void group_sensitivity(const double* v, const double* c, int64_t n, uint32_t maxq, uint32_t min_zero, double* s) {
  auto error_without = [&](int64_t skip, double& total) {
    double lo = 0.0, hi = 0.0;  // fit() takes the range over zero anyway
    for (int64_t k = 0; k < n; ++k)
      if (k != skip) lo = std::min(lo, v[k]), hi = std::max(hi, v[k]);
    const Group p = fit(lo, hi, maxq, min_zero);
    total = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      if (k == skip) continue;
      const double e = v[k] - dequant(p, round_q(v[k], p, maxq));
      if (skip < 0) s[k] = e * e * c[k];
      total += e * e * c[k];
    }
  };
  double all = 0.0;
  error_without(-1, all);  // s[k]: each weight's own term
  const int64_t lo = std::min_element(v, v + n) - v, hi = std::max_element(v, v + n) - v;
  for (const int64_t k : {lo, hi}) {  // only the extremes move the range when they leave
    if (n < 2) break;
    double rest = 0.0;
    error_without(k, rest);
    s[k] = all - rest;
  }
}

void check_shape(int64_t out, int64_t in, const QuantSpec& spec) {
  if (spec.bits != 4 && spec.bits != 8) throw std::invalid_argument("bits must be 4 or 8");
  const int64_t group = spec.group_for(in);
  if (in % group != 0)
    throw std::invalid_argument("group size " + std::to_string(group) + " does not divide in_features " +
                                std::to_string(in));
  if (out <= 0 || in <= 0) throw std::invalid_argument("empty weight");
  if (!(spec.outlier_fraction >= 0.0 && spec.outlier_fraction < 1.0))
    throw std::invalid_argument("the outlier fraction " + std::to_string(spec.outlier_fraction) + " is not in [0, 1)");
}

}  // namespace

int64_t num_outliers(double fraction, int64_t numel) {
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(numel) + 0.5));
}

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
                    std::vector<float>(static_cast<size_t>(out * in)), OutlierCsr{}};
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
  std::vector<double> hinv_diag(static_cast<size_t>(in));  // [H^-1]_ii, quantization order
  for (int64_t i = 0; i < in; ++i) hinv_diag[static_cast<size_t>(i)] = hp[static_cast<size_t>(i + i * in)];
  for (int64_t j = 0; j < in; ++j)  // column-major upper triangle -> full symmetric
    for (int64_t i = 0; i < j; ++i) hp[static_cast<size_t>(j + i * in)] = hp[static_cast<size_t>(i + j * in)];
  dpotrf_("U", &n, hp.data(), &n, &info);
  if (info != 0) throw std::runtime_error("the inverse Hessian is not positive definite (raise the damping)");
  std::vector<double> u(hp.size(), 0.0);
  for (int64_t i = 0; i < in; ++i)
    for (int64_t j = i; j < in; ++j) u[static_cast<size_t>(i * in + j)] = hp[static_cast<size_t>(i + j * in)];

  QuantizedLinear r{IntGroupsWeight(spec.bits, static_cast<uint32_t>(group), static_cast<uint32_t>(out),
                                    static_cast<uint32_t>(in)),
                    std::vector<float>(static_cast<size_t>(out * in)), OutlierCsr{}};
  // SpQR-style outliers (group_quant.hpp): chosen on the weights before the pass; outlier[i * out + o].
  std::vector<uint8_t> outlier(wp.size(), 0);
  const int64_t num_kept = num_outliers(spec.outlier_fraction, out * in);
  if (num_kept > 0) {
    std::vector<double> sens(wp.size()), v(static_cast<size_t>(group)), c(static_cast<size_t>(group)),
        sv(static_cast<size_t>(group));
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t k = 0; k < group; ++k) {
          const int64_t i = g * group + k;
          v[static_cast<size_t>(k)] = wp[static_cast<size_t>(i * out + o)];
          c[static_cast<size_t>(k)] = 1.0 / hinv_diag[static_cast<size_t>(i)];
        }
        group_sensitivity(v.data(), c.data(), group, maxq, spec.min_zero, sv.data());
        for (int64_t k = 0; k < group; ++k) sens[static_cast<size_t>((g * group + k) * out + o)] = sv[static_cast<size_t>(k)];
      }
    std::vector<uint32_t> order(wp.size());
    std::iota(order.begin(), order.end(), 0u);
    auto before = [&](uint32_t a, uint32_t b) {  // more sensitive first; ties to the lower row, then column
      if (sens[a] != sens[b]) return sens[a] > sens[b];
      const uint32_t ra = a % out, rb = b % out;
      return ra != rb ? ra < rb : perm[a / out] < perm[b / out];
    };
    std::nth_element(order.begin(), order.begin() + (num_kept - 1), order.end(), before);
    for (int64_t j = 0; j < num_kept; ++j) outlier[order[static_cast<size_t>(j)]] = 1;
  }
  std::vector<std::vector<std::pair<uint32_t, float>>> kept(static_cast<size_t>(out));  // per row: (column, residual)

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
          double lo = 0.0, hi = 0.0;  // over the group's weights that are not outliers
          for (int64_t k = i; k < i + group; ++k) {
            const size_t at = static_cast<size_t>(k * out + o);
            if (!outlier[at]) lo = std::min(lo, wp[at]), hi = std::max(hi, wp[at]);
          }
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
        float dq = dequant(p, q);
        if (outlier[static_cast<size_t>(i * out + o)]) {  // the residual kept in f16, added to the integers
          const float residual = f16_to_f32(f32_to_f16(static_cast<float>(col[o] - dq)));
          kept[static_cast<size_t>(o)].emplace_back(perm[i], residual);
          dq = dq + residual;
        }
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
  if (num_kept > 0) {
    r.outliers.in_features = in;
    r.outliers.row_ptr.push_back(0);
    for (auto& row : kept) {
      std::sort(row.begin(), row.end());
      for (const auto& [col, value] : row) r.outliers.cols.push_back(col), r.outliers.values.push_back(value);
      r.outliers.row_ptr.push_back(static_cast<uint32_t>(r.outliers.cols.size()));
    }
  }
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
