// attend/rotary_embedding.hpp — rotary position embedding (RoPE, Su et al. 2021), as Llama, GPT-NeoX and GPT-J apply
// it to the queries and keys of every head after their projections.
//
// Each head of d = head_dim features is split into d / 2 pairs; pair i of the step at position p is rotated by the
// angle p * inv_freq_i:
//
//   inv_freq_i = base^(-2i / d)                                    i = 0 .. d/2 - 1
//   (x1, x2) -> (x1 cos(p inv_freq_i) - x2 sin(p inv_freq_i),  x2 cos(p inv_freq_i) + x1 sin(p inv_freq_i))
//
// The pairs are, within each head,
//   not interleaved (the default)  (x[i], x[i + d/2]): Llama's rotate_half, GPT-NeoX, transformers' Llama;
//   interleaved                    (x[2i], x[2i + 1]): GPT-J, Meta's original complex-number form.
// A query at position p and a key at position p' then score q.k as a function of p - p' alone.
//
// The angles are computed in double (as transformers computes them in float64 when asked, not in float32), cos and
// sin then rounded to the computation type: Scalar for float and double, float for a narrower Scalar (bfloat16),
// whose rotated values are rounded to Scalar once. Step t of X takes position start + t, so that a decoder's next
// steps (start = the steps already in its cache) are rotated as they would be in the whole sequence.
//
// apply_inverse() rotates by -angle: it undoes apply(), and it is apply()'s gradient, dX from dY (the rotation is
// orthogonal, its transpose its inverse). Both work in place, on a Tensor3, on a TensorMap3 of the caller's memory,
// or on raw rows (apply_rows: the heads may be the first columns of wider rows, batch rows may be spaced apart, as in
// a KVCache's storage). No call allocates.
//
//   attend::RotaryEmbedding<float> rope(64);        // head_dim 64, base 10000, rotate_half
//   rope.apply(queries, num_heads);                 // queries (batch, steps, num_heads * 64), positions 0 .. steps-1
//   rope.apply(keys, num_kv_heads, cache.size());   // the new keys of a decoder, positions cache.size() ..
#pragma once

