// attend/valid_lens.hpp — d2l's valid lengths: which keys each query may attend to.
//
// Key j of query q in batch row b is kept when j < len(b, q). Lengths come either
//   per batch row   shape (batch,)              — repeated over every query (d2l: repeat_interleave)
//   per query       shape (batch, num_queries)  — one length for each query
// A length larger than the number of keys masks nothing; a negative length is an error.
#pragma once

#include <attend/config.hpp>

#include <attend/tensor.hpp>
#include <initializer_list>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

class ValidLens {
 public:
  enum class Kind { none, per_batch, per_query };

  // No masking.
  ValidLens() = default;

  // ValidLens{3, 2}: one length per batch row.
  ValidLens(std::initializer_list<Index> per_batch) : ValidLens(per_batch_(std::vector<Index>(per_batch))) {}

  // lens: shape (batch,)
  static ValidLens per_batch(std::vector<Index> lens) { return per_batch_(std::move(lens)); }

  // lens: shape (batch, num_queries)
  static ValidLens per_query(const Matrix<Index>& lens) {
    ValidLens v;
    v.kind_ = Kind::per_query;
    v.rows_ = lens.rows();
    v.cols_ = lens.cols();
    v.lens_ = std::vector<Index>(lens.data(), lens.data() + lens.size());
    v.require_non_negative("ValidLens::per_query");
    return v;
  }

  bool empty() const { return kind_ == Kind::none; }
  Kind kind() const { return kind_; }

  // Number of batch rows the lengths describe (0 when empty).
  Index batch() const { return rows_; }
  // Number of queries for per-query lengths, 1 for per-batch lengths, 0 when empty.
  Index queries() const { return cols_; }

  // The length that applies to query q of batch row b (q is ignored for per-batch lengths). Throws
  // std::invalid_argument when b or q is out of range: callers check the shape first with require_shape().
  Index length(Index b, Index q) const {
    switch (kind_) {
      case Kind::per_batch:
        require_index(b, rows_, "b");
        return lens_[static_cast<std::size_t>(b)];
      case Kind::per_query:
        require_index(b, rows_, "b");
        require_index(q, cols_, "q");
        return lens_[static_cast<std::size_t>(b * cols_ + q)];
      case Kind::none:
        break;
    }
    return -1;  // never used: an empty ValidLens masks nothing
  }

  // Throws std::invalid_argument unless these lengths fit `batch` rows of `queries` queries.
  void require_shape(Index batch, Index queries, const char* where) const {
    if (kind_ == Kind::per_batch) {
      detail::require(rows_ == batch, where, ": valid_lens must have shape (", batch, ",) (one per batch row), got (",
                      rows_, ",)");
    } else if (kind_ == Kind::per_query) {
      detail::require(rows_ == batch && cols_ == queries, where, ": valid_lens must have shape (", batch, ", ", queries,
                      ") (batch, queries), got (", rows_, ", ", cols_, ")");
    }
  }

 private:
  static ValidLens per_batch_(std::vector<Index> lens) {
    ValidLens v;
    v.kind_ = Kind::per_batch;
    v.rows_ = static_cast<Index>(lens.size());
    v.cols_ = 1;
    v.lens_ = std::move(lens);
    v.require_non_negative("ValidLens::per_batch");
    return v;
  }

  static void require_index(Index i, Index size, const char* name) {
    detail::require(i >= 0 && i < size, "ValidLens::length: ", name, " must be in [0, ", size, "), got ", i);
  }

  void require_non_negative(const char* where) const {
    for (std::size_t i = 0; i < lens_.size(); ++i)
      detail::require(lens_[i] >= 0, where, ": lengths must be >= 0, got ", lens_[i], " at flat index ", i);
  }

  Kind kind_ = Kind::none;
  Index rows_ = 0;
  Index cols_ = 0;
  std::vector<Index> lens_;  // row-major (rows_, cols_)
};

}  // namespace ATTEND_ABI
}  // namespace attend
