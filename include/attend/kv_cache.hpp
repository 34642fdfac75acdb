// attend/kv_cache.hpp — one attention layer's keys and values so far, for decoding one step (or a few) at a time.
//
// The memory is reserved once, at construction: keys and values are each (batch, num_kv_heads * capacity, head_dim),
// row-major, step t of head g of batch row b at row g * capacity + t of batch row b: each head's steps one after
// another, so that attention reads a block of a head's keys or values as one contiguous run (a decoding step streams
// the cache; with the heads side by side in each step it would read short pieces a row apart). The first size()
// steps of every head are in use; attention reads them in place (detail::Heads with head_stride = capacity *
// head_dim), so appending a step copies only that step. GroupedQueryAttention's cached call appends its keys and
// values (after the rotary embedding) and attends to everything held; a program may also fill a cache itself with
// append() and pass it to scaled_dot_product_attention. A KVCache<bfloat16> holds half the bytes; attention reads
// them as stored where the CPU has bfloat16 dot products (avx512_bf16), widened to float elsewhere.
//
//   attend::KVCache<float> cache(1, 2, 64, 4096);   // batch 1, 2 key/value heads of 64, room for 4096 steps
//   auto y = attention(prompt, cache);              // the prompt's steps, positions 0 .. n-1
//   auto z = attention(next_token, cache);          // position n
#pragma once

#include <algorithm>
#include <attend/config.hpp>
#include <attend/detail/heads.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/tensor.hpp>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class KVCache {
 public:
  KVCache(Index batch, Index num_kv_heads, Index head_dim, Index capacity)
      : batch_(batch), heads_(num_kv_heads), dim_(head_dim), capacity_(capacity) {
    detail::require_at_least(batch, 1, "KVCache", "batch");
    detail::require_at_least(num_kv_heads, 1, "KVCache", "num_kv_heads");
    detail::require_at_least(head_dim, 1, "KVCache", "head_dim");
    detail::require_at_least(capacity, 1, "KVCache", "capacity");
    keys_ = detail::allocate_packets<Scalar>(elements());    // (batch, num_kv_heads * capacity, head_dim)
    values_ = detail::allocate_packets<Scalar>(elements());  // (batch, num_kv_heads * capacity, head_dim)
  }
  KVCache(const KVCache& other)
      : batch_(other.batch_), heads_(other.heads_), dim_(other.dim_), capacity_(other.capacity_), size_(other.size_),
        keys_(detail::allocate_packets<Scalar>(elements())), values_(detail::allocate_packets<Scalar>(elements())) {
    std::copy(other.keys_.get(), other.keys_.get() + elements(), keys_.get());
    std::copy(other.values_.get(), other.values_.get() + elements(), values_.get());
  }
  KVCache& operator=(const KVCache& other) {
    if (this != &other) *this = KVCache(other);
    return *this;
  }
  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;
  ~KVCache() = default;

  Index size() const { return size_; }  // steps held, the same for every batch row
  Index capacity() const { return capacity_; }
  Index batch() const { return batch_; }
  Index num_kv_heads() const { return heads_; }
  Index head_dim() const { return dim_; }
  Index width() const { return heads_ * dim_; }  // features of one step: num_kv_heads * head_dim
  void clear() { size_ = 0; }

  // Throws std::invalid_argument, naming where, unless steps more steps of batch() rows fit.
  void require_room(Index batch, Index steps, const char* where) const {
    detail::require(batch == batch_, where, ": the cache holds batch ", batch_, ", the input has batch ", batch);
    detail::require(size_ + steps <= capacity_, where, ": the cache holds ", size_, " of ", capacity_,
                    " steps and cannot take ", steps, " more");
  }

  // Appends steps: keys and values (batch, steps, num_kv_heads * head_dim), as Tensor3 or maps. Throws
  // std::invalid_argument, the cache unchanged, on another batch or width or when the steps do not fit.
  template <class Keys, class Values>
  void append(const Keys& keys, const Values& values) {
    static_assert(Keys::NumDimensions == 3 && Values::NumDimensions == 3,
                  "KVCache::append: keys and values must be (batch, steps, features) tensors");
    const Index steps = keys.dimension(1);
    detail::require(keys.dimension(2) == width(), "KVCache::append: keys must have ", width(),
                    " features (num_kv_heads * head_dim), got ", keys.dimension(2));
    detail::require(
        values.dimension(0) == keys.dimension(0) && values.dimension(1) == steps && values.dimension(2) == width(),
        "KVCache::append: values must have shape (", keys.dimension(0), ", ", steps, ", ", width(), "), got ",
        detail::shape_text(values.dimensions()));
    require_room(keys.dimension(0), steps, "KVCache::append");
    append_rows(keys.data(), values.data(), steps);
  }

  // Appends steps from (batch, steps, width()) row-major memory, checked by the caller: step s's head g to row
  // g * capacity + size() + s of its batch row.
  void append_rows(const Scalar* keys, const Scalar* values, Index steps) {
    for (Index b = 0; b < batch_; ++b)
      for (Index s = 0; s < steps; ++s)
        for (Index g = 0; g < heads_; ++g) {
          const Index from = (b * steps + s) * width() + g * dim_;
          const Index to = ((b * heads_ + g) * capacity_ + size_ + s) * dim_;
          std::copy(keys + from, keys + from + dim_, keys_.get() + to);
          std::copy(values + from, values + from + dim_, values_.get() + to);
        }
    size_ += steps;
  }

  // The steps held, read in place: (batch, size(), num_kv_heads heads of head_dim).
  detail::Heads<const Scalar> keys() const { return view(keys_.get()); }
  detail::Heads<const Scalar> values() const { return view(values_.get()); }
  // The whole storage, read in place, (batch, num_kv_heads * capacity, head_dim): head g's steps [0, size()) at rows
  // g * capacity .. of each batch row are in use.
  ConstTensorMap3<Scalar> key_storage() const { return storage(keys_.get()); }
  ConstTensorMap3<Scalar> value_storage() const { return storage(values_.get()); }

 private:
  Index elements() const { return batch_ * heads_ * capacity_ * dim_; }
  ConstTensorMap3<Scalar> storage(const Scalar* data) const {
    return ConstTensorMap3<Scalar>(data, batch_, heads_ * capacity_, dim_);
  }
  detail::Heads<const Scalar> view(const Scalar* data) const {
    return {data, dim_, heads_ * capacity_, batch_, size_, heads_, dim_, capacity_ * dim_};
  }

  Index batch_, heads_, dim_, capacity_;
  Index size_ = 0;
  // (batch, num_kv_heads * capacity, head_dim) each, from a cache line: a decoding step reads each head's keys and
  // values in whole packets, and at Eigen's 16-byte alignment every AVX-512 load of them would span two cache lines.
  detail::PacketArray<Scalar> keys_, values_;
};

}  // namespace ATTEND_ABI
}  // namespace attend
