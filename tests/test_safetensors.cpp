// safetensors: round trips, exact F16/BF16 decoding, the reference writer's byte layout, files written by
// tests/reference/make_broken_files.py, conversions to Eigen types, and every broken file of tests/broken_files/.
#include <attend/linear.hpp>
#include <attend/random.hpp>
#include <attend/safetensors.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <support/named_tensors.hpp>
#include <support/temp_files.hpp>
#include <vector>

#ifndef ATTEND_BROKEN_DIR
#error "ATTEND_BROKEN_DIR must be defined as a string literal naming tests/broken_files (a compile definition)"
#endif

using attend::Index;
using attend::Matrix;
using attend::Metadata;
using attend::NamedTensor;
using attend::StateDict;
using attend::Tensor3;
using attend::Vector;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using attend_test::counting_tensor;
using attend_test::safetensors_path;
using attend_test::temp_dir;

namespace fs = std::filesystem;

namespace {

using Shape = std::vector<Index>;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes an 8-byte little-endian length, the header and the data, exactly as given.
void write_file(const std::string& path, const std::string& header, const std::string& data) {
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xffu);
  std::ofstream(path, std::ios::binary) << length << header << data;
}

// Little-endian bytes of 16-bit values.
std::string bytes16(const std::vector<std::uint16_t>& words) {
  std::string out;
  for (auto w : words) {
    out += static_cast<char>(w & 0xffu);
    out += static_cast<char>(w >> 8);
  }
  return out;
}

// Same value, bit for bit where it matters: NaN matches NaN, and the sign of zero counts.
template <class Scalar>
bool same_value(Scalar actual, Scalar expected) {
  if (std::isnan(expected)) return std::isnan(actual);
  return actual == expected && std::signbit(actual) == std::signbit(expected);
}

template <class Scalar>
void require_same_values(const std::vector<Scalar>& actual, const std::vector<Scalar>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("element " << i << ": " << actual[i] << " vs " << expected[i]);
    CHECK(same_value(actual[i], expected[i]));
  }
}

