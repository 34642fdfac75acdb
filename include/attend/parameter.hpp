// attend/parameter.hpp — one parameter and its gradient, as optimizers see them, and how a module lists them.
//
// A module's parameters() is built on its visit_with_gradients(visit), which calls visit(name, parameter, gradient,
// shape) for every parameter in state_dict() order: parameter and gradient are Matrix, Vector or Tensor3 objects
// of the module, shape the one both must have. A Parameter points into that storage, so it is valid only while the
// module lives and neither object is resized or reassigned with another size (the accessors hand out references):
// still_valid() says whether that holds, and the optimizers check it before every step.
#pragma once

#include <attend/config.hpp>

#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>

#include <functional>
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
  // True while value and grad still are the storage of the parameter and of its gradient, each of size elements.
  std::function<bool()> still_valid;
};

namespace detail {

// Throws std::invalid_argument unless `gradient` has the shape of `parameter`, `shape`. where: the caller.
template <class Tensor>
void require_gradient_shape(const std::string& name, const Tensor& parameter, const Tensor& gradient,
                            const std::vector<Index>& shape, const char* where) {
  const std::vector<Index> actual = shape_of(parameter), grad = shape_of(gradient);
  require(actual == shape, where, ": parameter ", quoted(name), " must have shape ", shape_text(shape), ", got ",
          shape_text(actual), " (was it resized?)");
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

// module.parameters(): every parameter with its gradient, in state_dict() order.
template <class Scalar, class Module>
std::vector<Parameter<Scalar>> parameters_of(Module& module, const char* where) {
  std::vector<Parameter<Scalar>> list;
  module.visit_with_gradients(
      [&](const std::string& name, auto& parameter, auto& gradient, const std::vector<Index>& shape) {
        require_gradient_shape(name, parameter, gradient, shape, where);
        Scalar* value = parameter.data();
        Scalar* grad = gradient.data();
        const Index size = static_cast<Index>(parameter.size());
        auto* p = &parameter;
        auto* g = &gradient;
        list.push_back({name, value, grad, size, [p, g, value, grad, size] {
                          return p->data() == value && g->data() == grad && static_cast<Index>(p->size()) == size &&
                                 static_cast<Index>(g->size()) == size;
                        }});
      });
  return list;
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
  // The parameters with their gradients, in state_dict() order; see Parameter above.
  std::vector<Parameter<Scalar>> parameters() { return parameters_of<Scalar>(derived(), where("parameters").c_str()); }

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
  WithParameters() = default;
  ~WithParameters() = default;

 private:
  Derived& derived() { return static_cast<Derived&>(*this); }
  const Derived& derived() const { return static_cast<const Derived&>(*this); }
  static std::string where(const char* member) { return std::string(Derived::module_name) + "::" + member; }
};

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
