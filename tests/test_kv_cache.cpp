// KVCache: construction and its checks, appending a prompt and then single steps (what keys() and values() then
// show, read in place in the storage reserved once), appends that must throw and leave the cache exactly as it was
// (past the capacity, another batch, another width, keys and values that disagree), maps of the caller's memory,
// and clear().
#include <attend/kv_cache.hpp>
#include <catch2/catch.hpp>
#include <support/checks.hpp>
#include <support/random_tensor.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

using attend::ConstTensorMap3;
using attend::Index;
using attend::KVCache;
using attend::Tensor3;
using attend_test::random_tensor;
using attend_test::same_bits;
using attend_test::require_invalid;

namespace {

// Everything a cache holds, to compare before and after a call that throws: its size and its whole storage (the
// rows not in use too, whatever they hold: a failed append must write nowhere).
template <class Scalar>
struct Snapshot {
  Index size;
  Tensor3<Scalar> keys, values;
  explicit Snapshot(const KVCache<Scalar>& cache)
      : size(cache.size()), keys(cache.key_storage()), values(cache.value_storage()) {}
  bool same_as(const KVCache<Scalar>& cache) const {
    return cache.size() == size && same_bits(Tensor3<Scalar>(cache.key_storage()), keys) &&
           same_bits(Tensor3<Scalar>(cache.value_storage()), values);
  }
};

// The steps held in the cache are exactly the steps appended (all: (batch, size, width), the appends one after the
// other), and keys() and values() point at them in the storage.
template <class Scalar>
void require_holds(const KVCache<Scalar>& cache, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values) {
  const Index batch = cache.batch(), heads = cache.num_kv_heads(), dim = cache.head_dim();
  REQUIRE(cache.size() == keys.dimension(1));
  const auto K = cache.keys(), V = cache.values();
  for (const auto* view : {&K, &V}) {
    REQUIRE(view->batch == batch);
    REQUIRE(view->length == cache.size());
    REQUIRE(view->batch_rows == heads * cache.capacity());
    REQUIRE(view->row_stride == dim);
    REQUIRE(view->head_stride == cache.capacity() * dim);
    REQUIRE(view->count == heads);
    REQUIRE(view->dim == dim);
  }
  REQUIRE(K.data == cache.key_storage().data());
  REQUIRE(V.data == cache.value_storage().data());
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index t = 0; t < cache.size(); ++t) {
        CAPTURE(b, h, t);
        // Step t of head h of batch row b is row (b * heads + h) * capacity + t of the storage.
        const Index row = (b * heads + h) * cache.capacity() + t;
        REQUIRE(K.at(b, h, t) == cache.key_storage().data() + row * dim);
        REQUIRE(V.at(b, h, t) == cache.value_storage().data() + row * dim);
        for (Index i = 0; i < dim; ++i) {
          REQUIRE(K.at(b, h, t)[i] == keys(b, t, h * dim + i));
          REQUIRE(V.at(b, h, t)[i] == values(b, t, h * dim + i));
        }
      }
}