// The broken files and the phrase each one's message must contain (besides the file name).
// tests/broken_files/README.md says what is wrong with each.
const std::map<std::string, std::string>& broken_files() {
  static const std::map<std::string, std::string> table{
      {"empty.safetensors", "the file is too short (0 bytes)"},
      {"short.safetensors", "the file is too short (5 bytes)"},
      {"header_past_end.safetensors", "the header length 1000 runs past the end of the file"},
      {"header_length_2_63.safetensors", "the header length 9223372036854775808 runs past the end of the file"},
      {"header_length_max.safetensors", "the header length 18446744073709551615 runs past the end of the file"},
      {"header_empty.safetensors", "malformed JSON header"},
      {"json_truncated.safetensors", "malformed JSON header"},
      {"json_trailing_garbage.safetensors", "malformed JSON header"},
      {"header_nul_padding.safetensors", "malformed JSON header: a NUL byte at offset 65"},
      {"header_invalid_utf8.safetensors", "ill-formed UTF-8"},
      {"header_array.safetensors", "the header is not a JSON object: it is an array"},
      {"header_string.safetensors", "the header is not a JSON object: it is the string \"weights\""},
      {"entry_not_object.safetensors", "tensor \"w\": the entry must be an object"},
      {"missing_dtype.safetensors", "tensor \"w\": missing \"dtype\""},
      {"missing_shape.safetensors", "tensor \"w\": missing \"shape\""},
      {"missing_data_offsets.safetensors", "tensor \"w\": missing \"data_offsets\""},
      {"dtype_not_string.safetensors", "tensor \"w\": \"dtype\" must be a string, got 32"},
      {"shape_not_array.safetensors", "tensor \"w\": \"shape\" must be an array, got the string \"2x2\""},
      {"shape_negative.safetensors", "tensor \"w\": shape[0] must be a non-negative integer, got -2"},
      {"shape_fractional.safetensors", "tensor \"w\": shape[0] must be a non-negative integer, got 1.5"},
      {"shape_float_integral.safetensors", "tensor \"w\": shape[0] must be a non-negative integer, got 2.0"},
      {"shape_string_entry.safetensors", "tensor \"w\": shape[0] must be a non-negative integer, got the string \"2\""},
      {"shape_deeply_nested.safetensors", "tensor \"w\": shape[0] must be a non-negative integer, got an array"},
      {"offsets_not_pair.safetensors", "\"data_offsets\" must be an array of 2 integers [begin, end], got an array of 3"},
      {"offsets_not_array.safetensors", "\"data_offsets\" must be an array of 2 integers [begin, end], got the string"},
      {"offsets_strings.safetensors", "tensor \"w\": data_offsets[0] must be a non-negative integer, got the string \"0\""},
      {"offsets_negative.safetensors", "tensor \"w\": data_offsets[0] must be a non-negative integer, got -16"},
      {"offsets_begin_after_end.safetensors", "tensor \"w\": data_offsets [16, 0]: begin is after end"},
      {"offsets_past_data.safetensors", "data_offsets [0, 64] run past the end of the data (16 bytes"},
      {"truncated.safetensors", "tensor \"b\": data_offsets [16, 32] run past the end of the data (26 bytes; is the file truncated?)"},
      {"offsets_overlap.safetensors", "tensors \"a\" [0, 16) and \"b\" [8, 24) overlap"},
      {"offsets_hole.safetensors", "bytes [8, 16) of the data belong to no tensor (a hole before \"b\")"},
      {"offsets_hole_at_start.safetensors", "bytes [0, 8) of the data belong to no tensor (a hole before \"w\")"},
      {"trailing_bytes.safetensors", "(8 bytes after the last tensor)"},
      {"byte_count_shape.safetensors", "dtype F32 and shape (2, 3) need 24 bytes, but data_offsets [0, 20] hold 20"},
      {"byte_count_dtype.safetensors", "dtype F64 and shape (4) need 32 bytes, but data_offsets [0, 16] hold 16"},
      {"unknown_dtype.safetensors", "tensor \"w\": unknown dtype \"F31\""},
      {"dtype_lowercase.safetensors", "tensor \"w\": unknown dtype \"f32\""},
      {"unsupported_dtype.safetensors", "tensor \"w\": unsupported dtype \"I64\""},
      {"shape_product_overflow.safetensors", "more elements than 64 bits can count (overflow)"},
      {"shape_bytes_overflow.safetensors", "more bytes than 64 bits can count (overflow)"},
      {"huge_declared_size.safetensors", "data_offsets [0, 4611686018427387904] run past the end of the data"},
      {"shape_dim_too_large.safetensors", "shape[1] = 9223372036854775808 is too large for an index"},
      {"duplicate_tensor.safetensors", "duplicate tensor name \"w\""},
      {"duplicate_field.safetensors", "duplicate key \"dtype\""},
      {"metadata_not_object.safetensors", "\"__metadata__\" must be an object of strings, got the string \"pt\""},
      {"metadata_not_string.safetensors", "\"__metadata__\"[\"epochs\"] must be a string, got 3"},
  };
  return table;
}

}  // namespace

// ---- broken files -------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("Every broken file throws a runtime_error naming the file and its problem", "[safetensors]", float,
                   double) {
  std::set<std::string> seen;
  for (const auto& file : fs::directory_iterator(ATTEND_BROKEN_DIR)) {
    if (file.path().extension() != ".safetensors") continue;
    const std::string name = file.path().filename().string();
    const std::string path = file.path().string();
    INFO(name);
    const auto row = broken_files().find(name);
    REQUIRE(row != broken_files().end());  // a new file needs its row in the table
    seen.insert(name);
    REQUIRE_THROWS_MATCHES(attend::load_safetensors<TestType>(path), std::runtime_error,
                           Catch::Matchers::Predicate<std::runtime_error>(
                               [&](const std::runtime_error& error) {
                                 const std::string what = error.what();
                                 return what.find("load_safetensors: " + path + ": ") == 0 &&
                                        what.find(row->second) != std::string::npos;
                               },
                               "the message starts with load_safetensors: <path>: and contains \"" + row->second +
                                   "\""));
    REQUIRE_THROWS_AS(attend::load_safetensors<TestType>(path), attend::SafetensorsError);
    REQUIRE_THROWS_WITH(attend::read_safetensors_header(path),
                        Contains("read_safetensors_header: " + path) && Contains(row->second));
  }
  for (const auto& row : broken_files()) {
    INFO(row.first << " is in the table but not in " << ATTEND_BROKEN_DIR);
    CHECK(seen.count(row.first) == 1);
  }
}

TEST_CASE("A header length over 100 MB is refused before anything is read", "[safetensors]") {
  // A sparse file of 100 MB + 9 bytes whose header length is 100'000'001: inside the file, over the limit.
  const std::string path = safetensors_path<float>("header_too_large");
  write_file(path, "", "");
  {
    std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
    const std::uint64_t length = 100'000'001;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xffu));
  }
  fs::resize_file(path, 8 + 100'000'001);
  REQUIRE_THROWS_WITH(attend::load_safetensors<float>(path),
                      Contains(path) && Contains("the header length 100000001 is too large (the limit is 100000000"));
  fs::remove(path);
}

