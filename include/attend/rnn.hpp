// attend/rnn.hpp — an Elman recurrent network, as torch.nn.RNN(input_size, hidden_size, batch_first=True):
// tanh, one layer, one direction, h_0 = 0.
//
//   h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)        t = 1 .. steps,  h_0 = 0
//
//   x_t: (input_size)   h_t: (hidden_size)   W_ih: (hidden_size, input_size)   W_hh: (hidden_size, hidden_size)
//   b_ih, b_hh: (hidden_size)
//
// The forward pass returns every h_t, (batch, steps, hidden_size), like the first output of nn.RNN. It is done in
// two parts: the input projection x_t W_ih^T + b_ih + b_hh of all batch * steps rows at once (project_rows, written
// straight into the output), then the recurrence, one (batch, hidden) x (hidden, hidden) product per step over the
// whole batch on the row kernel, reading h_{t-1} from and writing h_t to the output through strided views.
//
// Initialised as PyTorch does: every parameter uniform in [-1/sqrt(hidden_size), 1/sqrt(hidden_size)), drawn in
// PyTorch's parameter order — weight_ih row by row, weight_hh row by row, bias_ih, bias_hh. state_dict() uses
// nn.RNN's names: weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0.
//
// Training: operator() keeps X and every h_t for backward(dH), which runs backpropagation through time. With
// dpre_t the gradient of step t's argument of tanh, from the last step back to the first:
//
//   dpre_t = (dH_t + dpre_{t+1} W_hh) * (1 - h_t^2)                 (no dpre_{t+1} term at the last step)
//   dX = dpre W_ih      dW_ih += dpre^T X      dW_hh += dpre^T h_prev      db_ih += sum dpre, db_hh += sum dpre
//
// with dpre, X and h_prev (h_{t-1}, h_0 = 0) seen as (batch * steps, ...) rows. The recurrence runs on the calling
// thread, one (batch, hidden) x (hidden, hidden) product per step on the row kernel, like the forward pass's; the
// other products are detail/products.hpp's. forward() const keeps nothing.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/kernels.hpp>
#include <attend/detail/products.hpp>
#include <attend/detail/project_rows.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/detail/views.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <cmath>
#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class RNN : public Module, public detail::WithParameters<RNN<Scalar>, Scalar> {
 public:
  RNN(Index input_size, Index hidden_size, Generator& generator = default_generator())
      : input_size_(checked(input_size, "input_size")), hidden_size_(checked(hidden_size, "hidden_size")) {
    const Scalar bound = Scalar(1) / std::sqrt(static_cast<Scalar>(hidden_size));
    weight_ih_.resize(hidden_size, input_size);
    weight_hh_.resize(hidden_size, hidden_size);
    bias_ih_.resize(hidden_size);
    bias_hh_.resize(hidden_size);
    fill(weight_ih_.data(), weight_ih_.size(), bound, generator);
    fill(weight_hh_.data(), weight_hh_.size(), bound, generator);
    fill(bias_ih_.data(), bias_ih_.size(), bound, generator);
    fill(bias_hh_.data(), bias_hh_.size(), bound, generator);
    weight_ih_grad_ = Matrix<Scalar>::Zero(hidden_size, input_size);
    weight_hh_grad_ = Matrix<Scalar>::Zero(hidden_size, hidden_size);
    bias_ih_grad_ = Vector<Scalar>::Zero(hidden_size);
    bias_hh_grad_ = Vector<Scalar>::Zero(hidden_size);
  }

  Matrix<Scalar>& weight_ih() { return weight_ih_; }  // (hidden_size, input_size)
  const Matrix<Scalar>& weight_ih() const { return weight_ih_; }
  Matrix<Scalar>& weight_hh() { return weight_hh_; }  // (hidden_size, hidden_size)
  const Matrix<Scalar>& weight_hh() const { return weight_hh_; }
  Vector<Scalar>& bias_ih() { return bias_ih_; }  // (hidden_size)
  const Vector<Scalar>& bias_ih() const { return bias_ih_; }
  Vector<Scalar>& bias_hh() { return bias_hh_; }  // (hidden_size)
  const Vector<Scalar>& bias_hh() const { return bias_hh_; }
  Index input_size() const { return input_size_; }
  Index hidden_size() const { return hidden_size_; }

  // X: (batch, steps, input_size) -> every h_t: (batch, steps, hidden_size); keeps X and the result for backward().
  // Zero batch rows or zero steps give an empty result of that shape. X is a Tensor3 or a map of one (TensorMap3,
  // ConstTensorMap3), read in place, as every tensor argument below.
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input) {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    Tensor3<Scalar> H = forward(X);  // (batch, steps, hidden_size); throws before anything is kept
    recorded_input_ = X;
    recorded_output_ = H;
    recorded_ = true;
    return H;
  }

  // The same output, keeping nothing.
  template <class Input>
  Tensor3<Scalar> forward(const Input& input) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    check_input(X, "RNN");
    Tensor3<Scalar> H(X.dimension(0), X.dimension(1), hidden_size_);  // (batch, steps, hidden_size)
    run(X, detail::output3<Scalar>(H));
    return H;
  }
  // The same into out (batch, steps, hidden_size): a Tensor3 of that shape or a TensorMap3 of the caller's memory,
  // apart from X's.
  template <class Input, class Out>
  void forward(const Input& input, Out&& out_arg) const {
    constexpr const char* where = "RNN::forward";
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    const TensorMap3<Scalar> out = detail::output3<Scalar>(out_arg);
    check_input(X, where);
    detail::require_out<Scalar>(out, {X.dimension(0), X.dimension(1), hidden_size_}, where,
                                "(batch, steps, hidden_size)", {{&X, "X"}});
    run(X, out);
  }

 private:
  void check_input(const ConstTensorMap3<Scalar>& X, const char* where) const {
    require_parameters(where);
    detail::require_dim(X, 2, input_size_, where, "X", "features (input_size)");
  }

  // The forward pass on a checked X (batch, steps, input_size), into H (batch, steps, hidden_size).
  void run(const ConstTensorMap3<Scalar>& X, const TensorMap3<Scalar>& H) const {
    const Index batch = X.dimension(0), steps = X.dimension(1), hidden = hidden_size_;
    if (H.size() == 0) return;  // no view of an empty buffer is taken below

    // 1. Input projection of every (batch row, step) at once, both biases folded in.
    auto projected = detail::as_matrix(H);  // (batch * steps, hidden), row b * steps + t
    const Vector<Scalar> bias = bias_ih_ + bias_hh_;  // (hidden)
    detail::project_rows<Scalar>(detail::as_matrix(X), {detail::projection(weight_ih_, bias, projected.data())});

    // 2. The recurrence. Seen as (batch, steps * hidden), columns t * hidden .. of H are step t of every batch
    //    row: a (batch, hidden) view with row stride steps * hidden. Each step adds h_{t-1} W_hh^T on the level's
    //    row kernel, from one copy of W_hh^T made for the call (read once per step), packed into the level's
    //    micro-panels in packet-aligned memory (at an Eigen matrix's 16-byte alignment every AVX-512 load of it would
    //    span two cache lines), then takes tanh. The steps are sequential and each is a small product: they run on
    //    the calling thread.
    const detail::Kernels<Scalar>& kernel = detail::kernels<Scalar>();
    detail::PacketBuffer<Scalar> recurrent;  // W_hh^T (hidden, hidden), packed: entry (k, o) at W_hh[o * hidden + k]
    recurrent.resize(hidden * detail::padded_to_packets<Scalar>(hidden));
    kernel.pack_panel(detail::b_columns(weight_hh_.data(), hidden), hidden, hidden, recurrent.data());
    const Index ld = steps * hidden;  // between batch rows of a step's view
    Eigen::Map<Matrix<Scalar>> rows(H.data(), batch, ld);  // (batch, steps * hidden)
    for (Index t = 0; t < steps; ++t) {
      Scalar* h = H.data() + t * hidden;  // (batch, hidden), rows ld apart: x_t W_ih^T + b_ih + b_hh, then h_t
      if (t > 0)
        kernel.packed_times_matrix(detail::x_rows(h - hidden, ld, batch), hidden,
                                   detail::b_packed(recurrent.data(), hidden, hidden), hidden, detail::y_added(h, ld));
      rows.middleCols(t * hidden, hidden).array() = rows.middleCols(t * hidden, hidden).array().tanh();
    }
  }

 public:

  // dH: (batch, steps, hidden_size), the gradient of the last operator() call's output (every h_t) -> dX (batch,
  // steps, input_size); adds the gradients of the four parameters into their buffers. Throws std::logic_error when
  // no call was recorded, std::invalid_argument when dH has another shape or a parameter or gradient was resized; a
  // call that throws changes nothing.
  template <class GradOutput>
  Tensor3<Scalar> backward(const GradOutput& grad_output) {
    constexpr const char* where = "RNN::backward";
    const ConstTensorMap3<Scalar> dH = detail::input3<Scalar>(grad_output);
    detail::require_recorded(recorded_, where, "RNN");
    require_parameters(where);
    this->require_gradients(where);
    const Tensor3<Scalar>& X = recorded_input_;   // (batch, steps, input_size)
    const Tensor3<Scalar>& H = recorded_output_;  // (batch, steps, hidden_size)
    const Index batch = X.dimension(0), steps = X.dimension(1), hidden = hidden_size_;
    detail::require_shape(dH, {batch, steps, hidden}, where, "grad_output", "(batch, steps, hidden_size)");

    const Tensor3<Scalar> dpre = through_time(H, dH);  // (batch, steps, hidden)
    const auto dpre_rows = detail::as_matrix(dpre);    // (batch * steps, hidden)
    Tensor3<Scalar> dX(batch, steps, input_size_);     // (batch, steps, input_size)
    detail::times<Scalar>(false, dpre.data(), hidden, batch * steps, hidden, weight_ih_.data(), input_size_,
                          input_size_, dX.data(), input_size_);

    // h_{t-1} for every step: H one step later, h_0 = 0 first.
    Tensor3<Scalar> previous(batch, steps, hidden);  // (batch, steps, hidden)
    previous.setZero();
    if (steps > 1)
      for (Index b = 0; b < batch; ++b)
        detail::slice(previous, b).bottomRows(steps - 1) = detail::slice(H, b).topRows(steps - 1);

    // This call's gradients, then added, as PyTorch adds a new gradient to .grad.
    Matrix<Scalar> dW_ih(hidden, input_size_);  // (hidden, input_size)
    Matrix<Scalar> dW_hh(hidden, hidden);       // (hidden, hidden)
    detail::transposed_times<Scalar>(false, dpre_rows, detail::as_matrix(X), dW_ih);
    detail::transposed_times<Scalar>(false, dpre_rows, detail::as_matrix(previous), dW_hh);
    weight_ih_grad_ += dW_ih;
    weight_hh_grad_ += dW_hh;
    if (dpre_rows.rows() > 0) {  // both biases' gradient: the column sums (an empty view has no rows to point at)
      bias_ih_grad_ += dpre_rows.colwise().sum().transpose();
      bias_hh_grad_ += dpre_rows.colwise().sum().transpose();
    }
    return dX;
  }

  // The gradients backward() adds to, each of its parameter's shape, zero at construction.
  Matrix<Scalar>& weight_ih_grad() { return weight_ih_grad_; }  // (hidden_size, input_size)
  const Matrix<Scalar>& weight_ih_grad() const { return weight_ih_grad_; }
  Matrix<Scalar>& weight_hh_grad() { return weight_hh_grad_; }  // (hidden_size, hidden_size)
  const Matrix<Scalar>& weight_hh_grad() const { return weight_hh_grad_; }
  Vector<Scalar>& bias_ih_grad() { return bias_ih_grad_; }  // (hidden_size)
  const Vector<Scalar>& bias_ih_grad() const { return bias_ih_grad_; }
  Vector<Scalar>& bias_hh_grad() { return bias_hh_grad_; }  // (hidden_size)
  const Vector<Scalar>& bias_hh_grad() const { return bias_hh_grad_; }

  // The multiply-adds of one forward pass on (batch, steps, input_size), as done here: the input projection,
  // batch * steps * hidden * input, and the recurrent products, batch * (steps - 1) * hidden * hidden (h_0 = 0,
  // so the first step has none). Bias additions and tanh are not counted.
  Index multiply_adds(Index batch, Index steps) const {
    detail::require_at_least(batch, 0, "RNN::multiply_adds", "batch");
    detail::require_at_least(steps, 0, "RNN::multiply_adds", "steps");
    const Index recurrent_steps = steps > 0 ? steps - 1 : 0;
    return batch * steps * hidden_size_ * input_size_ + batch * recurrent_steps * hidden_size_ * hidden_size_;
  }

  // zero_grad(), parameters(), state_dict(), load_state_dict(), visit_parameters(), visit_with_gradients() and
  // require_gradients(): detail::WithParameters (parameter.hpp), over these parameters:
  // weight_ih_l0 (hidden_size, input_size), weight_hh_l0 (hidden_size, hidden_size), bias_ih_l0 (hidden_size),
  // bias_hh_l0 (hidden_size): nn.RNN's names and order.

  // Throws unless the parameters still have the shapes given at construction (the accessors hand out references,
  // so they can be resized from outside). `where` names the caller in the message.
  void require_parameters(const char* where) const {
    require_matrix(weight_ih_, "weight_ih", input_size_, "input_size", where);
    require_matrix(weight_hh_, "weight_hh", hidden_size_, "hidden_size", where);
    require_vector(bias_ih_, "bias_ih", where);
    require_vector(bias_hh_, "bias_hh", where);
  }

 private:
  friend class detail::WithParameters<RNN<Scalar>, Scalar>;
  static constexpr const char* module_name = "RNN";

  // Calls visit(name, parameter, gradient, shape) for each parameter of self (a RNN or a const one).
  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    const Index hidden = self.hidden_size_;
    visit("weight_ih_l0", self.weight_ih_, self.weight_ih_grad_, std::vector<Index>{hidden, self.input_size_});
    visit("weight_hh_l0", self.weight_hh_, self.weight_hh_grad_, std::vector<Index>{hidden, hidden});
    visit("bias_ih_l0", self.bias_ih_, self.bias_ih_grad_, std::vector<Index>{hidden});
    visit("bias_hh_l0", self.bias_hh_, self.bias_hh_grad_, std::vector<Index>{hidden});
  }

  // Backpropagation through time: H (batch, steps, hidden), every h_t of the recorded call, and dH, the gradient of
  // its output, of that shape -> dpre (batch, steps, hidden), the gradient of each step's argument of tanh. Seen as
  // (batch, steps * hidden), as in the forward pass, step t of every batch row is a (batch, hidden) view with row
  // stride steps * hidden; dpre starts as dH, and each step, last first, multiplies its view by tanh's derivative
  // 1 - h_t^2, then adds it times W_hh into the step before (read in place: dpre_t W_hh is (batch, hidden) x
  // (hidden, hidden) with W_hh row-major).
  Tensor3<Scalar> through_time(const Tensor3<Scalar>& H, const ConstTensorMap3<Scalar>& dH) const {
    const Index batch = H.dimension(0), steps = H.dimension(1), hidden = hidden_size_;
    Tensor3<Scalar> dpre = dH;  // (batch, steps, hidden)
    if (dpre.size() == 0) return dpre;  // no view of an empty buffer is taken below
    const detail::Kernels<Scalar>& kernel = detail::kernels<Scalar>();
    const Index ld = steps * hidden;                          // between batch rows of a step's view
    Eigen::Map<Matrix<Scalar>> rows(dpre.data(), batch, ld);  // (batch, steps * hidden)
    Eigen::Map<const Matrix<Scalar>> h(H.data(), batch, ld);  // (batch, steps * hidden)
    for (Index t = steps - 1; t >= 0; --t) {
      rows.middleCols(t * hidden, hidden).array() *= Scalar(1) - h.middleCols(t * hidden, hidden).array().square();
      Scalar* d = dpre.data() + t * hidden;  // (batch, hidden), rows ld apart: dpre_t
      if (t > 0)
        kernel.times_matrix(detail::x_rows(d, ld, batch), hidden, detail::b_rows(weight_hh_.data(), hidden), hidden,
                            detail::y_added(d - hidden, ld));
    }
    return dpre;
  }

  static Index checked(Index size, const char* name) {
    detail::require_at_least(size, 1, "RNN", name);
    return size;
  }

  static void fill(Scalar* data, Index size, Scalar bound, Generator& generator) {
    for (Index i = 0; i < size; ++i) data[i] = generator.uniform(-bound, bound);
  }

  void require_matrix(const Matrix<Scalar>& W, const char* name, Index cols, const char* cols_name,
                      const char* where) const {
    detail::require(W.rows() == hidden_size_ && W.cols() == cols, where, ": ", name, " must have shape (",
                    hidden_size_, ", ", cols, ") (hidden_size, ", cols_name, "), got (", W.rows(), ", ", W.cols(),
                    ")");
  }

  void require_vector(const Vector<Scalar>& b, const char* name, const char* where) const {
    detail::require(b.size() == hidden_size_, where, ": ", name, " must have shape (", hidden_size_, ",), got (",
                    b.size(), ",)");
  }

  Index input_size_;
  Index hidden_size_;
  Matrix<Scalar> weight_ih_;  // (hidden_size, input_size)
  Matrix<Scalar> weight_hh_;  // (hidden_size, hidden_size)
  Vector<Scalar> bias_ih_;    // (hidden_size)
  Vector<Scalar> bias_hh_;    // (hidden_size)
  Matrix<Scalar> weight_ih_grad_;  // (hidden_size, input_size)
  Matrix<Scalar> weight_hh_grad_;  // (hidden_size, hidden_size)
  Vector<Scalar> bias_ih_grad_;    // (hidden_size)
  Vector<Scalar> bias_hh_grad_;    // (hidden_size)
  Tensor3<Scalar> recorded_input_;   // (batch, steps, input_size): the last operator() call's X
  Tensor3<Scalar> recorded_output_;  // (batch, steps, hidden_size): its h_1 .. h_steps
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
