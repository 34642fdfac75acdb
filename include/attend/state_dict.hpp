// attend/state_dict.hpp — named tensors, and every module's parameters in and out by PyTorch's names.
//
//   NamedTensor<Scalar>   a shape and its values in row-major (C) order: one entry of a PyTorch state_dict()
//   StateDict<Scalar>     name -> NamedTensor, ordered by name
//
// Every module offers
//
//   StateDict<Scalar> state_dict() const;                  // its parameters, under d2l's / PyTorch's names
//   void load_state_dict(const StateDict<Scalar>& dict);   // PyTorch's load_state_dict(dict, strict=True)
//
// with these names and shapes (those of the PyTorch module the class reproduces):
//
//   Linear                 weight (out, in), bias (out) when has_bias()
//   AdditiveAttention      W_k.weight (h, key_size), W_q.weight (h, query_size), w_v.weight (1, h)
//   MultiHeadAttention     W_q.weight (h, query_size), W_k.weight (h, key_size), W_v.weight (h, value_size),
//                          W_o.weight (h, h), each followed by its .bias (h) when bias is on; h = num_hiddens
//   RNN                    weight_ih_l0 (hidden, input), weight_hh_l0 (hidden, hidden), bias_ih_l0 (hidden),
//                          bias_hh_l0 (hidden)
//   Conv1d                 weight (out, in, kernel_size), bias (out) when has_bias()
//   DotProductAttention    nothing: d2l's class has no parameter
//   PositionalEncoding     nothing: d2l keeps P as a plain attribute, neither a parameter nor a buffer
//
// load_state_dict checks everything before it changes anything: a call that throws leaves the module as it was.
// It requires, in this order,
//   1. each of the module's names, in the order of the list above: present in the dict, with the shape above,
//      and with as many values as that shape holds;
//   2. no other name in the dict (taken in the dict's order, by name);
// and throws std::invalid_argument naming the first problem:
//   MultiHeadAttention::load_state_dict: missing tensor "W_q.bias" of shape (8)
//   MultiHeadAttention::load_state_dict: "W_q.weight" must have shape (8, 4), got (4, 8)
//   MultiHeadAttention::load_state_dict: unexpected tensor "W_q.bias" (the module's tensors are "W_q.weight", ...)
// state_dict() throws std::invalid_argument when a parameter no longer has its shape (the accessors hand out
// references, so parameters can be resized from outside).
//
// Both are built on each module's visit_parameters(visit), which calls visit(name, parameter, shape) for every
// parameter in the order above; parameter is a Matrix, Vector or Tensor3, shape the one it must have.
//
// The free functions below convert single tensors: named_tensor(M) from a Matrix, Vector or Tensor3; to_matrix,
// to_vector, to_tensor3, to_scalar back, by tensor or by name from a dict; copy_into(dict, name, parameter).
#pragma once

#include <attend/config.hpp>

#include <algorithm>
#include <attend/tensor.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

// A tensor read from or written to a file: its shape and its values in row-major (C) order.
//   shape    outermost axis first, as PyTorch's tensor.shape; {} for a scalar (one value)
//   values   product(shape) values; a 0 anywhere in the shape means no values
template <class Scalar>
struct NamedTensor {
  std::vector<Index> shape;
  std::vector<Scalar> values;

  Index rank() const { return static_cast<Index>(shape.size()); }

  // product(shape), 1 for a scalar. Assumes non-negative dimensions whose product fits in an Index
  // (true of every tensor that load_safetensors returns; save_safetensors checks it).
  Index numel() const {
    Index n = 1;
    for (Index d : shape) n *= d;
    return n;
  }
};

// Tensors by name, ordered by name: what a PyTorch state_dict() holds, as save_file/load_file see it.
template <class Scalar>
using StateDict = std::map<std::string, NamedTensor<Scalar>>;