TEST_CASE("A missing file or a directory throws naming the path", "[safetensors]") {
  const std::string missing = (temp_dir() / "no_such_file.safetensors").string();
  REQUIRE_THROWS_AS(attend::load_safetensors<float>(missing), attend::SafetensorsError);
  REQUIRE_THROWS_WITH(attend::load_safetensors<float>(missing),
                      Contains("load_safetensors: " + missing + ": cannot open the file"));
  REQUIRE_THROWS_WITH(attend::load_safetensors<double>(temp_dir().string()), Contains("cannot open the file"));
  REQUIRE_THROWS_WITH(attend::save_safetensors<float>((temp_dir() / "no_dir" / "x.safetensors").string(), {}),
                      Contains("save_safetensors: ") && Contains("no_dir") &&
                          Contains("cannot open the file for writing"));
}

// ---- valid files written by hand ----------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("F16 and BF16 decode exactly, subnormals, infinities and NaN included", "[safetensors]", float,
                   double) {
  using T = TestType;
  // IEEE 754 binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits.
  const std::vector<std::uint16_t> half_bits{0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400,
                                             0x3555, 0x3E00, 0x7C00, 0xFC00, 0x7E00, 0x8000};
  const std::vector<T> half_values{T(1), T(-2), T(65504), T(5.9604644775390625e-08),  // 2^-24, the least subnormal
                                   T(6.097555160522461e-05),                           // 1023 * 2^-24, the largest
                                   T(6.103515625e-05),                                 // 2^-14, the least normal
                                   T(0.333251953125),                                  // 0x155 / 1024 + 1, / 4
                                   T(1.5), std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                                   std::numeric_limits<T>::quiet_NaN(), T(-0.0)};
  // bfloat16: the upper 16 bits of a binary32.
  const std::vector<std::uint16_t> brain_bits{0x3F80, 0x4049, 0xC2F7, 0x0001, 0x7F7F, 0xFF80, 0x7FC0, 0x8000};
  const std::vector<T> brain_values{T(1), T(3.140625), T(-123.5),
                                    T(9.183549615799121e-41),   // 2^-133, the least subnormal
                                    T(3.3895313892515355e+38),  // 255 * 2^120, the largest finite
                                    -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN(), T(-0.0)};
  // The decimal constants above are the powers of two they claim to be. (PyTorch 1.13's torch.float16 and
  // torch.bfloat16 decode these bit patterns to the same values.)
  REQUIRE(5.9604644775390625e-08 == std::ldexp(1.0, -24));
  REQUIRE(6.097555160522461e-05 == std::ldexp(1023.0, -24));
  REQUIRE(9.183549615799121e-41 == std::ldexp(1.0, -133));
  REQUIRE(3.3895313892515355e+38 == std::ldexp(255.0, 120));

  const std::string path = safetensors_path<T>("f16_bf16");
  write_file(path,
             R"({"half":{"dtype":"F16","shape":[3,4],"data_offsets":[0,24]},)"
             R"("brain":{"dtype":"BF16","shape":[2,1,4],"data_offsets":[24,40]}})",
             bytes16(half_bits) + bytes16(brain_bits));
  const StateDict<T> dict = attend::load_safetensors<T>(path);
  REQUIRE(dict.size() == 2);
  CHECK(dict.at("half").shape == Shape{3, 4});
  CHECK(dict.at("brain").shape == Shape{2, 1, 4});
  require_same_values(dict.at("half").values, half_values);
  require_same_values(dict.at("brain").values, brain_values);

  // The header as read: entries in data order, offsets, dtype names as written.
  const auto header = attend::read_safetensors_header(path);
  REQUIRE(header.tensors.size() == 2);
  CHECK(header.tensors[0].name == "half");
  CHECK(header.tensors[0].dtype == "F16");
  CHECK(header.tensors[1].name == "brain");
  CHECK(header.tensors[1].begin == 24);
  CHECK(header.tensors[1].end == 40);
  CHECK(header.data_length == 40);
  CHECK(header.metadata.empty());
}

