// attend/detail/packet_buffer.hpp — memory for packed operands, starting on a boundary of the widest packet.
//
// The row kernel reads packed micro-panels in whole packets, and every row of a micro-panel is whole packets: from a
// 64-byte boundary no load spans two cache lines, while at malloc's (and Eigen's default) 16-byte alignment every
// AVX-512 load of such a panel would.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/tensor.hpp>

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// Frees what allocate_packets allocates.
struct FreeAlignedToPackets {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t(tuning::widest_packet_bytes)); }
};

template <class Scalar>
using PacketArray = std::unique_ptr<Scalar[], FreeAlignedToPackets>;

// `count` Scalars, uninitialised, from a boundary of the widest packet; std::bad_alloc when there is no memory.
template <class Scalar>
PacketArray<Scalar> allocate_packets(Index count) {
  const std::size_t bytes = sizeof(Scalar) * static_cast<std::size_t>(count);
  void* memory = ::operator new[](bytes, std::align_val_t(tuning::widest_packet_bytes));
  return PacketArray<Scalar>(static_cast<Scalar*>(memory));
}

// A packet-aligned scratch buffer kept across calls: resize() allocates only when it needs more room than it has, and
// keeps no values when it does. It holds no state between calls (every call writes what it reads), so a copy, as of
// a module's workspace, starts empty, and assigning one leaves the buffer as it was.
template <class Scalar>
class PacketBuffer {
 public:
  PacketBuffer() = default;
  PacketBuffer(const PacketBuffer&) {}
  PacketBuffer& operator=(const PacketBuffer&) { return *this; }
  PacketBuffer(PacketBuffer&& other) noexcept
      : data_(std::move(other.data_)), capacity_(std::exchange(other.capacity_, Index(0))) {}
  PacketBuffer& operator=(PacketBuffer&& other) noexcept {
    data_ = std::move(other.data_);
    capacity_ = std::exchange(other.capacity_, Index(0));
    return *this;
  }
  ~PacketBuffer() = default;

  void resize(Index count) {
    if (count > capacity_) {
      data_.reset();  // the old block is freed before the new one is asked for
      capacity_ = 0;
      data_ = allocate_packets<Scalar>(count);
      capacity_ = count;
    }
  }
  Scalar* data() { return data_.get(); }
  const Scalar* data() const { return data_.get(); }

 private:
  PacketArray<Scalar> data_;
  Index capacity_ = 0;
};

// A row-major (rows, cols) scratch matrix in a PacketBuffer: a tile whose rows the kernels load and store in whole
// packets (with cols a multiple of the packet, every row starts on a cache line). Its contents between calls mean
// nothing, as a PacketBuffer's: a copy starts empty (0 by 0), and assigning one leaves the matrix as it was. The views
// are Eigen maps of its current size.
template <class Scalar>
class PacketMatrix {
 public:
  using View = Eigen::Map<Matrix<Scalar>>;

  PacketMatrix() = default;
  PacketMatrix(const PacketMatrix&) {}
  PacketMatrix& operator=(const PacketMatrix&) { return *this; }
  PacketMatrix(PacketMatrix&& other) noexcept
      : buffer_(std::move(other.buffer_)),
        rows_(std::exchange(other.rows_, Index(0))),
        cols_(std::exchange(other.cols_, Index(0))) {}
  PacketMatrix& operator=(PacketMatrix&& other) noexcept {
    buffer_ = std::move(other.buffer_);
    rows_ = std::exchange(other.rows_, Index(0));
    cols_ = std::exchange(other.cols_, Index(0));
    return *this;
  }
  ~PacketMatrix() = default;

  void resize(Index rows, Index cols) {
    buffer_.resize(rows * cols);
    rows_ = rows;
    cols_ = cols;
  }
  Scalar* data() { return buffer_.data(); }
  const Scalar* data() const { return buffer_.data(); }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  Index outerStride() const { return cols_; }
  View view() { return View(buffer_.data(), rows_, cols_); }
  auto topRows(Index rows) { return view().topRows(rows); }
  auto topLeftCorner(Index rows, Index cols) { return view().topLeftCorner(rows, cols); }

 private:
  PacketBuffer<Scalar> buffer_;
  Index rows_ = 0, cols_ = 0;
};

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
