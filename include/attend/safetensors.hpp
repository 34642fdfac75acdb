// attend/safetensors.hpp — weights in and out, in Hugging Face's safetensors format.
//
// A safetensors file is
//
//   bytes [0, 8)          N, the length of the header: an unsigned 64-bit little-endian integer
//   bytes [8, 8 + N)      the header: a UTF-8 JSON object, possibly padded with trailing spaces,
//                           { "__metadata__": { "key": "value", ... },            optional, string -> string
//                             "<name>": { "dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end] },
//                             ... }
//   bytes [8 + N, end)    the data buffer; tensor <name> is bytes [begin, end) of it, little-endian, row-major
//
// The tensors' byte ranges must tile the data buffer exactly: sorted by begin, the first starts at 0,
// each starts where the previous one ends, the last ends at the end of the file, and each holds
// product(shape) * sizeof(dtype) bytes.
//
//   auto weights = attend::load_safetensors<float>("model.safetensors");   // name -> NamedTensor<float>
//   attention.load_state_dict(weights);                                    // checks every name and shape
//   attend::copy_into(weights, "W_q.weight", attention.W_q().weight());    // or one tensor at a time
//   attend::save_safetensors("out.safetensors", attention.state_dict(), {{"format", "pt"}});
//
// NamedTensor, StateDict and the conversions to and from Eigen types (named_tensor, to_matrix, ...) are in
// state_dict.hpp, which this header includes.
//
// Reading converts F32, F64, F16 and BF16 to Scalar (F16 and BF16 exactly: every value, subnormals,
// infinities and NaN, is a float); load_safetensors<bfloat16> keeps BF16 as stored and rounds the others
// once, to nearest, ties to even (F64 too: through float rounded to odd, which then rounds to bfloat16 as
// the double would); other dtypes of the format (I64, U8, BOOL, F8_E4M3, ...) are
// refused. Writing stores float as F32 and double as F64, in the reference implementation's layout:
// "__metadata__" first, tensors sorted by name, the header padded with spaces to a multiple of 8
// bytes so that the data starts 8-byte aligned.
//
// A file is input like any other: every malformed one (too short, a header length past the end of
// the file, bad JSON, missing or mistyped fields, negative or fractional dimensions, an element
// count that overflows 64 bits, offsets that overlap, leave a hole or run past the data, a byte
// count that does not match dtype and shape, an unknown dtype, a duplicate key) throws
// attend::SafetensorsError, a std::runtime_error whose message names the function, the file and
// the problem. Nothing is allocated from a declared size before it has been checked against the
// real size of the file. Unknown fields inside a tensor entry are ignored, as the reference does.
#pragma once

#include <attend/config.hpp>

#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

// The header's optional "__metadata__": string -> string (e.g. {"format": "pt"}).
using Metadata = std::map<std::string, std::string>;

// What every malformed or unreadable file throws; the message names the function, the file and the problem.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One tensor as the header describes it; offsets are relative to the start of the data buffer.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;          // "F32", "F64", "F16" or "BF16"
  std::vector<Index> shape;   // outermost axis first
  std::uint64_t begin = 0;    // bytes [begin, end) of the data buffer
  std::uint64_t end = 0;
};

// A checked header: the tensors in the order of their data, the metadata, and the two lengths.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;   // sorted by begin
  Metadata metadata;
  std::uint64_t header_length = 0;         // N, padding included; the data starts at byte 8 + N
  std::uint64_t data_length = 0;           // bytes in the data buffer
};

namespace detail {

// The reference implementation refuses headers larger than this.
inline constexpr std::uint64_t safetensors_max_header = 100'000'000;

// Every dtype name of the format; attend reads the floating-point ones listed in safetensors_dtype_size.
inline bool safetensors_known_dtype(const std::string& dtype) {
  static const std::set<std::string> known{"BOOL",  "U8",   "I8",   "F8_E5M2", "F8_E4M3", "F8_E8M0",
                                           "F4",    "F6_E2M3", "F6_E3M2", "I16", "U16", "F16",
                                           "BF16",  "I32",  "U32",  "F32",     "F64",     "I64",
                                           "U64",   "C64"};
  return known.count(dtype) != 0;
}

// Bytes per element of a dtype that attend reads; 0 for any other.
inline std::uint64_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "F32") return 4;
  if (dtype == "F64") return 8;
  return 0;
}