// The bfloat16 nearest to d by the definition: of the bfloat16 values around it (bfloat16 is float's upper half, so
// they are floats), the one at the least distance in double, the one with an even last bit on a tie; d finite.
std::uint16_t nearest_bfloat16_bits(double d) {
  const float truncated = static_cast<float>(d);  // within a float's rounding of d: its bfloat16 neighbours are near
  std::uint32_t wide;
  std::memcpy(&wide, &truncated, sizeof wide);
  std::uint16_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int step = -2; step <= 2; ++step) {
    const auto candidate = static_cast<std::uint16_t>(static_cast<int>(wide >> 16) + step);
    const std::uint32_t candidate_wide = static_cast<std::uint32_t>(candidate) << 16;
    float value;
    std::memcpy(&value, &candidate_wide, sizeof value);
    if (!std::isfinite(value)) continue;
    const double distance = std::abs(static_cast<double>(value) - d);
    if (distance < best_distance || (distance == best_distance && (candidate & 1u) == 0)) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::uint16_t bits_of(attend::bfloat16 x) {
  std::uint16_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// Little-endian bytes of 32- and 64-bit floats.
template <class Float>
std::string float_bytes(const std::vector<Float>& values) {
  std::string out;
  for (Float v : values) {
    unsigned char raw[sizeof(Float)];
    std::memcpy(raw, &v, sizeof raw);  // x86-64 and AArch64 are little-endian
    out.append(reinterpret_cast<const char*>(raw), sizeof raw);
  }
  return out;
}

TEST_CASE("load_safetensors<bfloat16> keeps BF16 as stored and rounds F64, F32 and F16 once, to nearest even",
          "[safetensors]") {
  // F64: 1 + 2^-8 + 2^-30 lies just above a tie of bfloat16 (rounding to float first would make it the tie, and
  // then round down); 1 + 2^-8 - 2^-40 just below one. F32: two ties (to 1, to 1 + 2^-6), pi, a value past the
  // largest bfloat16 (to infinity).
  const std::vector<double> f64{0.1, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30),
                                1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40), -2.5, 1e-300, -1e300};
  const std::vector<float> f32{1.00390625f, 1.01171875f, 3.14159274f, -7.5e-39f, 3.397e38f};
  const std::vector<std::uint16_t> bf16{0x3F80, 0x4049, 0x0001, 0x7F7F, 0xFF80, 0x7FC0, 0x8000};
  const std::vector<std::uint16_t> f16{0x3555, 0x7BFF, 0x0001};  // 0.333251953125, 65504, 2^-24
  const std::string path = safetensors_path<double>("bf16_loading");
  write_file(path,
             R"({"a":{"dtype":"F64","shape":[6],"data_offsets":[0,48]},)"
             R"("b":{"dtype":"F32","shape":[5],"data_offsets":[48,68]},)"
             R"("c":{"dtype":"BF16","shape":[7],"data_offsets":[68,82]},)"
             R"("d":{"dtype":"F16","shape":[3],"data_offsets":[82,88]}})",
             float_bytes(f64) + float_bytes(f32) + bytes16(bf16) + bytes16(f16));
  const StateDict<attend::bfloat16> dict = attend::load_safetensors<attend::bfloat16>(path);
  REQUIRE(dict.size() == 4);
  const auto& a = dict.at("a").values;
  REQUIRE(a.size() == f64.size());
  for (std::size_t i = 0; i < f64.size(); ++i) {
    INFO("F64 element " << i);
    const std::uint16_t expected = std::abs(f64[i]) > 1e100 ? (f64[i] > 0 ? 0x7F80 : 0xFF80)  // past the largest
                                                             : nearest_bfloat16_bits(f64[i]);
    CHECK(bits_of(a[i]) == expected);
  }
  CHECK(bits_of(a[1]) == 0x3F81);  // 1 + 2^-7: above the tie
  CHECK(bits_of(a[2]) == 0x3F80);  // 1: below it
  const auto& b = dict.at("b").values;
  REQUIRE(b.size() == f32.size());
  for (std::size_t i = 0; i + 1 < f32.size(); ++i) {
    INFO("F32 element " << i);
    CHECK(bits_of(b[i]) == nearest_bfloat16_bits(f32[i]));
  }
  CHECK(bits_of(b[0]) == 0x3F80);  // the tie 1 + 2^-8, to even: 1
  CHECK(bits_of(b[1]) == 0x3F82);  // the tie 1 + 3 2^-8, to even: 1 + 2^-6
  CHECK(bits_of(b[4]) == 0x7F80);  // past the largest finite bfloat16 (255 * 2^120) and half its last place
  const auto& c = dict.at("c").values;
  REQUIRE(c.size() == bf16.size());
  for (std::size_t i = 0; i < bf16.size(); ++i) CHECK(bits_of(c[i]) == bf16[i]);
  const auto& d = dict.at("d").values;
  REQUIRE(d.size() == 3);
  CHECK(bits_of(d[0]) == nearest_bfloat16_bits(0.333251953125));
  CHECK(bits_of(d[1]) == nearest_bfloat16_bits(65504.0));
  CHECK(bits_of(d[2]) == nearest_bfloat16_bits(std::ldexp(1.0, -24)));
}

