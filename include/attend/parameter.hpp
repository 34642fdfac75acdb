// attend/parameter.hpp — one parameter and its gradient, as optimizers see them, and how a module lists them.
//
// A module's parameters() is built on its visit_with_gradients(visit), which calls visit(name, parameter, gradient,
// shape) for every parameter in state_dict() order: parameter and gradient are Matrix, Vector or Tensor3 objects
// of the module, shape the one both must have. A Parameter points into that storage, so it is valid only while that
// storage is the module's: still_valid() says whether it is, and the optimizers check it before every step. It stays
// true when the module is moved (move construction or move assignment: the storage moves with it), and turns false,
// without touching the module's memory, once the module is destroyed, copied over or moved over, or the parameter
// or its gradient is resized or reassigned with another size (the accessors hand out references). A copy of a module
// has storage of its own: the Parameters of the original stay the original's.
//
// A module of a reduced scalar type (bfloat16) runs in evaluation only and keeps no gradients: each gradient buffer is
// empty, and its Parameters' grad is null (gradient_size below), so that the weights are the only memory they take.
#pragma once

#include <attend/config.hpp>

#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
struct Parameter {
  std::string name;  // its state_dict() name
  Scalar* value;     // the parameter's own storage, size elements
  Scalar* grad;      // its gradient's storage, size elements
  Index size;
  // True while value and grad still are the storage of the parameter and of its gradient, each of size elements (see
  // above); empty for a Parameter made by hand.
  std::function<bool()> still_valid;
};

namespace detail {

// The elements of the gradient buffer of a parameter of `size` elements: none for a reduced scalar type.
template <class Scalar>
constexpr Index gradient_size(Index size) {
  return is_reduced<Scalar> ? 0 : size;
}

// What is wrong with a hand-made or stale Parameter's size and pointers, or "" when nothing is: a size of at least 0,
// and value and grad pointers that are not null when there are elements to point at (an empty parameter may have null
// ones, as an empty Eigen object does).
template <class Scalar>
std::string parameter_problem(const Parameter<Scalar>& p) {
  if (p.size < 0) return message("parameter ", quoted(p.name), " must have size >= 0, got ", p.size);
  if (p.size > 0 && p.value == nullptr)
    return message("parameter ", quoted(p.name), " has a null value pointer (size ", p.size, ")");
  if (p.size > 0 && p.grad == nullptr)
    return message("parameter ", quoted(p.name), " has a null grad pointer (size ", p.size, ")");
  return "";
}

// Throws std::invalid_argument unless `parameter` has shape `shape` and `gradient` that shape too (empty for a reduced
// scalar type). where: the caller.
template <class Tensor>
void require_gradient_shape(const std::string& name, const Tensor& parameter, const Tensor& gradient,
                            const std::vector<Index>& shape, const char* where) {
  const std::vector<Index> actual = shape_of(parameter), grad = shape_of(gradient);
  require(actual == shape, where, ": parameter ", quoted(name), " must have shape ", shape_text(shape), ", got ",
          shape_text(actual), " (was it resized?)");
  if constexpr (is_reduced<typename Tensor::Scalar>)
    require(gradient.size() == 0, where, ": the gradient of ", quoted(name), " must be empty (",
            "a bfloat16 module keeps no gradients), got ", shape_text(grad));
  else
    require(grad == shape, where, ": the gradient of ", quoted(name), " must have shape ", shape_text(shape), ", got ",
            shape_text(grad), " (was it resized?)");
}

// module.visit_parameters(visit) of a module that lists its parameters through visit_with_gradients: visit(name,
// parameter, shape) for each.
template <class Module, class Visit>
void visit_parameters_through_gradients(Module& module, Visit& visit) {
  module.visit_with_gradients([&](const std::string& name, auto& parameter, auto&, const std::vector<Index>& shape) {
    visit(name, parameter, shape);
  });
}

// Throws std::invalid_argument unless every parameter of `module` and its gradient buffer have the shape given at
// construction. where: the caller.
template <class Module>
void require_gradients_of(const Module& module, const char* where) {
  module.visit_with_gradients(
      [&](const std::string& name, const auto& parameter, const auto& gradient, const std::vector<Index>& shape) {
        require_gradient_shape(name, parameter, gradient, shape, where);
      });
}

// Where a module with parameters lives, shared by the module (WithParameters below) with the Parameters its
// parameters() made, which hold it weakly: owner is the module's WithParameters base at its current address, null
// once the storage those Parameters point into is no longer the module's (destroyed, or assigned over).
struct ParameterAnchor {
  const void* owner = nullptr;
};

// True when parameter `index` of `module`, in visit_with_gradients() order, and its gradient still are the storage at
// value and grad, each of size elements.
template <class Module, class Scalar>
bool holds_parameter(const Module& module, std::size_t index, const Scalar* value, const Scalar* grad, Index size) {
  std::size_t at = 0;
  bool holds = false;
  module.visit_with_gradients(
      [&](const std::string&, const auto& parameter, const auto& gradient, const std::vector<Index>&) {
        if (at++ != index) return;
        holds = parameter.data() == value && gradient.data() == grad && static_cast<Index>(parameter.size()) == size &&
                static_cast<Index>(gradient.size()) == gradient_size<Scalar>(size);
      });
  return holds;
}

// module.zero_grad(): every gradient buffer to 0, in the parameter's shape.
template <class Module>
void zero_grad_of(Module& module) {
  module.visit_with_gradients(
      [](const std::string&, auto&, auto& gradient, const std::vector<Index>&) { gradient.setZero(); });
}

// What every module with parameters offers, written once from one static member of Derived that lists them:
//
//   template <class Self, class Visit> static void visit_with_gradients_of(Self& self, Visit& visit);
//
// which calls visit(name, parameter, gradient, shape) for each parameter in state_dict() order (Self is Derived or
// const Derived), and Derived::module_name, the class's name in messages ("Linear::parameters: ..."). Derived
// befriends WithParameters when that member is private.
template <class Derived, class Scalar>
class WithParameters {
 public:
  // Every parameter's gradient to 0.
  void zero_grad() { zero_grad_of(derived()); }
  // The parameters with their gradients, in state_dict() order; see Parameter above. Each still_valid() finds the
  // module through the anchor, wherever it has moved, and compares parameter `index` with the storage recorded here.
  std::vector<Parameter<Scalar>> parameters() {
    const std::string caller = where("parameters");
    if (!anchor_) anchor_ = std::make_shared<ParameterAnchor>(ParameterAnchor{this});
    const std::weak_ptr<ParameterAnchor> anchor = anchor_;
    std::vector<Parameter<Scalar>> list;
    derived().visit_with_gradients(
        [&](const std::string& name, auto& parameter, auto& gradient, const std::vector<Index>& shape) {
          require_gradient_shape(name, parameter, gradient, shape, caller.c_str());
          Scalar* value = parameter.data();
          Scalar* grad = gradient.data();
          const Index size = static_cast<Index>(parameter.size());
          const std::size_t index = list.size();
          list.push_back({name, value, grad, size, [anchor, index, value, grad, size] {
                            const std::shared_ptr<ParameterAnchor> held = anchor.lock();
                            if (!held || held->owner == nullptr) return false;
                            const auto* module = static_cast<const WithParameters*>(held->owner);
                            return holds_parameter(module->derived(), index, value, grad, size);
                          }});
        });
    return list;
  }

