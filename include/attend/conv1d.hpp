// attend/conv1d.hpp — a 1-D convolution over the steps, as torch.nn.Conv1d(in_channels, out_channels,
// kernel_size, padding='same') with stride 1 and dilation 1, on attend's layout (batch, steps, channels).
//
//   Y[b, s, o] = bias[o] + sum_{i, t} W[o, i, t] X[b, s + t - left, i]        X outside [0, steps) is 0
//
//   W: (out_channels, in_channels, kernel_size), PyTorch's layout      bias: (out_channels)
//   left = (kernel_size - 1) / 2 (rounded down), right = kernel_size - 1 - left
//
// 'same' keeps the number of steps. PyTorch pads kernel_size - 1 steps in all; for an even kernel the extra step
// goes on the right (left 1, right 2 for kernel_size 4). Like PyTorch this is a cross-correlation: the kernel is
// not flipped.
//
// The forward pass is kernel_size matrix products with no im2col buffer and no copy of W: the receptive field of
// output step s is kernel_size consecutive steps, and tap t's product multiplies the steps t - left after each output
// step, (steps, in_channels) rows of X read in place, by W[:, :, t]^T read from W; near either end of a batch row a
// tap skips the output steps whose field it would reach past the row (its product there is with zeros). The products
// are one kernel of the active level (correlate_rows, detail/kernels/products-inl.hpp): it packs a panel of every tap
// at once from W (the taps of a channel are adjacent in W, so W^T's rows are the taps' rows, interleaved, packed by
// register transposes), and each block of output rows adds all the taps of a panel in registers before it stores.
// No extra memory but the kernel's packed panel.
//
// Initialised as PyTorch does: W, then bias, uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = in_channels * kernel_size; W is drawn in its row-major order (o, i, t). state_dict() uses nn.Conv1d's
// names: weight, and bias when has_bias().
//
// Training: operator() keeps X for backward(dY). The input's gradient is a correlation of the same kind, of dY with
// W flipped in time and its channels swapped, padded the other way round (right zero steps before, left after):
//
//   dX[b, p, i] = sum_{o, t} W[o, i, t] dY[b, p + left - t, o]          dY outside [0, steps) is 0
//
// so it runs on the forward pass's products, tap u being W[:, :, k - 1 - u] (out_channels, in_channels), read in
// place from W. The weight's gradient, dW[o, i, t] = sum_{b, s} dY[b, s, o] X[b, s + t - left, i],
// is per batch row dY transposed times the windows of X (read in place from a copy with the zero steps around it),
// added over the batch rows in order (detail/products.hpp); the bias's is the column sums of dY. forward() const
// keeps nothing.
#pragma once

#include <attend/config.hpp>