// `text` with every byte outside printable ASCII written as \xHH (parser messages quote raw input).
inline std::string printable(const std::string& text) {
  static const char* const hex = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    }
  }
  return out;
}

// A JSON value for a message: scalars as written (long strings cut), arrays and objects by kind only,
// so that a deeply nested value never recurses.
inline std::string describe(const nlohmann::json& value) {
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    return "the string " + quoted(text.size() > 40 ? text.substr(0, 40) + "..." : text);
  }
  return value.dump();
}

// The IEEE 754 binary16 value of `bits`, exactly (every binary16 value is a float).
inline float half_to_float(std::uint16_t bits) {
  const bool negative = (bits & 0x8000u) != 0;
  const int exponent = (bits >> 10) & 0x1f;  // biased by 15
  const int mantissa = bits & 0x3ff;         // 10 bits
  float magnitude;
  if (exponent == 0)  // zero or subnormal: mantissa * 2^-24
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31)
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  else  // normal: (1024 + mantissa) * 2^(exponent - 15 - 10)
    magnitude = std::ldexp(static_cast<float>(0x400 | mantissa), exponent - 25);
  return negative ? -magnitude : magnitude;
}

// bfloat16 is the upper half of a float's bits.
inline float bfloat16_to_float(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

// d rounded to float toward zero, then its last bit set when that lost anything (rounding to odd): a float that
// rounds to bfloat16, which keeps 16 bits fewer, as d itself would.
inline float to_float_odd(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(f) || static_cast<double>(f) == d) return f;
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (std::abs(static_cast<double>(f)) > std::abs(d)) --bits;  // one step toward zero: |f| rounded up
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// A value read as float or double converted to Scalar: to nearest for float and double, through to_float_odd for
// bfloat16 from double.
template <class Scalar>
Scalar from_double(double d) {
  if constexpr (is_reduced<Scalar>)
    return Scalar(to_float_odd(d));
  else
    return static_cast<Scalar>(d);
}

// The unsigned integer stored little-endian in bytes [p, p + size).
inline std::uint64_t read_little_endian(const unsigned char* p, int size) {
  std::uint64_t value = 0;
  for (int i = 0; i < size; ++i) value |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return value;
}

inline void write_little_endian(std::uint64_t value, int size, std::vector<char>& out) {
  for (int i = 0; i < size; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

// An open safetensors file, with its size, that fails with messages naming `where` and the path.
class SafetensorsFile {
 public:
  SafetensorsFile(const char* where, std::string path) : where_(where), path_(std::move(path)) {
    std::error_code error;
    const auto size = std::filesystem::file_size(path_, error);
    if (error) fail("cannot open the file: ", error.message());
    size_ = static_cast<std::uint64_t>(size);
    in_.open(path_, std::ios::binary);
    if (!in_) fail("cannot open the file");
  }

  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw SafetensorsError(message(where_, ": ", path_, ": ", parts...));
  }

  template <class... Parts>
  [[noreturn]] void fail_in(const std::string& tensor, const Parts&... parts) const {
    fail("tensor ", quoted(tensor), ": ", parts...);
  }

  std::uint64_t size() const { return size_; }

  // Reads bytes [offset, offset + count) of the file into `out`; the range was checked against size().
  void read(std::uint64_t offset, std::uint64_t count, unsigned char* out) {
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(count));
    if (!in_ || static_cast<std::uint64_t>(in_.gcount()) != count)
      fail("could not read bytes [", offset, ", ", offset + count, ") of the file (", size_,
           " bytes): was it truncated while being read?");
  }

  // The header, checked: lengths, JSON, fields, dtypes, shapes, and offsets against each other and the file.
  SafetensorsHeader header() {
    if (size_ < 8)
      fail("the file is too short (", size_, " bytes): a safetensors file starts with an 8-byte header length");
    unsigned char length_bytes[8];
    read(0, 8, length_bytes);
    SafetensorsHeader header;
    header.header_length = read_little_endian(length_bytes, 8);
    if (header.header_length > size_ - 8)
      fail("the header length ", header.header_length, " runs past the end of the file (", size_,
           " bytes, so at most ", size_ - 8, ")");
    if (header.header_length > safetensors_max_header)
      fail("the header length ", header.header_length, " is too large (the limit is ", safetensors_max_header,
           " bytes)");
    header.data_length = size_ - 8 - header.header_length;

    std::string text(header.header_length, '\0');
    if (!text.empty()) read(8, header.header_length, reinterpret_cast<unsigned char*>(&text[0]));
    const nlohmann::json json = parse(text);
    if (!json.is_object()) fail("the header is not a JSON object: it is ", describe(json));

    for (const auto& item : json.items()) {
      if (item.key() == "__metadata__")
        header.metadata = metadata(item.value());
      else
        header.tensors.push_back(entry(item.key(), item.value(), header.data_length));
    }
    check_tiling(header.tensors, header.data_length);
    return header;
  }

 private:
  // The header parsed as JSON; a key that appears twice in one object is an error (a JSON parser would
  // silently keep one of them).
  nlohmann::json parse(const std::string& text) const {
    std::vector<std::set<std::string>> keys;  // one set per object being parsed
    std::optional<std::string> duplicate;
    bool duplicate_is_tensor = false;
    const auto watch = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      using Event = nlohmann::json::parse_event_t;
      if (event == Event::object_start) keys.emplace_back();
      if (event == Event::object_end && !keys.empty()) keys.pop_back();
      if (event == Event::key && !keys.empty() && !duplicate) {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(key).second) {
          duplicate = key;
          duplicate_is_tensor = keys.size() == 1 && key != "__metadata__";
        }
      }
      return true;
    };
    // nlohmann's lexer takes a NUL byte for the end of its input and would ignore whatever follows.
    const auto nul = text.find('\0');
    if (nul != std::string::npos)
      fail("malformed JSON header: a NUL byte at offset ", nul, " of the header (JSON allows none)");
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(text.begin(), text.end(), watch);
    } catch (const nlohmann::json::exception& error) {
      fail("malformed JSON header: ", printable(error.what()));
    }
    if (duplicate) {
      if (duplicate_is_tensor) fail("duplicate tensor name ", quoted(*duplicate), " in the header");
      fail("duplicate key ", quoted(*duplicate), " in the header");
    }
    return json;
  }

  Metadata metadata(const nlohmann::json& json) const {
    if (!json.is_object()) fail("\"__metadata__\" must be an object of strings, got ", describe(json));
    Metadata out;
    for (const auto& item : json.items()) {
      if (!item.value().is_string())
        fail("\"__metadata__\"[", quoted(item.key()), "] must be a string, got ", describe(item.value()));
      out[item.key()] = item.value().get<std::string>();
    }
    return out;
  }

  // A non-negative integer of the header, or a failure naming `what` for tensor `name`.
  std::uint64_t natural(const nlohmann::json& json, const std::string& name, const std::string& what) const {
    if (json.is_number_unsigned()) return json.get<std::uint64_t>();
    if (json.is_number_integer() && json.get<std::int64_t>() == 0) return 0;  // "-0"
    fail_in(name, what, " must be a non-negative integer, got ", describe(json));
  }

  SafetensorsEntry entry(const std::string& name, const nlohmann::json& json, std::uint64_t data_length) const {
    if (!json.is_object())
      fail_in(name, "the entry must be an object {\"dtype\", \"shape\", \"data_offsets\"}, got ", describe(json));
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!json.contains(field)) fail_in(name, "missing \"", field, '"');

    SafetensorsEntry out;
    out.name = name;
    const auto& dtype = json.at("dtype");
    if (!dtype.is_string()) fail_in(name, "\"dtype\" must be a string, got ", describe(dtype));
    out.dtype = dtype.get<std::string>();
    const std::uint64_t element_size = safetensors_dtype_size(out.dtype);
    if (element_size == 0) {
      if (safetensors_known_dtype(out.dtype))
        fail_in(name, "unsupported dtype ", quoted(out.dtype), ": attend reads F32, F64, F16 and BF16");
      fail_in(name, "unknown dtype ", quoted(out.dtype));
    }

    const auto& shape = json.at("shape");
    if (!shape.is_array()) fail_in(name, "\"shape\" must be an array, got ", describe(shape));
    std::optional<std::uint64_t> count = 1;  // product of the dimensions so far; nothing once it overflowed
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const std::uint64_t d = natural(shape[i], name, message("shape[", i, "]"));
      if (d > static_cast<std::uint64_t>(std::numeric_limits<Index>::max()))
        fail_in(name, "shape[", i, "] = ", d, " is too large for an index");
      out.shape.push_back(static_cast<Index>(d));
      if (count) count = checked_multiply(*count, d);
    }
    // A zero anywhere makes the product 0, however large the other dimensions.
    if (!count && std::find(out.shape.begin(), out.shape.end(), Index(0)) == out.shape.end())
      fail_in(name, "shape ", shape_text(out.shape), " has more elements than 64 bits can count (overflow)");
    const std::uint64_t elements = count ? *count : 0;
    const auto bytes = checked_multiply(elements, element_size);
    if (!bytes)
      fail_in(name, "shape ", shape_text(out.shape), " of ", out.dtype, " has more bytes than 64 bits can count (overflow)");

    const auto& offsets = json.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2)
      fail_in(name, "\"data_offsets\" must be an array of 2 integers [begin, end], got ", describe(offsets),
                offsets.is_array() ? message(" of ", offsets.size()) : std::string());
    out.begin = natural(offsets[0], name, "data_offsets[0]");
    out.end = natural(offsets[1], name, "data_offsets[1]");
    if (out.begin > out.end) fail_in(name, "data_offsets [", out.begin, ", ", out.end, "]: begin is after end");
    if (out.end > data_length)
      fail_in(name, "data_offsets [", out.begin, ", ", out.end, "] run past the end of the data (", data_length,
                " bytes; is the file truncated?)");
    if (out.end - out.begin != *bytes)
      fail_in(name, "dtype ", out.dtype, " and shape ", shape_text(out.shape), " need ", *bytes,
                " bytes, but data_offsets [", out.begin, ", ", out.end, "] hold ", out.end - out.begin);
    return out;
  }

  // Sorts the tensors by their data and requires them to tile [0, data_length) exactly.
  void check_tiling(std::vector<SafetensorsEntry>& tensors, std::uint64_t data_length) const {
    std::sort(tensors.begin(), tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
      return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    std::uint64_t covered = 0;  // bytes [0, covered) belong to the tensors seen so far
    const SafetensorsEntry* previous = nullptr;
    for (const auto& t : tensors) {
      if (t.begin < covered)
        fail("tensors ", quoted(previous->name), " [", previous->begin, ", ", previous->end, ") and ", quoted(t.name),
             " [", t.begin, ", ", t.end, ") overlap");
      if (t.begin > covered)
        fail("bytes [", covered, ", ", t.begin, ") of the data belong to no tensor (a hole before ", quoted(t.name),
             ")");
      covered = t.end;
      previous = &t;
    }
    if (covered != data_length)
      fail("bytes [", covered, ", ", data_length, ") of the data belong to no tensor (", data_length - covered,
           " bytes after the last tensor)");
  }

  std::string where_;
  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
};