  // Every parameter under its name; see state_dict.hpp.
  StateDict<Scalar> state_dict() const { return state_dict_of<Scalar>(derived(), where("state_dict").c_str()); }
  void load_state_dict(const StateDict<Scalar>& dict) {
    load_state_dict_into(derived(), dict, where("load_state_dict").c_str());
  }

  // Calls visit(name, parameter, shape) for each parameter, in state_dict() order.
  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit_parameters_through_gradients(derived(), visit);
  }
  template <class Visit>
  void visit_parameters(Visit&& visit) const {
    visit_parameters_through_gradients(derived(), visit);
  }
  // The same with each parameter's gradient: visit(name, parameter, gradient, shape).
  template <class Visit>
  void visit_with_gradients(Visit&& visit) {
    Derived::visit_with_gradients_of(derived(), visit);
  }
  template <class Visit>
  void visit_with_gradients(Visit&& visit) const {
    Derived::visit_with_gradients_of(derived(), visit);
  }

  // Throws std::invalid_argument unless every parameter and its gradient buffer still have the shape given at
  // construction (the accessors hand out references, so they can be resized from outside). where: the caller.
  void require_gradients(const char* where) const { require_gradients_of(derived(), where); }

 protected:
  // The anchor follows the module's storage. A copy has storage of its own, so it starts with no anchor. A move
  // takes the source's: the Eigen buffers move with the module, so the source's Parameters now describe this one.
  // An assignment replaces this module's values (and, moved, its buffers): the Parameters made from it before must
  // refuse, so its anchor is detached first. The destructor detaches it too.
  WithParameters() = default;
  WithParameters(const WithParameters&) noexcept {}
  WithParameters(WithParameters&& other) noexcept : anchor_(std::move(other.anchor_)) {
    if (anchor_) anchor_->owner = this;
  }
  WithParameters& operator=(const WithParameters& other) noexcept {
    if (this != &other) detach();
    return *this;
  }
  WithParameters& operator=(WithParameters&& other) noexcept {
    if (this == &other) return *this;
    detach();
    anchor_ = std::move(other.anchor_);
    if (anchor_) anchor_->owner = this;
    return *this;
  }
  ~WithParameters() { detach(); }

 private:
  Derived& derived() { return static_cast<Derived&>(*this); }
  const Derived& derived() const { return static_cast<const Derived&>(*this); }
  static std::string where(const char* member) { return std::string(Derived::module_name) + "::" + member; }

  // The Parameters made so far no longer describe this module's storage: their still_valid() turns false.
  void detach() noexcept {
    if (anchor_) anchor_->owner = nullptr;
    anchor_.reset();
  }

  std::shared_ptr<ParameterAnchor> anchor_;  // null until parameters() is first called
};

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
