// The valid lengths a fixture stores, as an attend::ValidLens: none when the entry is absent,
// per batch row for a 1-D entry, per query for a 2-D one.
#pragma once

#include <attend/valid_lens.hpp>
#include <support/fixture.hpp>

namespace attend_test {

inline attend::ValidLens valid_lens(const Fixture& fixture, const std::string& name = "valid_lens") {
  if (!fixture.has(name)) return {};
  if (fixture.shape(name).size() == 1) return attend::ValidLens::per_batch(fixture.index_vector(name));
  return attend::ValidLens::per_query(fixture.index_matrix(name));
}

}  // namespace attend_test