TEST_CASE("Headers padded with whitespace, entries in any order, unknown fields and empty tensors are read",
          "[safetensors]") {
  const std::string path = safetensors_path<double>("liberal_header");
  std::string data;
  const double values[] = {1.5, -2.0};
  for (double v : values) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    for (int i = 0; i < 8; ++i) data += static_cast<char>((bits >> (8 * i)) & 0xffu);
  }
  // "z" comes first in the data, "a" second, "e" (empty) sits at offset 8 between them.
  write_file(path,
             "\n { \"a\" : {\"shape\": [1], \"data_offsets\": [8, 16], \"dtype\": \"F64\", \"note\": [1, {}]},\n"
             "   \"e\" : {\"dtype\": \"F64\", \"shape\": [2, 0], \"data_offsets\": [8, 8]},\n"
             "   \"__metadata__\": {\"format\": \"pt\"},\n"
             "   \"z\" : {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [0, 8]} }  \t\n   ",
             data);
  Metadata metadata;
  const auto dict = attend::load_safetensors<double>(path, metadata);
  REQUIRE(dict.size() == 3);
  CHECK(dict.at("z").shape == Shape{});
  CHECK(dict.at("z").values == std::vector<double>{1.5});
  CHECK(dict.at("a").values == std::vector<double>{-2.0});
  CHECK(dict.at("e").shape == Shape{2, 0});
  CHECK(dict.at("e").values.empty());
  CHECK(metadata == Metadata{{"format", "pt"}});

  const auto header = attend::read_safetensors_header(path);
  REQUIRE(header.tensors.size() == 3);
  CHECK(header.tensors[0].name == "z");
  CHECK(header.tensors[1].name == "e");
  CHECK(header.tensors[2].name == "a");
}

TEST_CASE("An empty header object is a file with no tensors", "[safetensors]") {
  const std::string path = safetensors_path<float>("no_tensors");
  write_file(path, "{}      ", "");
  CHECK(attend::load_safetensors<float>(path).empty());
}

// ---- files written by tests/reference/make_broken_files.py ------------------------------------------------------

TEMPLATE_TEST_CASE("A file with every readable dtype, written by the reference script, loads exactly", "[safetensors]",
                   float, double) {
  using T = TestType;
  Metadata metadata;
  const auto dict =
      attend::load_safetensors<T>(std::string(ATTEND_BROKEN_DIR) + "/valid/mixed_dtypes.safetensors", metadata);
  CHECK(metadata == Metadata{{"format", "pt"}, {"source", "make_broken_files.py"}});
  REQUIRE(dict.size() == 6);

  CHECK(dict.at("bias").shape == Shape{3});  // F64: rounded to nearest when T is float
  require_same_values(dict.at("bias").values, {static_cast<T>(0.1), T(-2.5), static_cast<T>(1e-300)});
  CHECK(dict.at("weight").shape == Shape{2, 3});  // F32
  require_same_values(dict.at("weight").values, {T(0.5), T(-1.25), T(3), T(0), T(-0.0), T(1024)});
  CHECK(dict.at("count").shape == Shape{});
  CHECK(attend::to_scalar(dict, "count") == T(42));
  CHECK(dict.at("empty").shape == Shape{0, 3});
  CHECK(dict.at("empty").values.empty());
  CHECK(dict.at("embedding").shape == Shape{2, 2});  // BF16
  require_same_values(dict.at("embedding").values,
                      {T(1), T(3.140625), T(-0.0), std::numeric_limits<T>::infinity()});
  CHECK(dict.at("half").shape == Shape{1, 2, 1, 2});  // F16
  require_same_values(dict.at("half").values,
                      {T(65504), T(5.9604644775390625e-08), T(-2), -std::numeric_limits<T>::infinity()});

  // The script's layout: F64 first, then F32 by name, BF16, F16.
  const auto header = attend::read_safetensors_header(std::string(ATTEND_BROKEN_DIR) + "/valid/mixed_dtypes.safetensors");
  std::vector<std::string> order;
  for (const auto& entry : header.tensors) order.push_back(entry.name);
  CHECK(order == std::vector<std::string>{"bias", "count", "empty", "weight", "embedding", "half"});
  CHECK(header.header_length % 8 == 0);
}

