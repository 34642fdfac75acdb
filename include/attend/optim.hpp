// attend/optim.hpp — optimizers with torch.optim's update rules, over any list of parameters (parameter.hpp;
// concatenate the lists of several modules). For parameter p with gradient g, at step t = 1, 2, ...:
//
//   SGD(lr, momentum, weight_decay)        d = g + weight_decay p;  with momentum: b = d at t = 1, else
//                                          b = momentum b + d, and d = b;  p -= lr d
//   Adam(lr, beta1, beta2, eps, wd)        g' = g + wd p;  m = beta1 m + (1 - beta1) g';
//                                          v = beta2 v + (1 - beta2) g'^2;
//                                          p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//   AdamW(lr, beta1, beta2, eps, wd)       p *= 1 - lr wd (decoupled weight decay); then Adam's update with wd = 0
//
// each operation in torch.optim's order (PyTorch's single-tensor implementation), the hyperparameters given in double
// precision and rounded to Scalar where PyTorch uses them on a tensor: the bias corrections are computed in double,
// as PyTorch computes them in Python. zero_grad() sets every gradient to 0.
//
// The constructors check every parameter: a negative size, or a null value or grad pointer with elements to point
// at, throws std::invalid_argument naming it before anything is allocated. step() and zero_grad() check every
// parameter first (Parameter::still_valid, parameter.hpp) and throw std::invalid_argument naming the first whose
// storage is no longer its module's, having changed nothing. So an optimizer keeps working on a module that was
// moved (move construction or move assignment: the storage moves with it, and step() updates the module at its new
// address), and refuses once the module was destroyed, copied over or moved over, or the parameter resized or
// reassigned; a copy of the module is not the module (its storage is new). A std::vector of modules copies them when
// it grows, since Eigen 3.4's Tensor, which every module with parameters holds, has no noexcept move constructor:
// after a reallocation the optimizer refuses. reserve() first, or make the optimizer after the last push_back.
#pragma once

#include <attend/config.hpp>

#include <attend/parameter.hpp>
#include <attend/tensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// What every optimizer shares: the parameters, their per-parameter state buffers, the step count.
template <class Scalar>
class Optimizer {
 public:
  void zero_grad() {
    require_valid("zero_grad");
    for (const Parameter<Scalar>& p : params_) std::fill(p.grad, p.grad + p.size, Scalar(0));
  }
  const std::vector<Parameter<Scalar>>& parameters() const { return params_; }
  // Steps taken so far.
  long long steps() const { return steps_; }

 protected:
  Optimizer(std::vector<Parameter<Scalar>> params, const char* name, int buffers)
      : params_(checked_parameters(std::move(params), name)), name_(name) {
    state_.resize(static_cast<std::size_t>(buffers));
    for (auto& buffer : state_)
      for (const Parameter<Scalar>& p : params_) buffer.emplace_back(Vector<Scalar>::Zero(p.size));
  }

  // Throws unless every parameter is where, and as large as, it was when the optimizer was made (a Parameter made
  // by hand, with no still_valid, is taken on trust).
  void require_valid(const char* what) const {
    for (const Parameter<Scalar>& p : params_)
      require(!p.still_valid || p.still_valid(), name_, "::", what, ": parameter ", quoted(p.name), " of ", p.size,
              " elements is no longer its module's storage: resized or replaced, or its module destroyed, copied "
              "or assigned over since the optimizer was made (make a new optimizer from the module's parameters())");
  }

  // Parameter i's state buffer `which`, (size).
  Vector<Scalar>& state(int which, std::size_t i) { return state_[static_cast<std::size_t>(which)][i]; }

  // Checks, counts the step, then update(i, t) for every parameter i at step t.
  template <class Update>
  void step_each(Update&& update) {
    require_valid("step");
    ++steps_;
    for (std::size_t i = 0; i < params_.size(); ++i) update(params_[i], i, steps_);
  }

  // params, each checked (detail::parameter_problem).
  static std::vector<Parameter<Scalar>> checked_parameters(std::vector<Parameter<Scalar>> params, const char* name) {
    for (const Parameter<Scalar>& p : params) {
      const std::string problem = parameter_problem(p);
      require(problem.empty(), name, ": ", problem);
    }
    return params;
  }

  static double checked(double value, double low, const char* name, const char* where, bool below_one = false) {
    require(value >= low && (!below_one || value < 1.0), where, ": ", name, " must be in [", low,
            below_one ? ", 1)" : ", inf)", ", got ", value);
    return value;
  }

 private:
  std::vector<Parameter<Scalar>> params_;
  const char* name_;
  std::vector<std::vector<Vector<Scalar>>> state_;  // [buffer][parameter], each (size)
  long long steps_ = 0;
};

}  // namespace detail

template <class Scalar>
class SGD : public detail::Optimizer<Scalar> {
 public:
  SGD(std::vector<Parameter<Scalar>> params, Scalar lr, Scalar momentum = 0, Scalar weight_decay = 0)
      : detail::Optimizer<Scalar>(std::move(params), "SGD", momentum != Scalar(0) ? 1 : 0),
        lr_(this->checked(lr, 0, "lr", "SGD")),
        momentum_(this->checked(momentum, 0, "momentum", "SGD")),
        weight_decay_(this->checked(weight_decay, 0, "weight_decay", "SGD")) {}