namespace detail {

// a * b, or nothing when it does not fit in 64 bits.
inline std::optional<std::uint64_t> checked_multiply(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::nullopt;
  return a * b;
}

// product(shape), or nothing when a dimension is negative or the product does not fit in 64 bits.
inline std::optional<std::uint64_t> element_count(const std::vector<Index>& shape) {
  std::optional<std::uint64_t> count = 1;
  for (Index d : shape) {
    if (d < 0) return std::nullopt;
    if (count) count = checked_multiply(*count, static_cast<std::uint64_t>(d));
  }
  if (!count && std::find(shape.begin(), shape.end(), Index(0)) != shape.end()) return 0;
  return count;
}

// Bytes [i, i + n) of `text` when they are one well-formed UTF-8 sequence (Unicode's table 3-7), n; else 0.
inline std::size_t utf8_sequence(const std::string& text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the range of the second byte; later ones are 80..BF
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // no overlong forms
    if (lead == 0xed) high = 0x9f;  // no surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // no overlong forms
    if (lead == 0xf4) high = 0x8f;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return length;
}

// `text` as a JSON string, quoted and escaped, each byte that is not part of well-formed UTF-8 replaced by U+FFFD:
// safe to put in a message.
inline std::string quoted(const std::string& text) {
  static const char* const hex = "0123456789abcdef";
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x80) {
      const std::size_t length = utf8_sequence(text, i);
      if (length == 0) {
        out += "\xef\xbf\xbd";
        ++i;
      } else {
        out.append(text, i, length);
        i += length;
      }
      continue;
    }
    switch (byte) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (byte < 0x20) {
          out += "\\u00";
          out += hex[byte >> 4];
          out += hex[byte & 0xf];
        } else {
          out += static_cast<char>(byte);
        }
    }
    ++i;
  }
  return out + '"';
}

// "\"a\", \"b\"": names quoted and joined.
template <class Names>
std::string quoted_list(const Names& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + quoted(name);
  return out;
}

// Throws std::invalid_argument unless `tensor` has rank `rank` and as many values as its shape holds.
template <class Scalar>
void require_rank(const NamedTensor<Scalar>& tensor, Index rank, const char* where, const std::string& name) {
  require(tensor.rank() == rank, where, ": ", quoted(name), " must have rank ", rank, ", got shape ",
          shape_text(tensor.shape));
  const auto count = element_count(tensor.shape);
  require(count && *count == tensor.values.size(), where, ": ", quoted(name), " has shape ", shape_text(tensor.shape),
          " but ", tensor.values.size(), " values");
}

// Throws std::invalid_argument unless `tensor` has exactly `shape`.
template <class Scalar>
void require_shape(const NamedTensor<Scalar>& tensor, const std::vector<Index>& shape, const char* where,
                   const std::string& name) {
  require_rank(tensor, static_cast<Index>(shape.size()), where, name);
  require(tensor.shape == shape, where, ": ", quoted(name), " must have shape ", shape_text(shape), ", got ",
          shape_text(tensor.shape));
}

template <class Scalar>
const NamedTensor<Scalar>& find(const StateDict<Scalar>& dict, const std::string& name, const char* where) {
  const auto found = dict.find(name);
  if (found == dict.end()) {
    std::vector<std::string> names;
    for (const auto& item : dict) names.push_back(item.first);
    throw std::invalid_argument(message(where, ": no tensor ", quoted(name), " among the ", dict.size(), " tensors (",
                                        quoted_list(names), ")"));
  }
  return found->second;
}

}  // namespace detail

// ---- Eigen types in and out -------------------------------------------------------------------------------------

// A matrix as a rank-2 tensor (rows, cols), a compile-time column vector (attend::Vector) as a rank-1
// tensor (size), whatever the storage order.
template <class Derived>
NamedTensor<typename Derived::Scalar> named_tensor(const Eigen::MatrixBase<Derived>& M) {
  NamedTensor<typename Derived::Scalar> out;
  if (Derived::ColsAtCompileTime == 1)
    out.shape = {M.rows()};
  else
    out.shape = {M.rows(), M.cols()};
  out.values.reserve(static_cast<std::size_t>(M.size()));
  for (Index i = 0; i < M.rows(); ++i)
    for (Index j = 0; j < M.cols(); ++j) out.values.push_back(M(i, j));
  return out;
}

// A row-major Eigen tensor (attend::Tensor3 among them) as a tensor of the same shape.
template <class Scalar, int Rank>
NamedTensor<Scalar> named_tensor(const Eigen::Tensor<Scalar, Rank, Eigen::RowMajor>& X) {
  NamedTensor<Scalar> out;
  for (int axis = 0; axis < Rank; ++axis) out.shape.push_back(X.dimension(axis));
  out.values.assign(X.data(), X.data() + X.size());
  return out;
}

// The tensor as a (rows, cols) matrix; std::invalid_argument naming `name` unless it has rank 2.
template <class Scalar>
Matrix<Scalar> to_matrix(const NamedTensor<Scalar>& tensor, const std::string& name) {
  detail::require_rank(tensor, 2, "to_matrix", name);
  Matrix<Scalar> out(tensor.shape[0], tensor.shape[1]);  // (rows, cols)
  std::copy(tensor.values.begin(), tensor.values.end(), out.data());
  return out;
}