TEST_CASE("save_safetensors writes the reference layout byte for byte", "[safetensors]") {
  SECTION("float: F32, metadata first, tensors by name, header padded to 8 bytes") {
    StateDict<float> dict;
    dict["attn.0"] = {{1, 2, 3}, {0, 1, 2, 3, 4, 5}};
    dict["b"] = {{2}, {-1.5f, 0.25f}};
    dict["a"] = {{}, {7}};
    const std::string path = safetensors_path<float>("layout");
    attend::save_safetensors(path, dict, {{"format", "pt"}});
    CHECK(read_bytes(path) == read_bytes(std::string(ATTEND_BROKEN_DIR) + "/valid/layout_f32.safetensors"));
  }
  SECTION("double: F64, no metadata, an empty tensor") {
    StateDict<double> dict;
    dict["W_q.weight"] = {{2, 2}, {0.1, 0.2, 0.3, 0.4}};
    dict["empty"] = {{3, 0}, {}};
    const std::string path = safetensors_path<double>("layout");
    attend::save_safetensors(path, dict);
    CHECK(read_bytes(path) == read_bytes(std::string(ATTEND_BROKEN_DIR) + "/valid/layout_f64.safetensors"));
  }
  SECTION("the reference implementation's own examples") {
    std::string data;  // 0, 1, ..., 5 as F32
    for (float v : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) {
      std::uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      for (int i = 0; i < 4; ++i) data += static_cast<char>((bits >> (8 * i)) & 0xffu);
    }
    const std::string path = safetensors_path<float>("reference_example");
    // "attn.0" of shape (1, 2, 3): the header is 64 bytes, already a multiple of 8.
    attend::save_safetensors(path, StateDict<float>{{"attn.0", {{1, 2, 3}, {0, 1, 2, 3, 4, 5}}}});
    CHECK(read_bytes(path) == std::string("\x40\0\0\0\0\0\0\0", 8) +
                                  R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + data);
    // "attn0" of shape (1, 1, 2, 3): 65 bytes, padded with 7 spaces to 72.
    attend::save_safetensors(path, StateDict<float>{{"attn0", {{1, 1, 2, 3}, {0, 1, 2, 3, 4, 5}}}});
    CHECK(read_bytes(path) == std::string("\x48\0\0\0\0\0\0\0", 8) +
                                  R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "       " +
                                  data);

    // No tensors: "{}" and six spaces; with metadata, 35 bytes padded to 40.
    attend::save_safetensors(path, StateDict<float>{});
    CHECK(read_bytes(path) == std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
    attend::save_safetensors(path, StateDict<float>{}, {{"framework", "pt"}});
    CHECK(read_bytes(path) == std::string("\x28\0\0\0\0\0\0\0", 8) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  }
}

// ---- round trips --------------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("save then load gives the same tensors, ranks 0 to 4, empty ones, special values", "[safetensors]",
                   float, double) {
  using T = TestType;
  using limits = std::numeric_limits<T>;
  StateDict<T> dict;
  dict["rank0"] = counting_tensor<T>({});
  dict["rank1"] = counting_tensor<T>({5});
  dict["rank2"] = counting_tensor<T>({3, 4});
  dict["rank3"] = counting_tensor<T>({2, 3, 4});
  dict["rank4"] = counting_tensor<T>({2, 1, 3, 2});
  dict["empty1"] = counting_tensor<T>({0});
  dict["empty3"] = counting_tensor<T>({2, 0, 3});
  dict["special"] = {{8}, {limits::infinity(), -limits::infinity(), limits::quiet_NaN(), T(-0.0), T(0),
                           limits::denorm_min(), limits::max(), limits::lowest()}};
  dict["layer.0.weight \u00e9\u4e2d"] = counting_tensor<T>({2});  // any UTF-8 name
  const Metadata metadata{{"format", "pt"}, {"note", "\u00fcber \"quoted\"\n"}};

  const std::string path = safetensors_path<T>("round_trip");
  attend::save_safetensors(path, dict, metadata);
  Metadata loaded_metadata;
  const StateDict<T> loaded = attend::load_safetensors<T>(path, loaded_metadata);
  CHECK(loaded_metadata == metadata);
  REQUIRE(loaded.size() == dict.size());
  for (const auto& [name, tensor] : dict) {
    INFO(name);
    REQUIRE(loaded.count(name) == 1);
    CHECK(loaded.at(name).shape == tensor.shape);
    require_same_values(loaded.at(name).values, tensor.values);
  }

  const auto header = attend::read_safetensors_header(path);
  CHECK(header.header_length % 8 == 0);  // the data starts 8-byte aligned
  for (const auto& entry : header.tensors) CHECK(entry.dtype == (sizeof(T) == 4 ? "F32" : "F64"));
}

TEST_CASE("float files load as double exactly, double files as float rounded to nearest", "[safetensors]") {
  StateDict<float> floats;
  floats["x"] = {{3}, {0.1f, -3.5f, 1e-40f}};
  const std::string float_path = safetensors_path<float>("cross");
  attend::save_safetensors(float_path, floats);
  const auto as_double = attend::load_safetensors<double>(float_path);
  CHECK(as_double.at("x").values == std::vector<double>{double(0.1f), -3.5, double(1e-40f)});

  StateDict<double> doubles;
  doubles["x"] = {{3}, {0.1, 1.0 / 3.0, 1e-50}};
  const std::string double_path = safetensors_path<double>("cross");
  attend::save_safetensors(double_path, doubles);
  const auto as_float = attend::load_safetensors<float>(double_path);
  CHECK(as_float.at("x").values == std::vector<float>{0.1f, 1.0f / 3.0f, 0.0f});
}

TEMPLATE_TEST_CASE("A Linear layer's parameters survive a save and a load", "[safetensors]", float, double) {
  using T = TestType;
  attend::Generator first(1), second(2);
  const attend::Linear<T> trained(4, 3, true, first);
  attend::Linear<T> fresh(4, 3, true, second);
  REQUIRE(fresh.weight() != trained.weight());

  StateDict<T> dict;
  dict["weight"] = attend::named_tensor(trained.weight());  // (out, in) = (3, 4)
  dict["bias"] = attend::named_tensor(trained.bias());      // (3)
  CHECK(dict["weight"].shape == Shape{3, 4});
  CHECK(dict["bias"].shape == Shape{3});
  const std::string path = safetensors_path<T>("linear");
  attend::save_safetensors(path, dict);

  const auto loaded = attend::load_safetensors<T>(path);
  attend::copy_into(loaded, "weight", fresh.weight());
  attend::copy_into(loaded, "bias", fresh.bias());
  CHECK(fresh.weight() == trained.weight());
  CHECK(fresh.bias() == trained.bias());
}

// ---- bad dicts on saving ------------------------------------------------------------------------------------------

TEST_CASE("save_safetensors refuses inconsistent tensors and writes nothing", "[safetensors]") {
  const std::string path = safetensors_path<float>("refused");
  const auto refuses = [&](const StateDict<float>& dict, const std::string& text, const Metadata& metadata = {}) {
    REQUIRE_THROWS_AS(attend::save_safetensors(path, dict, metadata), std::invalid_argument);
    REQUIRE_THROWS_WITH(attend::save_safetensors(path, dict, metadata), Equals(text));
    CHECK_FALSE(fs::exists(path));
  };
  refuses({{"w", {{2, 3}, {1, 2, 3}}}}, "save_safetensors: tensor \"w\" has shape (2, 3) (6 values) but 3 values");
  refuses({{"w", {{2, -3}, {}}}},
          "save_safetensors: tensor \"w\" has shape (2, -3): dimensions must be non-negative, their product at most 2^64");
  refuses({{"w", {{Index(1) << 62, Index(1) << 62}, {}}}},
          "save_safetensors: tensor \"w\" has shape (4611686018427387904, 4611686018427387904): dimensions must be "
          "non-negative, their product at most 2^64");
  refuses({{"__metadata__", {{1}, {1}}}}, "save_safetensors: \"__metadata__\" is reserved and cannot name a tensor");
  refuses({{"w\xff", {{1}, {1}}}}, "save_safetensors: tensor names and metadata must be valid UTF-8");
  refuses({{"w", {{1}, {1}}}}, "save_safetensors: tensor names and metadata must be valid UTF-8", {{"k", "\xc3"}});
}

// ---- Eigen types in and out ---------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("Tensors convert to and from Matrix, Vector and Tensor3 in row-major order", "[safetensors]", float,
                   double) {
  using T = TestType;
  const NamedTensor<T> t23 = counting_tensor<T>({2, 3});
  const Matrix<T> M = attend::to_matrix(t23, "W", 2, 3);
  CHECK(M(0, 2) == t23.values[2]);
  CHECK(M(1, 0) == t23.values[3]);
  CHECK(attend::named_tensor(M).values == t23.values);

  // A column-major matrix is written in row-major order too.
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> column_major = M;
  const auto from_column_major = attend::named_tensor(column_major);
  CHECK(from_column_major.shape == Shape{2, 3});
  CHECK(from_column_major.values == t23.values);

  const NamedTensor<T> t5 = counting_tensor<T>({5});
  const Vector<T> v = attend::to_vector(t5, "b", 5);
  CHECK(v(4) == t5.values[4]);
  CHECK(attend::named_tensor(v).shape == Shape{5});

  const NamedTensor<T> t234 = counting_tensor<T>({2, 3, 4});
  const Tensor3<T> X = attend::to_tensor3(t234, "X", 2, 3, 4);
  CHECK(X(1, 2, 3) == t234.values[1 * 12 + 2 * 4 + 3]);
  CHECK(X(0, 1, 0) == t234.values[4]);
  const auto back = attend::named_tensor(X);
  CHECK(back.shape == Shape{2, 3, 4});
  CHECK(back.values == t234.values);

  CHECK(attend::to_scalar(NamedTensor<T>{{}, {T(2.5)}}, "s") == T(2.5));
  CHECK(attend::to_matrix(counting_tensor<T>({0, 3}), "empty").rows() == 0);
}

