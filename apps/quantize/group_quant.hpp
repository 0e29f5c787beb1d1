// Weight quantization to integer groups for `llmk quantize`: round to
// nearest (RTN, the baseline) and GPTQ (Frantar et al. 2022: each column
// rounded in turn, its error spread over the columns not yet rounded
// through the upper Cholesky factor of the inverse Hessian of the layer's
// calibration inputs, in blocks of columns). Both produce the
// IntGroupsWeight a GPTQ checkpoint stores (core/int_groups.hpp).
//
// A group of group_size inputs of one output channel is asymmetric: with
// lo = min(0, min w), hi = max(0, max w), scale = (hi - lo) / (2^bits - 1)
// rounded to f16 (the file stores f16, and every q is rounded against the
// stored scale), zero = round(-lo / scale) clamped to [min_zero, 2^bits - 1]
// (min_zero 1 for GPTQ's v1 format, which stores zero - 1), and
// q = clamp(round(w / scale) + zero, 0, 2^bits - 1), w ~= scale (q - zero).
//
// SpQR-style outliers (Dettmers et al. 2023), GPTQ only: before the column
// pass, each weight's sensitivity is the drop in its group's error
//   E = sum_k (w_k - Q(w_k))^2 / [H^-1]_kk
// when that weight leaves the group (leave-one-out: the group's range refit
// without it, which moves the range only for its smallest or largest
// weight; for the others the drop is its own term), with Q the group's
// plain rounding above and [H^-1] the damped inverse Hessian (the GPTQ
// error measure). The round(fraction * out * in) most sensitive weights of
// the projection (ties to the lower row, then column) are its outliers:
// during the column pass their group's range is fit over the other weights
// only, each is rounded with the group (clamped) and its residual
// (the weight as GPTQ has updated it, minus that rounding) kept in f16, so
// it leaves no error to compensate (its f16 rounding aside). A loader that
// ignores the outliers still gets the clamped integers; one that adds them
// gets scale (q - zero) + residual.
#pragma once

#include <cstdint>
#include <vector>

#include "core/int_groups.hpp"

namespace llmk::quantize {

struct QuantSpec {
  int bits = 4;
  int64_t group_size = 128;  // -1: one group per row (else it must divide in_features)
  bool act_order = false;    // GPTQ: columns in decreasing Hessian diagonal order
  double damp = 0.01;        // GPTQ: fraction of the mean Hessian diagonal added to it
  int64_t block = 128;       // GPTQ: columns per lazy-update block
  uint32_t min_zero = 1;     // lowest zero point (1: GPTQ v1 cannot store 0)
  double outlier_fraction = 0.0;  // GPTQ: the share of weights kept as SpQR-style outliers, in [0, 1)
  int64_t group_for(int64_t in_features) const {
    return group_size <= 0 ? in_features : group_size;
  }
};

// Accumulates calibration inputs: H += x^T x over rows of x [rows, in]; H: [in, in].
class Hessian {
 public:
  explicit Hessian(int64_t in_features);
  void add(const float* x, int64_t rows);
  int64_t in_features() const { return in_; }
  int64_t rows() const { return rows_; }
  // H / rows, row-major [in, in].
  std::vector<double> mean() const;

 private:
  int64_t in_ = 0, rows_ = 0;
  std::vector<float> sum_;  // [in, in]
};

struct QuantizedLinear {
  IntGroupsWeight weight;
  std::vector<float> dequantized;  // [out, in], the model's column order: what a loader computes
  OutlierCsr outliers;             // GPTQ with outlier_fraction > 0 (residuals, f16-rounded; in dequantized)
};

// The number of outliers a projection of `numel` weights keeps: round(fraction * numel), halves up.
int64_t num_outliers(double fraction, int64_t numel);

// w: [out, in] row-major.
QuantizedLinear rtn_quantize(const float* w, int64_t out, int64_t in, const QuantSpec& spec);
QuantizedLinear gptq_quantize(const float* w, int64_t out, int64_t in, const Hessian& h, const QuantSpec& spec);

// sum over rows of ||x (a - b)^T||^2 / rows for x [rows, in], a, b [out, in]: the layer's
// output error on its calibration inputs (= trace((a - b) H (a - b)^T) with H = x^T x / rows).
double output_error(const float* x, int64_t rows, const float* a, const float* b, int64_t out, int64_t in);

}  // namespace llmk::quantize
