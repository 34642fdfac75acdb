// A module against a golden fixture that holds its parameters under their state_dict() names and each parameter's
// gradient under "<name>_grad" (tests/reference/make_transformer_fixtures.py), and against finite differences.
//
//   attend_test::load_fixture_parameters(ffn, fixture);
//   ffn.backward(fixture.tensor3<T>("grad_output"));
//   attend_test::require_fixture_gradients(ffn, fixture, attend_test::gradient_tolerance<T>());
//   attend_test::require_finite_difference_gradients(ffn_double, [&] { return dot(G, ffn_double.forward(X)); });
#pragma once

#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <support/finite_difference.hpp>
#include <support/fixture.hpp>
#include <support/fixture_modules.hpp>
#include <support/matchers.hpp>
#include <type_traits>
#include <vector>

namespace attend_test {

// The scalar type of a module's parameters.
template <class Module>
using parameter_scalar = std::remove_reference_t<decltype(*std::declval<Module&>().parameters()[0].value)>;

// Loads the fixture's entries named prefix + each of module.state_dict()'s names into module.
template <class Module>
void load_fixture_parameters(Module& module, const Fixture& fixture, const std::string& prefix = "") {
  using Scalar = parameter_scalar<Module>;
  attend::StateDict<Scalar> dict;
  for (const auto& item : module.state_dict()) dict[item.first] = fixture_tensor<Scalar>(fixture, prefix + item.first);
  module.load_state_dict(dict);
}

// Every parameter's gradient against the fixture's "<prefix><name>_grad".
template <class Module, class Tolerance>
void require_fixture_gradients(Module& module, const Fixture& fixture, Tolerance tol, const std::string& prefix = "") {
  using Scalar = parameter_scalar<Module>;
  for (const auto& p : module.parameters()) {
    CAPTURE(p.name);
    const attend::NamedTensor<double> expected = fixture_tensor<double>(fixture, prefix + p.name + "_grad");
    REQUIRE(static_cast<attend::Index>(expected.values.size()) == p.size);
    const attend::Vector<double> e = Eigen::Map<const attend::Vector<double>>(expected.values.data(), p.size);
    const attend::Vector<Scalar> a = Eigen::Map<const attend::Vector<Scalar>>(p.grad, p.size);
    REQUIRE_THAT(a, Near(e, tol));
  }
}

// Every parameter's gradient (after one backward() from zero) against central finite differences of loss(), which
// must compute the same scalar from the module's current parameters (moved in place, one at a time).
template <class Module>
void require_finite_difference_gradients(Module& module, const std::function<double()>& loss) {
  for (const auto& p : module.parameters()) {
    CAPTURE(p.name);
    const std::vector<double> numeric = finite_difference(p.value, p.size, loss);
    const attend::Vector<double> n = Eigen::Map<const attend::Vector<double>>(numeric.data(), p.size);
    const attend::Vector<double> a = Eigen::Map<const attend::Vector<double>>(p.grad, p.size);
    REQUIRE_THAT(a, Near(n, finite_difference_tolerance()));
  }
}

}  // namespace attend_test