TEMPLATE_TEST_CASE("Conversions check rank and shape and name the tensor", "[safetensors]", float, double) {
  using T = TestType;
  const NamedTensor<T> t34 = counting_tensor<T>({3, 4});
  REQUIRE_THROWS_AS(attend::to_matrix(t34, "W_q.weight", 4, 3), std::invalid_argument);
  REQUIRE_THROWS_WITH(attend::to_matrix(t34, "W_q.weight", 4, 3),
                      Equals("to_matrix: \"W_q.weight\" must have shape (4, 3), got (3, 4)"));
  REQUIRE_THROWS_WITH(attend::to_matrix(counting_tensor<T>({3}), "W_q.weight"),
                      Equals("to_matrix: \"W_q.weight\" must have rank 2, got shape (3)"));
  REQUIRE_THROWS_WITH(attend::to_vector(t34, "bias"), Equals("to_vector: \"bias\" must have rank 1, got shape (3, 4)"));
  REQUIRE_THROWS_WITH(attend::to_vector(counting_tensor<T>({3}), "bias", 4),
                      Equals("to_vector: \"bias\" must have shape (4), got (3)"));
  REQUIRE_THROWS_WITH(attend::to_tensor3(t34, "X"), Equals("to_tensor3: \"X\" must have rank 3, got shape (3, 4)"));
  REQUIRE_THROWS_WITH(attend::to_tensor3(counting_tensor<T>({1, 2, 3}), "X", 1, 3, 2),
                      Equals("to_tensor3: \"X\" must have shape (1, 3, 2), got (1, 2, 3)"));
  REQUIRE_THROWS_WITH(attend::to_scalar(counting_tensor<T>({1}), "s"),
                      Equals("to_scalar: \"s\" must have rank 0, got shape (1)"));
  REQUIRE_THROWS_WITH(attend::to_matrix(NamedTensor<T>{{2, 2}, {T(1)}}, "W"),
                      Equals("to_matrix: \"W\" has shape (2, 2) but 1 values"));

  StateDict<T> dict;
  dict["a"] = t34;
  dict["b"] = counting_tensor<T>({4});
  REQUIRE_THROWS_AS(attend::to_matrix(dict, "W_q.weight"), std::invalid_argument);
  REQUIRE_THROWS_WITH(attend::to_matrix(dict, "W_q.weight"),
                      Equals("to_matrix: no tensor \"W_q.weight\" among the 2 tensors (\"a\", \"b\")"));
  CHECK(attend::to_matrix(dict, "a", 3, 4).rows() == 3);
  CHECK(attend::to_vector(dict, "b").size() == 4);

  // copy_into keeps the parameter's shape, and leaves it as it was when the shapes differ.
  Matrix<T> W = Matrix<T>::Constant(4, 3, T(7));
  REQUIRE_THROWS_WITH(attend::copy_into(dict, "a", W), Equals("to_matrix: \"a\" must have shape (4, 3), got (3, 4)"));
  CHECK(W == Matrix<T>::Constant(4, 3, T(7)));
  Vector<T> b = Vector<T>::Zero(4);
  attend::copy_into(dict, "b", b);
  CHECK(b(3) == dict["b"].values[3]);
  Tensor3<T> X(1, 3, 4);
  REQUIRE_THROWS_WITH(attend::copy_into(dict, "a", X), Equals("to_tensor3: \"a\" must have rank 3, got shape (3, 4)"));
}