  void step() {
    const Scalar lr = static_cast<Scalar>(lr_), momentum = static_cast<Scalar>(momentum_);
    const Scalar decay = static_cast<Scalar>(weight_decay_);
    this->step_each([&](const Parameter<Scalar>& p, std::size_t i, long long t) {
      for (Index j = 0; j < p.size; ++j) {
        Scalar d = p.grad[j];
        if (weight_decay_ != 0) d = d + decay * p.value[j];
        if (momentum_ != 0) {
          Scalar& b = this->state(0, i)[j];
          b = t == 1 ? d : momentum * b + d;
          d = b;
        }
        p.value[j] = p.value[j] + -lr * d;
      }
    });
  }

 private:
  double lr_, momentum_, weight_decay_;
};

namespace detail {

// Adam's and AdamW's shared update, after AdamW's decoupled decay: m, v the state, t the step.
template <class Scalar>
void adam_update(const Parameter<Scalar>& p, Vector<Scalar>& m, Vector<Scalar>& v, long long t, double lr,
                 double beta1, double beta2, double eps, double l2) {
  const double correction1 = 1 - std::pow(beta1, static_cast<double>(t));
  const double correction2_sqrt = std::sqrt(1 - std::pow(beta2, static_cast<double>(t)));
  const Scalar b1 = static_cast<Scalar>(beta1), b2 = static_cast<Scalar>(beta2);
  const Scalar one_minus_b1 = static_cast<Scalar>(1 - beta1), one_minus_b2 = static_cast<Scalar>(1 - beta2);
  const Scalar step_size = static_cast<Scalar>(lr / correction1), root = static_cast<Scalar>(correction2_sqrt);
  const Scalar epsilon = static_cast<Scalar>(eps), decay = static_cast<Scalar>(l2);
  for (Index j = 0; j < p.size; ++j) {
    Scalar g = p.grad[j];
    if (l2 != 0) g = g + decay * p.value[j];
    m[j] = m[j] * b1 + one_minus_b1 * g;
    v[j] = v[j] * b2 + one_minus_b2 * (g * g);
    const Scalar denominator = std::sqrt(v[j]) / root + epsilon;
    p.value[j] = p.value[j] + -step_size * (m[j] / denominator);
  }
}

}  // namespace detail

namespace detail {

// Adam's and AdamW's hyperparameters, checked, and their two state buffers (m, v); `name` names the optimizer.
template <class Scalar>
class AdamFamily : public Optimizer<Scalar> {
 protected:
  AdamFamily(std::vector<Parameter<Scalar>> params, const char* name, Scalar lr, Scalar beta1, Scalar beta2,
             Scalar eps, Scalar weight_decay)
      : Optimizer<Scalar>(std::move(params), name, 2),
        lr_(this->checked(lr, 0, "lr", name)),
        beta1_(this->checked(beta1, 0, "beta1", name, true)),
        beta2_(this->checked(beta2, 0, "beta2", name, true)),
        eps_(this->checked(eps, 0, "eps", name)),
        weight_decay_(this->checked(weight_decay, 0, "weight_decay", name)) {}

  // Adam's update of every parameter, after `before(p)` (AdamW's decay); l2: Adam's weight decay, 0 for AdamW.
  template <class Before>
  void step_adam(double l2, Before&& before) {
    this->step_each([&](const Parameter<Scalar>& p, std::size_t i, long long t) {
      before(p);
      adam_update(p, this->state(0, i), this->state(1, i), t, lr_, beta1_, beta2_, eps_, l2);
    });
  }

  double lr_, beta1_, beta2_, eps_, weight_decay_;
};

}  // namespace detail

template <class Scalar>
class Adam : public detail::AdamFamily<Scalar> {
 public:
  Adam(std::vector<Parameter<Scalar>> params, Scalar lr = Scalar(1e-3), Scalar beta1 = Scalar(0.9),
       Scalar beta2 = Scalar(0.999), Scalar eps = Scalar(1e-8), Scalar weight_decay = 0)
      : detail::AdamFamily<Scalar>(std::move(params), "Adam", lr, beta1, beta2, eps, weight_decay) {}

  void step() {
    this->step_adam(this->weight_decay_, [](const Parameter<Scalar>&) {});
  }
};

template <class Scalar>
class AdamW : public detail::AdamFamily<Scalar> {
 public:
  AdamW(std::vector<Parameter<Scalar>> params, Scalar lr = Scalar(1e-3), Scalar beta1 = Scalar(0.9),
        Scalar beta2 = Scalar(0.999), Scalar eps = Scalar(1e-8), Scalar weight_decay = Scalar(1e-2))
      : detail::AdamFamily<Scalar>(std::move(params), "AdamW", lr, beta1, beta2, eps, weight_decay) {}

  void step() {
    const Scalar keep = static_cast<Scalar>(1 - this->lr_ * this->weight_decay_);
    this->step_adam(0.0, [&](const Parameter<Scalar>& p) {
      for (Index j = 0; j < p.size; ++j) p.value[j] = p.value[j] * keep;
    });
  }
};

}  // namespace ATTEND_ABI
}  // namespace attend