#include <attend/config.hpp>
#include <attend/tensor.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class RotaryEmbedding {
 public:
  // head_dim: even, at least 2; base: positive and finite. Throws std::invalid_argument otherwise.
  RotaryEmbedding(Index head_dim, double base = 10000, bool interleaved = false)
      : dim_(head_dim), base_(base), interleaved_(interleaved) {
    detail::require(head_dim >= 2 && head_dim % 2 == 0, "RotaryEmbedding: head_dim must be even and at least 2, got ",
                    head_dim);
    detail::require(base > 0 && std::isfinite(base), "RotaryEmbedding: base must be positive and finite, got ", base);
    inv_freq_.resize(static_cast<std::size_t>(head_dim / 2));  // (head_dim / 2)
    for (Index i = 0; i < head_dim / 2; ++i)
      inv_freq_[static_cast<std::size_t>(i)] =
          std::pow(base, -static_cast<double>(2 * i) / static_cast<double>(head_dim));
  }

  Index head_dim() const { return dim_; }
  double base() const { return base_; }
  bool interleaved() const { return interleaved_; }

  // X: (batch, steps, num_heads * head_dim), rotated in place, step t at position start + t. Throws
  // std::invalid_argument, X unchanged, when num_heads < 1, start < 0 or X's last dimension is not
  // num_heads * head_dim.
  void apply(Tensor3<Scalar>& X, Index num_heads, Index start = 0) const {
    apply_tensor(X.data(), X.dimensions(), num_heads, start, false, "RotaryEmbedding::apply");
  }
  // The same on the caller's memory, (batch, steps, num_heads * head_dim) row-major, in place.
  void apply(TensorMap3<Scalar> X, Index num_heads, Index start = 0) const {
    apply_tensor(X.data(), X.dimensions(), num_heads, start, false, "RotaryEmbedding::apply");
  }

  // The inverse rotation, by -angle: undoes apply(), and is its gradient, dX from dY (batch, steps,
  // num_heads * head_dim), in place. Checks as apply().
  void apply_inverse(Tensor3<Scalar>& X, Index num_heads, Index start = 0) const {
    apply_tensor(X.data(), X.dimensions(), num_heads, start, true, "RotaryEmbedding::apply_inverse");
  }
  void apply_inverse(TensorMap3<Scalar> X, Index num_heads, Index start = 0) const {
    apply_tensor(X.data(), X.dimensions(), num_heads, start, true, "RotaryEmbedding::apply_inverse");
  }

  // The raw form: rows of (batch, batch_rows, row_stride) row-major memory at data. Step t of batch row b is the row
  // at data + (b * batch_rows + t) * row_stride, for t < steps; its first num_heads * head_dim elements are the heads,
  // num_heads heads of head_dim side by side, and the rest of the row is left alone. Rotates by the angles of
  // positions start + t (by their negatives when inverse). Throws std::invalid_argument, the memory unchanged, when
  // num_heads < 1, start < 0, batch or steps < 0, batch_rows < steps or row_stride < num_heads * head_dim.
  void apply_rows(Scalar* data, Index batch, Index steps, Index batch_rows, Index row_stride, Index num_heads,
                  Index start, bool inverse) const {
    constexpr const char* where = "RotaryEmbedding::apply_rows";
    require_heads_and_start(num_heads, start, where);
    detail::require_at_least(batch, 0, where, "batch");
    detail::require_at_least(steps, 0, where, "steps");
    detail::require(batch_rows >= steps, where, ": batch_rows must be at least steps (", steps, "), got ", batch_rows);
    detail::require(num_heads <= row_stride / dim_, where, ": row_stride must be at least num_heads * head_dim (",
                    product_text(num_heads), "), got ", row_stride);
    detail::require(data != nullptr || batch == 0 || steps == 0, where, ": data is null for ", batch, " x ", steps,
                    " rows");
    rotate(data, batch, steps, batch_rows, row_stride, num_heads, start, inverse);
  }

 private:
  // The type cos, sin and the rotation are computed in: Scalar, or float for a Scalar narrower than float.
  using Compute = detail::compute_type<Scalar>;
  // Pairs whose cos and sin are computed together before they are applied to every batch row and head.
  static constexpr Index chunk = 64;

  template <class Dims>
  void apply_tensor(Scalar* data, const Dims& d, Index num_heads, Index start, bool inverse, const char* where) const {
    require_heads_and_start(num_heads, start, where);
    detail::require(d[2] % dim_ == 0 && d[2] / dim_ == num_heads, where,
                    ": X must have num_heads * head_dim = ", product_text(num_heads), " features (axis 2), got shape ",
                    detail::shape_text(d));
    rotate(data, d[0], d[1], d[1], d[2], num_heads, start, inverse);
  }

  static void require_heads_and_start(Index num_heads, Index start, const char* where) {
    detail::require_at_least(num_heads, 1, where, "num_heads");
    detail::require_at_least(start, 0, where, "start");
  }

  // "3 * 8 = 24", without the product when it would overflow.
  std::string product_text(Index num_heads) const {
    if (num_heads > std::numeric_limits<Index>::max() / dim_) return detail::message(num_heads, " * ", dim_);
    return detail::message(num_heads, " * ", dim_, " = ", num_heads * dim_);
  }

  // Checked by the callers.
  void rotate(Scalar* data, Index batch, Index steps, Index batch_rows, Index row_stride, Index num_heads, Index start,
              bool inverse) const {
    const Index half = dim_ / 2;
    Compute cos_[chunk], sin_[chunk];  // cos and sin of the angles of pairs i0 .. i0 + n - 1
    for (Index t = 0; t < steps; ++t) {
      // In double: no overflow for any start, and exact below 2^53.
      const double position = static_cast<double>(start) + static_cast<double>(t);
      for (Index i0 = 0; i0 < half; i0 += chunk) {
        const Index n = std::min(chunk, half - i0);
        for (Index i = 0; i < n; ++i) {
          const double angle = position * inv_freq_[static_cast<std::size_t>(i0 + i)];
          cos_[i] = static_cast<Compute>(std::cos(angle));
          sin_[i] = static_cast<Compute>(inverse ? -std::sin(angle) : std::sin(angle));
        }
        for (Index b = 0; b < batch; ++b) {
          Scalar* row = data + (b * batch_rows + t) * row_stride;  // (num_heads * head_dim) of the row
          for (Index h = 0; h < num_heads; ++h) {
            Scalar* head = row + h * dim_;  // (head_dim)
            if (interleaved_) {
              rotate_pairs(head + 2 * i0, head + 2 * i0 + 1, 2, n, cos_, sin_);
            } else {
              rotate_pairs(head + i0, head + half + i0, 1, n, cos_, sin_);
            }
          }
        }
      }
    }
  }

  // (x1[k * step], x2[k * step]) -> (x1 c - x2 s, x2 c + x1 s), c = cos_[k], s = sin_[k], for k < n.
  static void rotate_pairs(Scalar* x1, Scalar* x2, Index step, Index n, const Compute* cos_, const Compute* sin_) {
    for (Index k = 0; k < n; ++k) {
      const Compute a = static_cast<Compute>(x1[k * step]), b = static_cast<Compute>(x2[k * step]);
      x1[k * step] = static_cast<Scalar>(a * cos_[k] - b * sin_[k]);
      x2[k * step] = static_cast<Scalar>(b * cos_[k] + a * sin_[k]);
    }
  }

  Index dim_;
  double base_;
  bool interleaved_;
  std::vector<double> inv_freq_;  // (head_dim / 2): base^(-2i / head_dim)
};

}  // namespace ATTEND_ABI
}  // namespace attend
