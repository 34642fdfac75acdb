// tests/support/checks.hpp — two checks many tests make: the same bits, and a call that must throw
// std::invalid_argument with a message that says what was wrong.
//
//   CHECK(attend_test::same_bits(one_thread, two_threads));
//   attend_test::require_invalid([&] { attention(X, X, X, bad_mask); }, {"mask", "batch"});
#pragma once

#include <attend/tensor.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace attend_test {

// Whether two tensors have the same shape and the same bits in every element (so +0 and -0 differ, and a NaN equals
// a NaN of the same payload): what "unchanged" and "independent of the thread count" mean in these tests.
template <class Scalar>
bool same_bits(const attend::Tensor3<Scalar>& a, const attend::Tensor3<Scalar>& b) {
  return a.dimensions() == b.dimensions() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(Scalar)) == 0;
}
template <class A, class B>
bool same_bits(const Eigen::DenseBase<A>& a, const Eigen::DenseBase<B>& b) {
  static_assert(std::is_same<typename A::Scalar, typename B::Scalar>::value, "same_bits compares one scalar type");
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (attend::Index i = 0; i < a.rows(); ++i)
    for (attend::Index j = 0; j < a.cols(); ++j) {
      const typename A::Scalar x = a.derived().coeff(i, j), y = b.derived().coeff(i, j);
      if (std::memcmp(&x, &y, sizeof(x)) != 0) return false;
    }
  return true;
}

// Runs call, which must throw std::invalid_argument whose message holds every phrase (any other outcome fails,
// naming what happened instead).
inline void require_invalid(const std::function<void()>& call, const std::vector<std::string>& phrases) {
  std::string outcome = "no exception";
  try {
    call();
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    for (const std::string& phrase : phrases) {
      CAPTURE(what, phrase);
      CHECK(what.find(phrase) != std::string::npos);
    }
    return;
  } catch (const std::exception& e) {
    outcome = std::string("another exception: ") + e.what();
  }
  FAIL("expected std::invalid_argument mentioning \"" << (phrases.empty() ? std::string() : phrases.front())
                                                       << "\"; got " << outcome);
}
inline void require_invalid(const std::function<void()>& call, const char* phrase) {
  require_invalid(call, std::vector<std::string>{phrase});
}

}  // namespace attend_test