// Steps [first, first + count) of X.
template <class Scalar>
Tensor3<Scalar> steps_of(const Tensor3<Scalar>& X, Index first, Index count) {
  Tensor3<Scalar> out(X.dimension(0), count, X.dimension(2));
  for (Index b = 0; b < X.dimension(0); ++b)
    for (Index t = 0; t < count; ++t)
      for (Index c = 0; c < X.dimension(2); ++c) out(b, t, c) = X(b, first + t, c);
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("KVCache reserves its storage once and starts empty", "[kv_cache]", float, double) {
  const KVCache<TestType> cache(2, 3, 4, 10);
  CHECK(cache.size() == 0);
  CHECK(cache.capacity() == 10);
  CHECK(cache.batch() == 2);
  CHECK(cache.num_kv_heads() == 3);
  CHECK(cache.head_dim() == 4);
  CHECK(cache.width() == 12);
  for (const auto& storage : {cache.key_storage(), cache.value_storage()}) {
    CHECK(storage.dimension(0) == 2);
    CHECK(storage.dimension(1) == 3 * 10);  // num_kv_heads * capacity
    CHECK(storage.dimension(2) == 4);
    // from a cache line, so that a decoding step's whole-packet loads of a 16-float row never span two
    CHECK(reinterpret_cast<std::uintptr_t>(storage.data()) % 64 == 0);
  }
  CHECK(cache.keys().length == 0);
  CHECK(cache.values().length == 0);
}

TEMPLATE_TEST_CASE("KVCache rejects every size below 1, naming it", "[kv_cache][errors]", float, double) {
  for (const Index bad : {Index(0), Index(-1), Index(-7)}) {
    CAPTURE(bad);
    const std::string got = "got " + std::to_string(bad);
    require_invalid([&] { KVCache<TestType>(bad, 2, 4, 8); }, {"KVCache", "batch", "at least 1", got});
    require_invalid([&] { KVCache<TestType>(1, bad, 4, 8); }, {"KVCache", "num_kv_heads", "at least 1", got});
    require_invalid([&] { KVCache<TestType>(1, 2, bad, 8); }, {"KVCache", "head_dim", "at least 1", got});
    require_invalid([&] { KVCache<TestType>(1, 2, 4, bad); }, {"KVCache", "capacity", "at least 1", got});
  }
  CHECK_NOTHROW(KVCache<TestType>(1, 1, 1, 1));
}

TEMPLATE_TEST_CASE("a prompt then single steps: size() and keys() / values() are exactly the appended steps",
                   "[kv_cache]", float, double) {
  const Index batch = GENERATE(1, 3);
  const Index heads = GENERATE(1, 2);
  const Index dim = 5, capacity = 9, prompt = 4;
  CAPTURE(batch, heads);
  KVCache<TestType> cache(batch, heads, dim, capacity);
  // Every step the cache will hold, (batch, capacity, heads * dim); values distinct from the keys.
  const Tensor3<TestType> keys = random_tensor<TestType>(batch, capacity, heads * dim, 51);
  const Tensor3<TestType> values = random_tensor<TestType>(batch, capacity, heads * dim, 52);

  cache.append(steps_of(keys, 0, prompt), steps_of(values, 0, prompt));
  REQUIRE(cache.size() == prompt);
  require_holds(cache, steps_of(keys, 0, prompt), steps_of(values, 0, prompt));
  for (Index t = prompt; t < capacity; ++t) {
    CAPTURE(t);
    cache.append(steps_of(keys, t, 1), steps_of(values, t, 1));
    REQUIRE(cache.size() == t + 1);
    REQUIRE(cache.capacity() == capacity);
    require_holds(cache, steps_of(keys, 0, t + 1), steps_of(values, 0, t + 1));
  }
  REQUIRE(cache.size() == cache.capacity());
}

TEMPLATE_TEST_CASE("append takes maps of the caller's memory, and zero steps", "[kv_cache]", float, double) {
  KVCache<TestType> cache(2, 2, 3, 6);
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 3, 6, 53);
  const Tensor3<TestType> values = random_tensor<TestType>(2, 3, 6, 54);
  const std::vector<TestType> key_memory(keys.data(), keys.data() + keys.size());
  const std::vector<TestType> value_memory(values.data(), values.data() + values.size());
  cache.append(ConstTensorMap3<TestType>(key_memory.data(), 2, 3, 6),
               ConstTensorMap3<TestType>(value_memory.data(), 2, 3, 6));
  require_holds(cache, keys, values);

  const Tensor3<TestType> none(2, 0, 6);
  cache.append(none, none);
  require_holds(cache, keys, values);
}

TEMPLATE_TEST_CASE("an append past the capacity throws and leaves the cache unchanged", "[kv_cache][errors]", float,
                   double) {
  KVCache<TestType> cache(2, 1, 4, 5);
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 3, 4, 55);
  const Tensor3<TestType> values = random_tensor<TestType>(2, 3, 4, 56);
  cache.append(keys, values);
  const Snapshot<TestType> before(cache);
  const Tensor3<TestType> more_keys = random_tensor<TestType>(2, 3, 4, 57);
  const Tensor3<TestType> more_values = random_tensor<TestType>(2, 3, 4, 58);
  require_invalid([&] { cache.append(more_keys, more_values); },
                  {"KVCache::append", "holds 3 of 5", "cannot take 3 more"});
  REQUIRE(before.same_as(cache));
  require_holds(cache, keys, values);

  // Exactly the room left fits; one step more then does not.
  cache.append(steps_of(more_keys, 0, 2), steps_of(more_values, 0, 2));
  REQUIRE(cache.size() == 5);
  const Snapshot<TestType> full(cache);
  require_invalid([&] { cache.append(steps_of(more_keys, 2, 1), steps_of(more_values, 2, 1)); },
                  {"KVCache::append", "holds 5 of 5", "cannot take 1 more"});
  REQUIRE(full.same_as(cache));
}

