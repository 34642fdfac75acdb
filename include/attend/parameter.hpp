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

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