template <class Scalar>
void require_scalar_type() {
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>,
                "attend's safetensors functions read and write float or double");
}
template <class Scalar>
void require_loaded_type() {
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double> || std::is_same_v<Scalar, bfloat16>,
                "attend's safetensors functions read float, double or bfloat16");
}

}  // namespace detail

// ---- reading ----------------------------------------------------------------------------------------------------

// The checked header of a safetensors file, without reading the data.
inline SafetensorsHeader read_safetensors_header(const std::string& path) {
  detail::SafetensorsFile file("read_safetensors_header", path);
  return file.header();
}

// Every tensor of the file, converted to Scalar, and its "__metadata__" into `metadata`.
template <class Scalar>
StateDict<Scalar> load_safetensors(const std::string& path, Metadata& metadata) {
  detail::require_loaded_type<Scalar>();
  detail::SafetensorsFile file("load_safetensors", path);
  const SafetensorsHeader header = file.header();
  const std::uint64_t data_start = 8 + header.header_length;

  StateDict<Scalar> dict;
  std::vector<unsigned char> bytes;  // one tensor's bytes at a time; its size was checked against the file
  for (const auto& entry : header.tensors) {
    const std::uint64_t count = entry.end - entry.begin;
    bytes.resize(static_cast<std::size_t>(count));
    if (count != 0) file.read(data_start + entry.begin, count, bytes.data());

    NamedTensor<Scalar> tensor;
    tensor.shape = entry.shape;
    const std::uint64_t element_size = detail::safetensors_dtype_size(entry.dtype);
    tensor.values.resize(static_cast<std::size_t>(count / element_size));
    const unsigned char* p = bytes.data();
    for (auto& value : tensor.values) {
      const std::uint64_t bits = detail::read_little_endian(p, static_cast<int>(element_size));
      p += element_size;
      if (entry.dtype == "F32") {
        const auto narrow = static_cast<std::uint32_t>(bits);
        float f;
        std::memcpy(&f, &narrow, sizeof f);
        value = static_cast<Scalar>(f);
      } else if (entry.dtype == "F64") {
        double d;
        std::memcpy(&d, &bits, sizeof d);
        value = detail::from_double<Scalar>(d);  // rounds to nearest when Scalar is float or bfloat16
      } else if (entry.dtype == "F16") {
        value = static_cast<Scalar>(detail::half_to_float(static_cast<std::uint16_t>(bits)));
      } else {  // BF16
        value = static_cast<Scalar>(detail::bfloat16_to_float(static_cast<std::uint16_t>(bits)));
      }
    }
    dict.emplace(entry.name, std::move(tensor));
  }
  metadata = header.metadata;
  return dict;
}

