// attend/complexity.hpp — measuring the chapter's comparison table: how cost grows, and how far apart tokens are.
//
//   loglog_slope(x, y)        the exponent p of a power law y ~ c x^p, by least squares on (log x, log y)
//   median(values)            the middle of repeated timings, which a few slow outliers do not move
//   measured_path_length(...) how many hops a change of one input position needs to reach another position
//
// Path length. Read an encoder as a chain of stages, each a step that must wait for the one before it (a layer of
// self-attention or of a CNN, one time step of one RNN layer). Between two positions i and j, the path length is
// the fewest hops from position to position on a chain of dependencies leading from input x_i to output y_j: a hop
// is one stage carrying information from one position to another (staying at a position costs nothing). The
// chapter's maximum path length is that of the farthest pair, x_1 to y_n. When no dependency leads from x_i to
// y_j at all (a causal RNN backwards, a CNN too shallow for the distance), there is no path: `unreachable`.
//
// The probe measures it by running the chain: it perturbs input position i, runs the clean and the perturbed input
// through the stages side by side, and after each stage marks the positions whose state now differs. The path
// length is the number of stages that marked a position not marked before, up to the stage that marks j.
// The comparison is exact (!=): the forward is deterministic, so a position that does not depend on x_i is
// computed from bit-identical inputs and comes out bit-identical. To keep a long chain from washing the change out
// below rounding (an RNN forgets geometrically), after every stage the perturbed state at each position that
// differs is moved back to unit distance (max norm) from the clean one, in the same direction; positions that do
// not differ are left bit-identical. The probe so finds where the change can go, not how strongly it arrives.
#pragma once

#include <attend/config.hpp>

#include <algorithm>
#include <attend/tensor.hpp>
#include <cmath>
#include <cstddef>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

// The path length reported when no chain of dependencies connects the two positions.
inline constexpr Index unreachable = -1;

// The least-squares slope of log y against log x: the exponent p that best explains y = c x^p.
// x and y: the same number (at least 2) of positive, finite values; x must not all be equal.
inline double loglog_slope(const std::vector<double>& x, const std::vector<double>& y) {
  detail::require(x.size() == y.size(), "loglog_slope: x and y must have the same size, got ", x.size(), " and ",
                  y.size());
  detail::require(x.size() >= 2, "loglog_slope: needs at least 2 points, got ", x.size());
  const std::size_t m = x.size();
  std::vector<double> lx(m), ly(m);  // (m): the logarithms
  for (std::size_t i = 0; i < m; ++i) {
    detail::require(std::isfinite(x[i]) && x[i] > 0, "loglog_slope: x must be positive and finite, got x[", i,
                    "] = ", x[i]);
    detail::require(std::isfinite(y[i]) && y[i] > 0, "loglog_slope: y must be positive and finite, got y[", i,
                    "] = ", y[i]);
    lx[i] = std::log(x[i]);
    ly[i] = std::log(y[i]);
  }
  double mean_x = 0, mean_y = 0;
  for (std::size_t i = 0; i < m; ++i) {
    mean_x += lx[i];
    mean_y += ly[i];
  }
  mean_x /= static_cast<double>(m);
  mean_y /= static_cast<double>(m);
  double sxx = 0, sxy = 0;  // sums of centred squares and products
  for (std::size_t i = 0; i < m; ++i) {
    sxx += (lx[i] - mean_x) * (lx[i] - mean_x);
    sxy += (lx[i] - mean_x) * (ly[i] - mean_y);
  }
  detail::require(sxx > 0, "loglog_slope: x must take at least 2 different values, got ", m, " times ", x[0]);
  return sxy / sxx;
}

// The median of `values` (the mean of the two middle ones for an even count); values must not be empty.
inline double median(std::vector<double> values) {
  detail::require(!values.empty(), "median: values must not be empty, got 0 values");
  const std::size_t half = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(half), values.end());
  const double upper = values[half];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(half));
  return (lower + upper) / 2;
}

