// libFuzzer target: attend's safetensors reader on arbitrary files, and what it hands on to the modules.
//
// The reader takes a path, so the fuzzer's bytes are written to a file of this process's own in the temporary
// directory and read with read_safetensors_header, load_safetensors<float> and load_safetensors<double>.
// What must hold:
//
//   1. outcome     each of the three returns or throws attend::SafetensorsError, as safetensors.hpp promises for
//                  every malformed file; and they agree (all return or all throw). Anything else — another
//                  exception, a crash, a sanitizer report, one allocation above -malloc_limit_mb (the reader must
//                  check declared sizes against the file before allocating) — is a failure;
//   2. header      a returned header describes the file: 8 + header_length + data_length bytes, the tensors sorted
//                  by their data and tiling [0, data_length) exactly, each product(shape) * sizeof(dtype) bytes;
//   3. tensors     every tensor of the header is loaded, under its name, with its shape and product(shape) values;
//                  a float value is the double one rounded to float;
//   4. round trip  save_safetensors of what was loaded in double, loaded again, gives the same names, shapes, bits
//                  and metadata;
//   5. modules     the loaded tensors given to multi_head_attention_from_torch (1 and 2 heads) and to a Linear's
//                  load_state_dict, the Linear shaped after the file's "weight": each returns or throws
//                  std::invalid_argument, exactly when the names and shapes are wrong for load_state_dict; a
//                  load_state_dict that throws leaves the Linear as it was, one that returns gives it the file's
//                  values; a converted module runs.
// A violation prints what went wrong and traps, which libFuzzer reports as a crash and saves the input.
#include <unistd.h>

#include <attend/attend.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using attend::Index;

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream text;
  (text << ... << parts);
  std::fprintf(stderr, "\nfuzz_safetensors: %s\n", text.str().c_str());
  __builtin_trap();
}

template <class... Parts>
void expect(bool ok, const Parts&... parts) {
  if (!ok) fail(parts...);
}

// Runs `call`: true when it returned, false when it threw an `Allowed`; any other exception is a failure.
template <class Allowed, class Call>
bool returns(const char* what, const char* allowed, Call&& call) {
  try {
    call();
    return true;
  } catch (const Allowed&) {
    return false;
  } catch (const std::exception& error) {
    fail(what, ": threw an exception that is not a ", allowed, ": ", error.what());
  } catch (...) {
    fail(what, ": threw something that is not a std::exception");
  }
}

// Two files of this process: the input, and the round trip's copy. Removed when the fuzzer exits normally.
struct Files {
  std::string input, copy;
  Files() {
    const auto stem = std::filesystem::temp_directory_path() / ("attend_fuzz_safetensors_" + std::to_string(getpid()));
    input = stem.string() + ".safetensors";
    copy = stem.string() + "_copy.safetensors";
  }
  ~Files() {
    std::error_code ignored;
    std::filesystem::remove(input, ignored);
    std::filesystem::remove(copy, ignored);
  }
};

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  expect(file != nullptr, "cannot create ", path);
  const bool written = size == 0 || std::fwrite(data, 1, size, file) == size;
  expect(std::fclose(file) == 0 && written, "cannot write ", path);
}

std::uint64_t element_size(const std::string& dtype) {
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "F32") return 4;
  if (dtype == "F64") return 8;
  fail("the header has a tensor of dtype ", dtype, ", which the reader does not load");
}

// product(shape), which the reader has checked to fit in 64 bits.
std::uint64_t element_count(const std::vector<Index>& shape) {
  std::uint64_t count = 1;
  for (Index d : shape) {
    expect(d >= 0, "a loaded shape has the negative dimension ", d);
    count *= static_cast<std::uint64_t>(d);
  }
  return count;
}