// ... and unless its shape is (rows, cols).
template <class Scalar>
Matrix<Scalar> to_matrix(const NamedTensor<Scalar>& tensor, const std::string& name, Index rows, Index cols) {
  detail::require_shape(tensor, {rows, cols}, "to_matrix", name);
  return to_matrix(tensor, name);
}

// The tensor as a vector; std::invalid_argument naming `name` unless it has rank 1.
template <class Scalar>
Vector<Scalar> to_vector(const NamedTensor<Scalar>& tensor, const std::string& name) {
  detail::require_rank(tensor, 1, "to_vector", name);
  Vector<Scalar> out(tensor.shape[0]);  // (size)
  std::copy(tensor.values.begin(), tensor.values.end(), out.data());
  return out;
}

// ... and unless its shape is (size).
template <class Scalar>
Vector<Scalar> to_vector(const NamedTensor<Scalar>& tensor, const std::string& name, Index size) {
  detail::require_shape(tensor, {size}, "to_vector", name);
  return to_vector(tensor, name);
}

// The tensor as a Tensor3; std::invalid_argument naming `name` unless it has rank 3.
template <class Scalar>
Tensor3<Scalar> to_tensor3(const NamedTensor<Scalar>& tensor, const std::string& name) {
  detail::require_rank(tensor, 3, "to_tensor3", name);
  Tensor3<Scalar> out(tensor.shape[0], tensor.shape[1], tensor.shape[2]);  // (d0, d1, d2)
  std::copy(tensor.values.begin(), tensor.values.end(), out.data());
  return out;
}

// ... and unless its shape is (d0, d1, d2).
template <class Scalar>
Tensor3<Scalar> to_tensor3(const NamedTensor<Scalar>& tensor, const std::string& name, Index d0, Index d1, Index d2) {
  detail::require_shape(tensor, {d0, d1, d2}, "to_tensor3", name);
  return to_tensor3(tensor, name);
}

// The value of a rank-0 tensor; std::invalid_argument naming `name` for any other rank.
template <class Scalar>
Scalar to_scalar(const NamedTensor<Scalar>& tensor, const std::string& name) {
  detail::require_rank(tensor, 0, "to_scalar", name);
  return tensor.values[0];
}

// The same conversions by name from a state dict; a missing name throws std::invalid_argument listing the names.
template <class Scalar>
Matrix<Scalar> to_matrix(const StateDict<Scalar>& dict, const std::string& name) {
  return to_matrix(detail::find(dict, name, "to_matrix"), name);
}
template <class Scalar>
Matrix<Scalar> to_matrix(const StateDict<Scalar>& dict, const std::string& name, Index rows, Index cols) {
  return to_matrix(detail::find(dict, name, "to_matrix"), name, rows, cols);
}
template <class Scalar>
Vector<Scalar> to_vector(const StateDict<Scalar>& dict, const std::string& name) {
  return to_vector(detail::find(dict, name, "to_vector"), name);
}
template <class Scalar>
Vector<Scalar> to_vector(const StateDict<Scalar>& dict, const std::string& name, Index size) {
  return to_vector(detail::find(dict, name, "to_vector"), name, size);
}
template <class Scalar>
Tensor3<Scalar> to_tensor3(const StateDict<Scalar>& dict, const std::string& name) {
  return to_tensor3(detail::find(dict, name, "to_tensor3"), name);
}
template <class Scalar>
Tensor3<Scalar> to_tensor3(const StateDict<Scalar>& dict, const std::string& name, Index d0, Index d1, Index d2) {
  return to_tensor3(detail::find(dict, name, "to_tensor3"), name, d0, d1, d2);
}
template <class Scalar>
Scalar to_scalar(const StateDict<Scalar>& dict, const std::string& name) {
  return to_scalar(detail::find(dict, name, "to_scalar"), name);
}

// Copies tensor `name` of `dict` into a parameter, which keeps its shape: a missing name or another shape
// throws std::invalid_argument and leaves the parameter as it was.
//   attend::copy_into(weights, "W_q.weight", attention.W_q().weight());
template <class Scalar>
void copy_into(const StateDict<Scalar>& dict, const std::string& name, Matrix<Scalar>& parameter) {
  parameter = to_matrix(dict, name, parameter.rows(), parameter.cols());
}
template <class Scalar>
void copy_into(const StateDict<Scalar>& dict, const std::string& name, Vector<Scalar>& parameter) {
  parameter = to_vector(dict, name, parameter.size());
}
template <class Scalar>
void copy_into(const StateDict<Scalar>& dict, const std::string& name, Tensor3<Scalar>& parameter) {
  parameter = to_tensor3(dict, name, parameter.dimension(0), parameter.dimension(1), parameter.dimension(2));
}