namespace detail {

// Marks in `reached` every position whose state differs between H and perturbed, and moves the perturbed state of
// each such (batch row, position) back to unit max-norm distance from the clean one. Returns true when a position
// was marked that was not marked before. H, perturbed: (batch, n, d).
template <class Scalar>
bool mark_and_rescale(const Tensor3<Scalar>& H, Tensor3<Scalar>& perturbed, std::vector<bool>& reached) {
  bool grew = false;
  for (Index b = 0; b < H.dimension(0); ++b) {
    const auto clean = slice(H, b);      // (n, d)
    auto changed = slice(perturbed, b);  // (n, d)
    for (Index p = 0; p < H.dimension(1); ++p) {
      // max_f |changed(p, f) - clean(p, f)|, by a plain loop: Eigen's vectorised maxCoeff trips GCC 12's false
      // -Wmaybe-uninitialized inside its AVX-512 intrinsics under -march=native.
      Scalar distance = 0;
      for (Index f = 0; f < H.dimension(2); ++f) distance = std::max(distance, std::abs(changed(p, f) - clean(p, f)));
      if (!(distance > Scalar(0))) continue;  // bit-identical
      if (std::isfinite(distance)) changed.row(p) = clean.row(p) + (changed.row(p) - clean.row(p)) / distance;
      if (!reached[static_cast<std::size_t>(p)]) grew = true;
      reached[static_cast<std::size_t>(p)] = true;
    }
  }
  return grew;
}

}  // namespace detail

// The path length from input position `from` to output position `to` (0-based), measured as described at the top
// of this file, or `unreachable`. X: (batch, n, d), the input around which to perturb (any values; random ones
// avoid accidental symmetries); position `from` of every batch row is moved by +1 in every feature.
//
// Encoder is anything that exposes its forward pass as a chain of stages on a (batch, n, d) state:
//   Tensor3<Scalar> embed(const Tensor3<Scalar>& X)    what comes before the chain (position-wise, or the identity)
//   Index sequential_operations(Index n) const         the number of stages for n steps
//   void stage(Index s, Tensor3<Scalar>& H)            runs stage s = 0 .. sequential_operations(n) - 1, in place
// (the three encoders of sequence_encoders.hpp do; a test can pass any small class with these three).
template <class Encoder, class Scalar>
Index measured_path_length(Encoder& encoder, const Tensor3<Scalar>& X, Index from, Index to) {
  constexpr const char* where = "measured_path_length";
  const Index n = X.dimension(1);
  detail::require(X.dimension(0) >= 1 && n >= 1 && X.dimension(2) >= 1, where,
                  ": X must have at least 1 batch row, 1 step and 1 feature, got shape ",
                  detail::shape_text(X.dimensions()));
  detail::require(from >= 0 && from < n, where, ": from must be a position in [0, ", n, "), got ", from);
  detail::require(to >= 0 && to < n, where, ": to must be a position in [0, ", n, "), got ", to);

  Tensor3<Scalar> moved = X;  // (batch, n, d): X with position `from` moved by +1
  for (Index b = 0; b < X.dimension(0); ++b)
    for (Index f = 0; f < X.dimension(2); ++f) moved(b, from, f) += Scalar(1);
  Tensor3<Scalar> H = encoder.embed(X);              // (batch, n, d): the clean state
  Tensor3<Scalar> perturbed = encoder.embed(moved);  // (batch, n, d): the perturbed state

  std::vector<bool> reached(static_cast<std::size_t>(n), false);
  detail::mark_and_rescale(H, perturbed, reached);
  if (reached[static_cast<std::size_t>(to)]) return 0;
  Index hops = 0;
  const Index stages = encoder.sequential_operations(n);
  for (Index s = 0; s < stages; ++s) {
    encoder.stage(s, H);
    encoder.stage(s, perturbed);
    if (detail::mark_and_rescale(H, perturbed, reached)) ++hops;
    if (reached[static_cast<std::size_t>(to)]) return hops;
  }
  return unreachable;
}

// From the first input position to the last output position: x_1 to y_n, the pair of the chapter's table.
template <class Encoder, class Scalar>
Index measured_path_length(Encoder& encoder, const Tensor3<Scalar>& X) {
  return measured_path_length(encoder, X, 0, X.dimension(1) - 1);
}

}  // namespace ATTEND_ABI
}  // namespace attend