template <class Scalar>
bool same_bits(Scalar a, Scalar b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// 2. The header describes a file of `file_size` bytes.
void check_header(const attend::SafetensorsHeader& header, std::uint64_t file_size) {
  expect(8 + header.header_length + header.data_length == file_size, "header: 8 + header_length (",
         header.header_length, ") + data_length (", header.data_length, ") is not the file size ", file_size);
  std::uint64_t covered = 0;  // bytes [0, covered) of the data belong to the tensors seen so far
  for (const auto& tensor : header.tensors) {
    expect(tensor.begin == covered, "header: tensor ", tensor.name, " starts at ", tensor.begin, ", not at ", covered);
    expect(tensor.end - tensor.begin == element_count(tensor.shape) * element_size(tensor.dtype), "header: tensor ",
           tensor.name, " has ", tensor.end - tensor.begin, " bytes for its dtype and shape");
    covered = tensor.end;
  }
  expect(covered == header.data_length, "header: the tensors cover ", covered, " of ", header.data_length,
         " data bytes");
}

// 3. `dict` holds the header's tensors, and no other.
template <class Scalar>
void check_loaded(const attend::StateDict<Scalar>& dict, const attend::SafetensorsHeader& header) {
  expect(dict.size() == header.tensors.size(), "load_safetensors: ", dict.size(), " tensors for ",
         header.tensors.size(), " in the header");
  for (const auto& entry : header.tensors) {
    const auto found = dict.find(entry.name);
    expect(found != dict.end(), "load_safetensors: tensor ", entry.name, " of the header is missing");
    expect(found->second.shape == entry.shape, "load_safetensors: tensor ", entry.name, " has another shape");
    expect(found->second.values.size() == element_count(entry.shape), "load_safetensors: tensor ", entry.name, " has ",
           found->second.values.size(), " values for ", element_count(entry.shape), " elements");
  }
}

// 4. Saving what was loaded and loading it again changes nothing.
void check_round_trip(const Files& files, const attend::StateDict<double>& dict, const attend::Metadata& metadata) {
  const bool saved = returns<attend::SafetensorsError>("save_safetensors", "attend::SafetensorsError",
                                                       [&] { attend::save_safetensors(files.copy, dict, metadata); });
  expect(saved, "save_safetensors could not write what load_safetensors read");
  attend::Metadata metadata_again;
  attend::StateDict<double> again;
  const bool loaded =
      returns<attend::SafetensorsError>("load_safetensors<double> of a saved file", "attend::SafetensorsError",
                                        [&] { again = attend::load_safetensors<double>(files.copy, metadata_again); });
  expect(loaded, "load_safetensors<double> refused the file save_safetensors wrote");
  expect(metadata_again == metadata, "round trip: the metadata changed");
  expect(again.size() == dict.size(), "round trip: ", again.size(), " tensors instead of ", dict.size());
  for (const auto& [name, tensor] : dict) {
    const auto found = again.find(name);
    expect(found != again.end() && found->second.shape == tensor.shape, "round trip: tensor ", name,
           " is missing or has another shape");
    for (std::size_t i = 0; i < tensor.values.size(); ++i)
      expect(same_bits(found->second.values[i], tensor.values[i]), "round trip: tensor ", name, " value ", i,
             " changed");
  }
}

// 5a. multi_head_attention_from_torch: a module, or std::invalid_argument; a module runs on a small input.
void check_from_torch(const attend::StateDict<double>& dict) {
  for (Index heads : {1, 2}) {
    std::optional<attend::MultiHeadAttention<double>> attention;
    if (!returns<std::invalid_argument>("multi_head_attention_from_torch", "std::invalid_argument", [&] {
          attention.emplace(attend::multi_head_attention_from_torch<double>(dict, heads));
        }))
      continue;
    attention->eval();
    attend::Tensor3<double> queries(1, 2, attention->W_q().in_features());  // (1, 2, query_size)
    attend::Tensor3<double> keys(1, 3, attention->W_k().in_features());     // (1, 3, key_size)
    attend::Tensor3<double> values(1, 3, attention->W_v().in_features());   // (1, 3, value_size)
    queries.setConstant(0.5);
    keys.setConstant(-0.25);
    values.setConstant(1.0);
    attend::Tensor3<double> Y;
    const bool ran =
        returns<std::invalid_argument>("MultiHeadAttention from multi_head_attention_from_torch",
                                       "std::invalid_argument", [&] { Y = (*attention)(queries, keys, values); });
    expect(ran, "a MultiHeadAttention from multi_head_attention_from_torch refused inputs of its own sizes");
    expect(Y.dimension(0) == 1 && Y.dimension(1) == 2 && Y.dimension(2) == attention->num_hiddens(),
           "MultiHeadAttention from multi_head_attention_from_torch: output of the wrong shape");
  }
}

// 5b. A Linear shaped after the file's "weight" (rank 2, 1 to 64 rows and columns), with a bias when the file has
// one: load_state_dict accepts the file exactly when every other name is "bias" and that bias has (rows) values.
void check_load_state_dict(const attend::StateDict<double>& dict) {
  const auto weight = dict.find("weight");
  if (weight == dict.end() || weight->second.shape.size() != 2) return;
  const Index rows = weight->second.shape[0], cols = weight->second.shape[1];
  if (rows < 1 || rows > 64 || cols < 1 || cols > 64) return;
  const auto bias = dict.find("bias");
  attend::Generator generator(1);
  attend::Linear<double> linear(cols, rows, bias != dict.end(), generator);  // weight (rows, cols)
  const attend::Matrix<double> weight_before = linear.weight();
  const attend::Vector<double> bias_before = linear.bias();

  bool valid = bias == dict.end() || bias->second.shape == std::vector<Index>{rows};
  for (const auto& item : dict) valid = valid && (item.first == "weight" || item.first == "bias");
  const bool loaded = returns<std::invalid_argument>("Linear::load_state_dict", "std::invalid_argument",
                                                     [&] { linear.load_state_dict(dict); });
  expect(loaded == valid, "Linear::load_state_dict ", loaded ? "accepted" : "refused", " a file it should ",
         valid ? "accept" : "refuse");
  const attend::Matrix<double>& W = linear.weight();
  expect(W.rows() == rows && W.cols() == cols, "Linear::load_state_dict changed the weight's shape");
  for (Index i = 0; i < W.size(); ++i) {
    const double expected = loaded ? weight->second.values[static_cast<std::size_t>(i)] : weight_before.data()[i];
    expect(same_bits(W.data()[i], expected), "Linear::load_state_dict: weight value ", i,
           " is wrong after a load that ", loaded ? "returned" : "threw");
  }
  if (!loaded)
    expect(linear.bias().size() == bias_before.size() &&
               (bias_before.size() == 0 ||  // no bias: data() is null, which memcmp may not be given
                std::memcmp(linear.bias().data(), bias_before.data(), sizeof(double) * bias_before.size()) == 0),
           "Linear::load_state_dict changed the bias, then threw");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Files files;
  write_file(files.input, data, size);

  // 1. The three readers, each returning or throwing SafetensorsError, and agreeing.
  attend::SafetensorsHeader header;
  attend::Metadata metadata;
  attend::StateDict<float> as_float;
  attend::StateDict<double> as_double;
  const char* const error = "attend::SafetensorsError";
  const bool header_read = returns<attend::SafetensorsError>(
      "read_safetensors_header", error, [&] { header = attend::read_safetensors_header(files.input); });
  const bool float_read = returns<attend::SafetensorsError>(
      "load_safetensors<float>", error, [&] { as_float = attend::load_safetensors<float>(files.input); });
  const bool double_read = returns<attend::SafetensorsError>(
      "load_safetensors<double>", error, [&] { as_double = attend::load_safetensors<double>(files.input, metadata); });
  expect(header_read == float_read && float_read == double_read, "the readers disagree: read_safetensors_header ",
         header_read ? "returned" : "threw", ", load_safetensors<float> ", float_read ? "returned" : "threw",
         ", load_safetensors<double> ", double_read ? "returned" : "threw");
  if (!header_read) return 0;

  // 2., 3. What was read describes the file.
  check_header(header, size);
  expect(metadata == header.metadata, "load_safetensors: the metadata differs from the header's");
  check_loaded(as_float, header);
  check_loaded(as_double, header);
  for (const auto& [name, tensor] : as_double) {
    const auto& narrow = as_float.at(name).values;
    for (std::size_t i = 0; i < tensor.values.size(); ++i) {
      const float rounded = static_cast<float>(tensor.values[i]);
      expect(same_bits(narrow[i], rounded) || (std::isnan(narrow[i]) && std::isnan(rounded)), "tensor ", name,
             " value ", i, ": float ", narrow[i], " is not the double ", tensor.values[i], " rounded");
    }
  }

  // 4., 5.
  check_round_trip(files, as_double, metadata);
  check_from_torch(as_double);
  check_load_state_dict(as_double);
  return 0;
}