// Every tensor of the file, converted to Scalar; the metadata is dropped.
template <class Scalar>
StateDict<Scalar> load_safetensors(const std::string& path) {
  Metadata metadata;
  return load_safetensors<Scalar>(path, metadata);
}

// ---- writing ----------------------------------------------------------------------------------------------------

// Writes `dict` to `path`: F32 for float, F64 for double, tensors sorted by name, data 8-byte aligned.
// A tensor whose values do not match its shape, a negative dimension, the name "__metadata__", or a
// name or metadata that is not valid UTF-8 throws std::invalid_argument and writes nothing; a file
// that cannot be written throws SafetensorsError.
template <class Scalar>
void save_safetensors(const std::string& path, const StateDict<Scalar>& dict, const Metadata& metadata = {}) {
  detail::require_scalar_type<Scalar>();
  constexpr const char* where = "save_safetensors";
  constexpr const char* dtype = std::is_same_v<Scalar, float> ? "F32" : "F64";

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& meta = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& item : metadata) meta[item.first] = item.second;
  }
  std::uint64_t offset = 0;  // where the next tensor's data starts
  for (const auto& [name, tensor] : dict) {
    detail::require(name != "__metadata__", where, ": \"__metadata__\" is reserved and cannot name a tensor");
    const auto count = detail::element_count(tensor.shape);
    detail::require(count.has_value(), where, ": tensor ", detail::quoted(name), " has shape ",
                    detail::shape_text(tensor.shape), ": dimensions must be non-negative, their product at most 2^64");
    detail::require(*count == tensor.values.size(), where, ": tensor ", detail::quoted(name), " has shape ",
                    detail::shape_text(tensor.shape), " (", *count, " values) but ", tensor.values.size(),
                    " values");
    const std::uint64_t bytes = *count * sizeof(Scalar);
    auto& entry = header[name] = nlohmann::ordered_json::object();
    entry["dtype"] = dtype;
    entry["shape"] = tensor.shape;
    entry["data_offsets"] = {offset, offset + bytes};
    offset += bytes;
  }

  std::string text;
  try {
    text = header.dump();  // compact, UTF-8 as is
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(detail::message(where, ": tensor names and metadata must be valid UTF-8"));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  std::vector<char> out;
  out.reserve(8 + text.size() + static_cast<std::size_t>(offset));
  detail::write_little_endian(text.size(), 8, out);
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& item : dict)
    for (const Scalar value : item.second.values) {
      std::conditional_t<std::is_same_v<Scalar, float>, std::uint32_t, std::uint64_t> bits;
      std::memcpy(&bits, &value, sizeof bits);
      detail::write_little_endian(bits, sizeof bits, out);
    }

  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw SafetensorsError(detail::message(where, ": ", path, ": cannot open the file for writing"));
  file.write(out.data(), static_cast<std::streamsize>(out.size()));
  file.close();
  if (!file) throw SafetensorsError(detail::message(where, ": ", path, ": writing the file failed"));
}

}  // namespace ATTEND_ABI
}  // namespace attend