TEMPLATE_TEST_CASE("an append of another batch or width, or of keys and values that disagree, throws and leaves the "
                   "cache unchanged",
                   "[kv_cache][errors]", float, double) {
  KVCache<TestType> cache(2, 2, 3, 8);  // width 6
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 2, 6, 59);
  const Tensor3<TestType> values = random_tensor<TestType>(2, 2, 6, 60);
  cache.append(keys, values);
  const Snapshot<TestType> before(cache);

  SECTION("another batch") {
    const Tensor3<TestType> k = random_tensor<TestType>(3, 1, 6, 61), v = random_tensor<TestType>(3, 1, 6, 62);
    require_invalid([&] { cache.append(k, v); }, {"KVCache::append", "batch 2", "batch 3"});
    const Tensor3<TestType> k1 = random_tensor<TestType>(1, 1, 6, 61), v1 = random_tensor<TestType>(1, 1, 6, 62);
    require_invalid([&] { cache.append(k1, v1); }, {"KVCache::append", "batch 2", "batch 1"});
  }
  SECTION("keys of another width") {
    const Tensor3<TestType> k = random_tensor<TestType>(2, 1, 5, 63), v = random_tensor<TestType>(2, 1, 6, 64);
    require_invalid([&] { cache.append(k, v); }, {"KVCache::append", "keys", "6 features", "got 5"});
  }
  SECTION("values of another width") {
    const Tensor3<TestType> k = random_tensor<TestType>(2, 1, 6, 63), v = random_tensor<TestType>(2, 1, 7, 64);
    require_invalid([&] { cache.append(k, v); }, {"KVCache::append", "values", "(2, 1, 6)", "(2, 1, 7)"});
  }
  SECTION("values of other steps or batch than the keys") {
    const Tensor3<TestType> k = random_tensor<TestType>(2, 1, 6, 63), v = random_tensor<TestType>(2, 2, 6, 64);
    require_invalid([&] { cache.append(k, v); }, {"KVCache::append", "values", "(2, 1, 6)", "(2, 2, 6)"});
    const Tensor3<TestType> v3 = random_tensor<TestType>(3, 1, 6, 65);
    require_invalid([&] { cache.append(k, v3); }, {"KVCache::append", "values", "(2, 1, 6)", "(3, 1, 6)"});
  }
  REQUIRE(before.same_as(cache));
  require_holds(cache, keys, values);
  // And it keeps working.
  const Tensor3<TestType> k = random_tensor<TestType>(2, 1, 6, 66), v = random_tensor<TestType>(2, 1, 6, 67);
  cache.append(k, v);
  REQUIRE(cache.size() == 3);
  const Tensor3<TestType> all_keys = keys.concatenate(k, 1), all_values = values.concatenate(v, 1);
  require_holds(cache, all_keys, all_values);
}

TEMPLATE_TEST_CASE("clear() empties the cache, which then fills again from step 0", "[kv_cache]", float, double) {
  KVCache<TestType> cache(2, 2, 2, 4);
  const Tensor3<TestType> keys = random_tensor<TestType>(2, 4, 4, 68);
  const Tensor3<TestType> values = random_tensor<TestType>(2, 4, 4, 69);
  cache.append(keys, values);
  REQUIRE(cache.size() == 4);
  cache.clear();
  CHECK(cache.size() == 0);
  CHECK(cache.capacity() == 4);
  CHECK(cache.keys().length == 0);
  CHECK(cache.values().length == 0);
  cache.clear();  // clearing an empty cache is fine
  CHECK(cache.size() == 0);

  // The whole capacity is available again, and the new steps replace the old ones.
  const Tensor3<TestType> new_keys = random_tensor<TestType>(2, 4, 4, 70);
  const Tensor3<TestType> new_values = random_tensor<TestType>(2, 4, 4, 71);
  cache.append(steps_of(new_keys, 0, 1), steps_of(new_values, 0, 1));
  require_holds(cache, steps_of(new_keys, 0, 1), steps_of(new_values, 0, 1));
  cache.append(steps_of(new_keys, 1, 3), steps_of(new_values, 1, 3));
  require_holds(cache, new_keys, new_values);
  require_invalid([&] { cache.append(steps_of(new_keys, 0, 1), steps_of(new_values, 0, 1)); },
                  {"KVCache::append", "holds 4 of 4"});
}

TEMPLATE_TEST_CASE("a copy of a cache holds the same steps in storage of its own; a copy assigned over one replaces it",
                   "[kv_cache]", float, double) {
  KVCache<TestType> cache(2, 3, 4, 10);
  const Tensor3<TestType> K = attend_test::random_tensor<TestType>(2, 5, 12, 1);  // (batch, steps, width)
  const Tensor3<TestType> V = attend_test::random_tensor<TestType>(2, 5, 12, 2);  // (batch, steps, width)
  cache.append(K, V);
  const Snapshot<TestType> before(cache);
  KVCache<TestType> copy(cache);
  CHECK(before.same_as(copy));
  CHECK(copy.key_storage().data() != cache.key_storage().data());
  copy.clear();
  copy.append(V, K);  // the copy changes; the original does not
  CHECK(before.same_as(cache));
  KVCache<TestType> other(1, 1, 1, 1);
  other = cache;
  CHECK(before.same_as(other));
  CHECK(other.capacity() == 10);
}

TEMPLATE_TEST_CASE("require_room names the caller and the numbers", "[kv_cache][errors]", float, double) {
  KVCache<TestType> cache(2, 1, 2, 3);
  CHECK_NOTHROW(cache.require_room(2, 3, "here"));
  require_invalid([&] { cache.require_room(2, 4, "GroupedQueryAttention"); },
                  {"GroupedQueryAttention", "holds 0 of 3", "cannot take 4 more"});
  require_invalid([&] { cache.require_room(1, 1, "GroupedQueryAttention"); },
                  {"GroupedQueryAttention", "batch 2", "batch 1"});
  CHECK(cache.size() == 0);
}