// ---- modules' parameters in and out -----------------------------------------------------------------------------

namespace detail {

// The shape a parameter has now.
template <class Scalar>
std::vector<Index> shape_of(const Matrix<Scalar>& parameter) {
  return {parameter.rows(), parameter.cols()};
}
template <class Scalar>
std::vector<Index> shape_of(const Vector<Scalar>& parameter) {
  return {parameter.size()};
}
template <class Scalar>
std::vector<Index> shape_of(const Tensor3<Scalar>& parameter) {
  return {parameter.dimension(0), parameter.dimension(1), parameter.dimension(2)};
}

// Copies a tensor already checked against `shape` into a parameter, resized to it.
template <class Scalar>
void assign(Matrix<Scalar>& parameter, const NamedTensor<Scalar>& tensor, const std::vector<Index>& shape) {
  parameter.resize(shape[0], shape[1]);  // (rows, cols); a no-op unless the parameter was resized from outside
  std::copy(tensor.values.begin(), tensor.values.end(), parameter.data());
}
template <class Scalar>
void assign(Vector<Scalar>& parameter, const NamedTensor<Scalar>& tensor, const std::vector<Index>& shape) {
  parameter.resize(shape[0]);  // (size)
  std::copy(tensor.values.begin(), tensor.values.end(), parameter.data());
}
template <class Scalar>
void assign(Tensor3<Scalar>& parameter, const NamedTensor<Scalar>& tensor, const std::vector<Index>& shape) {
  parameter.resize(shape[0], shape[1], shape[2]);  // (d0, d1, d2)
  std::copy(tensor.values.begin(), tensor.values.end(), parameter.data());
}

// A visitor that passes every parameter on to `visit` with `prefix` before its name: how a module lists the
// parameters of the modules it holds ("W_q." + "weight"). The same for visit_with_gradients' visitors, which take
// the gradient after the parameter.
template <class Visit>
auto prefixed(std::string prefix, Visit& visit) {
  return [prefix = std::move(prefix), &visit](const std::string& name, auto&&... parameter_and_shape) {
    visit(prefix + name, std::forward<decltype(parameter_and_shape)>(parameter_and_shape)...);
  };
}

// module.state_dict(): every parameter under its name. `where` names the caller in messages.
template <class Scalar, class Module>
StateDict<Scalar> state_dict_of(const Module& module, const char* where) {
  StateDict<Scalar> dict;
  module.visit_parameters([&](const std::string& name, const auto& parameter, const std::vector<Index>& shape) {
    const std::vector<Index> actual = shape_of(parameter);
    require(actual == shape, where, ": parameter ", quoted(name), " must have shape ", shape_text(shape), ", got ",
            shape_text(actual), " (was it resized?)");
    dict.emplace(name, named_tensor(parameter));
  });
  return dict;
}

// module.load_state_dict(dict): checks every name and shape first, then assigns; see the top of this file.
template <class Scalar, class Module>
void load_state_dict_into(Module& module, const StateDict<Scalar>& dict, const char* where) {
  // 1. The module's names, in its order: present, of the right shape, with the values that shape holds.
  std::vector<std::string> names;
  const Module& reader = module;
  reader.visit_parameters([&](const std::string& name, const auto&, const std::vector<Index>& shape) {
    names.push_back(name);
    const auto found = dict.find(name);
    require(found != dict.end(), where, ": missing tensor ", quoted(name), " of shape ", shape_text(shape));
    const NamedTensor<Scalar>& tensor = found->second;
    require(tensor.shape == shape, where, ": ", quoted(name), " must have shape ", shape_text(shape), ", got ",
            shape_text(tensor.shape));
    const auto count = element_count(shape);
    require(count && *count == tensor.values.size(), where, ": ", quoted(name), " has shape ", shape_text(shape),
            " but ", tensor.values.size(), " values");
  });

  // 2. Nothing else (PyTorch's strict=True).
  for (const auto& item : dict) {
    if (std::find(names.begin(), names.end(), item.first) != names.end()) continue;
    if (names.empty())
      throw std::invalid_argument(
          message(where, ": unexpected tensor ", quoted(item.first), " (the module has no parameters)"));
    throw std::invalid_argument(message(where, ": unexpected tensor ", quoted(item.first),
                                        " (the module's tensors are ", quoted_list(names), ")"));
  }

  // 3. Everything checked: assign.
  module.visit_parameters([&](const std::string& name, auto& parameter, const std::vector<Index>& shape) {
    assign(parameter, dict.find(name)->second, shape);
  });
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