#include <algorithm>
#include <attend/detail/products.hpp>
#include <attend/detail/project_rows.hpp>
#include <attend/detail/views.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class Conv1d : public Module, public detail::WithParameters<Conv1d<Scalar>, Scalar> {
 public:
  Conv1d(Index in_channels, Index out_channels, Index kernel_size, bool bias = true,
         Generator& generator = default_generator())
      : in_channels_(checked(in_channels, "in_channels")),
        out_channels_(checked(out_channels, "out_channels")),
        kernel_size_(checked(kernel_size, "kernel_size")),
        has_bias_(bias),
        weight_(out_channels, in_channels, kernel_size) {
    const Scalar bound = Scalar(1) / std::sqrt(static_cast<Scalar>(in_channels * kernel_size));
    for (Index j = 0; j < weight_.size(); ++j) weight_.data()[j] = generator.uniform(-bound, bound);
    bias_ = Vector<Scalar>::Zero(bias ? out_channels : 0);
    for (Index j = 0; j < bias_.size(); ++j) bias_[j] = generator.uniform(-bound, bound);
    weight_grad_ = Tensor3<Scalar>(out_channels, in_channels, kernel_size);
    weight_grad_.setZero();
    bias_grad_ = Vector<Scalar>::Zero(bias_.size());
  }

  Tensor3<Scalar>& weight() { return weight_; }  // (out_channels, in_channels, kernel_size)
  const Tensor3<Scalar>& weight() const { return weight_; }
  Vector<Scalar>& bias() { return bias_; }  // (out_channels), empty when has_bias() is false
  const Vector<Scalar>& bias() const { return bias_; }
  bool has_bias() const { return has_bias_; }
  Index in_channels() const { return in_channels_; }
  Index out_channels() const { return out_channels_; }
  Index kernel_size() const { return kernel_size_; }
  // Zero steps padded before the first step and after the last: left + right = kernel_size - 1.
  Index left_padding() const { return (kernel_size_ - 1) / 2; }
  Index right_padding() const { return kernel_size_ - 1 - left_padding(); }

  // X: (batch, steps, in_channels) -> (batch, steps, out_channels); keeps X for backward().
  // Zero batch rows or zero steps give an empty result of that shape. X is a Tensor3 or a map of one (TensorMap3,
  // ConstTensorMap3), read in place, as every tensor argument below.
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input) {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    Tensor3<Scalar> Y = forward(X);  // (batch, steps, out_channels); throws before anything is kept
    recorded_input_ = X;
    recorded_ = true;
    return Y;
  }

  // The same output, keeping nothing.
  template <class Input>
  Tensor3<Scalar> forward(const Input& input) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    check_input(X, "Conv1d");
    Tensor3<Scalar> Y(X.dimension(0), X.dimension(1), out_channels_);  // (batch, steps, out)
    correlate(X, output_taps(), left_padding(), has_bias_ ? bias_.data() : nullptr, detail::output3<Scalar>(Y));
    return Y;
  }
  // The same into out (batch, steps, out_channels): a Tensor3 of that shape or a TensorMap3 of the caller's memory,
  // apart from X's.
  template <class Input, class Out>
  void forward(const Input& input, Out&& out_arg) const {
    constexpr const char* where = "Conv1d::forward";
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    const TensorMap3<Scalar> out = detail::output3<Scalar>(out_arg);
    check_input(X, where);
    detail::require_out<Scalar>(out, {X.dimension(0), X.dimension(1), out_channels_}, where,
                                "(batch, steps, out_channels)", {{&X, "X"}});
    correlate(X, output_taps(), left_padding(), has_bias_ ? bias_.data() : nullptr, out);
  }

  // dY: (batch, steps, out_channels), the gradient of the last operator() call's output -> dX (batch, steps,
  // in_channels); adds dW and db into weight_grad() and bias_grad(). Throws std::logic_error when no call was
  // recorded, std::invalid_argument when dY has another shape or a parameter or gradient was resized; a call that
  // throws changes nothing.
  template <class GradOutput>
  Tensor3<Scalar> backward(const GradOutput& grad_output) {
    constexpr const char* where = "Conv1d::backward";
    const ConstTensorMap3<Scalar> dY = detail::input3<Scalar>(grad_output);
    detail::require_recorded(recorded_, where, "Conv1d");
    require_parameters(where);
    this->require_gradients(where);
    const Tensor3<Scalar>& X = recorded_input_;  // (batch, steps, in_channels)
    const Index batch = X.dimension(0), steps = X.dimension(1);
    detail::require_shape(dY, {batch, steps, out_channels_}, where, "grad_output", "(batch, steps, out_channels)");
    Tensor3<Scalar> dX(batch, steps, in_channels_);  // (batch, steps, in_channels)
    correlate(dY, input_taps(), right_padding(), nullptr, detail::output3<Scalar>(dX));
    // This call's gradients, each added in, as PyTorch adds a new gradient to .grad.
    add_weight_gradient(X, dY);
    if (has_bias_ && dY.size() > 0) bias_grad_ += detail::as_matrix(dY).colwise().sum().transpose();
    return dX;
  }

  // The gradients backward() adds to: weight's (out_channels, in_channels, kernel_size) and bias's (out_channels,
  // empty without a bias), zero at construction.
  Tensor3<Scalar>& weight_grad() { return weight_grad_; }
  const Tensor3<Scalar>& weight_grad() const { return weight_grad_; }
  Vector<Scalar>& bias_grad() { return bias_grad_; }
  const Vector<Scalar>& bias_grad() const { return bias_grad_; }

  // The multiply-adds of one forward pass on (batch, steps, in_channels), as done here:
  // batch * steps * out_channels * in_channels * kernel_size — the product multiplies the padding zeros too.
  // Bias additions are not counted.
  Index multiply_adds(Index batch, Index steps) const {
    detail::require_at_least(batch, 0, "Conv1d::multiply_adds", "batch");
    detail::require_at_least(steps, 0, "Conv1d::multiply_adds", "steps");
    return batch * steps * out_channels_ * in_channels_ * kernel_size_;
  }

  // zero_grad(), parameters(), state_dict(), load_state_dict(), visit_parameters(), visit_with_gradients() and
  // require_gradients(): detail::WithParameters (parameter.hpp), over these parameters:
  // weight (out_channels, in_channels, kernel_size), then bias (out_channels) when has_bias(): nn.Conv1d's names
  // and order.

  // Throws unless the parameters still have the shapes given at construction (weight() and bias() hand out
  // references, so they can be resized from outside). `where` names the caller in the message.
  void require_parameters(const char* where) const {
    detail::require(weight_.dimension(0) == out_channels_ && weight_.dimension(1) == in_channels_ &&
                        weight_.dimension(2) == kernel_size_,
                    where, ": weight must have shape (", out_channels_, ", ", in_channels_, ", ", kernel_size_,
                    ") (out_channels, in_channels, kernel_size), got ", detail::shape_text(weight_.dimensions()));
    const Index bias_size = has_bias_ ? out_channels_ : 0;
    detail::require(bias_.size() == bias_size, where, ": bias must have shape (", bias_size, ",), got (", bias_.size(),
                    ",)");
  }

 private:
  friend class detail::WithParameters<Conv1d<Scalar>, Scalar>;
  static constexpr const char* module_name = "Conv1d";

  void check_input(const ConstTensorMap3<Scalar>& X, const char* where) const {
    require_parameters(where);
    detail::require_dim(X, 2, in_channels_, where, "X", "features (in_channels)");
  }

  // Calls visit(name, parameter, gradient, shape) for each parameter of self (a Conv1d or a const one).
  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    visit("weight", self.weight_, self.weight_grad_,
          std::vector<Index>{self.out_channels_, self.in_channels_, self.kernel_size_});
    if (self.has_bias_) visit("bias", self.bias_, self.bias_grad_, std::vector<Index>{self.out_channels_});
  }

  // The taps of a correlation read in place from W (out, in, k): tap t the (m, n) matrix whose entry (i, o) is
  // data[i * row_stride + t * tap_stride + o * column_stride].
  struct Taps {
    const Scalar* data;
    Index row_stride, tap_stride, column_stride;
  };

  // The forward pass's taps: tap t is W[:, :, t]^T (in, out), its entry (i, o) at W[o * in * k + i * k + t].
  Taps output_taps() const { return {weight_.data(), kernel_size_, 1, in_channels_ * kernel_size_}; }

  // The input gradient's taps, W flipped in time with its channels swapped: tap u is W[:, :, k - 1 - u] (out, in), its
  // entry (o, i) at W[o * in * k + i * k + k - 1 - u].
  Taps input_taps() const {
    return {weight_.data() + (kernel_size_ - 1), in_channels_ * kernel_size_, -1, kernel_size_};
  }

  // Y (batch, steps, n) = the 'same' correlation of X (batch, steps, m) with k taps (m, n), tap t multiplying the
  // step t - left after each output step, plus bias (n values, or null). Output step s of batch row b reads that row's
  // steps s - left .. s - left + k - 1, zero outside it. Per chunk of steps, one call of the kernel table's
  // correlate_rows, reading X and the taps in place (detail/kernels/products-inl.hpp: the order of each output's sum,
  // fixed by the shape); Y starts from 0, the bias added last.
  void correlate(const ConstTensorMap3<Scalar>& X, const Taps& taps, Index left, const Scalar* bias,
                 const TensorMap3<Scalar>& Y) const {
    const Index batch = X.dimension(0), steps = X.dimension(1), m = X.dimension(2), n = Y.dimension(2);
    const Index k = kernel_size_;
    const Index chunks = (steps + detail::rows_per_chunk - 1) / detail::rows_per_chunk;  // per batch row
    const double per_row = static_cast<double>(m * k) * static_cast<double>(n);
    const detail::Kernels<Scalar>& kernel = detail::kernels<Scalar>();  // before the parallel region: it may throw
    // Chunks fixed by the shape, not by the number of threads: the same bits for any thread count.
    detail::parallel_for(batch * chunks, static_cast<double>(batch * steps) * per_row, [&](Index item, int) {
      const Index b = item / chunks, s0 = item % chunks * detail::rows_per_chunk;
      const Index rows = std::min(detail::rows_per_chunk, steps - s0);
      const detail::SequenceRows<Scalar> chunk{X.data() + (b * steps + s0) * m, m, rows, s0, steps - s0 - rows};
      const detail::TapsOperand<Scalar> B{taps.data, taps.row_stride, taps.tap_stride, taps.column_stride, k, left};
      kernel.correlate_rows(chunk, m, B, n, detail::y_into(Y.data() + (b * steps + s0) * n, n, bias));
    });
  }

  // weight_grad() += dW (out, in, k): per batch row b, dY_b^T (out, steps) times the windows of X_b (steps, k * in;
  // row s holds X's steps s - left .. s - left + k - 1), added over the batch rows in order into (out, k * in) with
  // column t * in + i, then added in W's order. X (batch, steps, in), dY (batch, steps, out).
  void add_weight_gradient(const Tensor3<Scalar>& X, const ConstTensorMap3<Scalar>& dY) {
    const Index batch = X.dimension(0), steps = X.dimension(1);
    const Index in = in_channels_, out = out_channels_, k = kernel_size_;
    Matrix<Scalar> sums = Matrix<Scalar>::Zero(out, k * in);  // (out, k * in)
    // One batch row's steps with left_padding() zero steps before them and right_padding() after.
    Matrix<Scalar> padded = Matrix<Scalar>::Zero(steps + k - 1, in);  // (steps + k - 1, in)
    using Windows = Eigen::Map<const Matrix<Scalar>, 0, Eigen::OuterStride<>>;
    for (Index b = 0; b < batch; ++b) {
      padded.middleRows(left_padding(), steps) = detail::slice(X, b);
      const Windows windows(padded.data(), steps, k * in, Eigen::OuterStride<>(in));  // (steps, k * in), rows in apart
      detail::transposed_times<Scalar>(true, detail::slice(dY, b), windows, sums);
    }
    for (Index o = 0; o < out; ++o)
      for (Index i = 0; i < in; ++i)
        for (Index t = 0; t < k; ++t) weight_grad_(o, i, t) += sums(o, t * in + i);
  }

  static Index checked(Index size, const char* name) {
    detail::require_at_least(size, 1, "Conv1d", name);
    return size;
  }

  Index in_channels_;
  Index out_channels_;
  Index kernel_size_;
  bool has_bias_;
  Tensor3<Scalar> weight_;  // (out_channels, in_channels, kernel_size)
  Vector<Scalar> bias_;     // (out_channels) or empty
  Tensor3<Scalar> weight_grad_;  // (out_channels, in_channels, kernel_size)
  Vector<Scalar> bias_grad_;     // (out_channels) or empty
  Tensor3<Scalar> recorded_input_;  // (batch, steps, in_channels): the last operator() call's X
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
