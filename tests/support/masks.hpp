// The mask a fixture describes, as make_fixtures.py's mask_entries write it: valid lengths (lens.hpp), causal (0/1),
// keep (0/1, shape (batch or 1, queries, keys)) and fully_masked_zero (0/1), each optional.
#pragma once

#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <support/fixture.hpp>
#include <support/lens.hpp>

#include <string>

namespace attend_test {

// A fixture's 0/1 tensor as booleans.
inline attend::Tensor3<bool> booleans(const Fixture& fixture, const std::string& name) {
  const attend::Tensor3<double> values = fixture.tensor3<double>(name);
  attend::Tensor3<bool> out(values.dimension(0), values.dimension(1), values.dimension(2));
  for (attend::Index i = 0; i < values.size(); ++i) out.data()[i] = values.data()[i] != 0.0;
  return out;
}

// valid_lens && causal && keep, with the fixture's rule for a query that sees no key.
inline attend::Mask mask_from(const Fixture& fixture) {
  using attend::Mask;
  Mask mask = valid_lens(fixture);
  if (fixture.has("causal") && fixture.index("causal") != 0) mask = mask && Mask::causal();
  if (fixture.has("keep")) mask = mask && Mask::keep(booleans(fixture, "keep"));
  if (fixture.has("fully_masked_zero") && fixture.index("fully_masked_zero") != 0)
    mask = mask.when_fully_masked(attend::FullyMasked::zero);
  return mask;
}

}  // namespace attend_test
