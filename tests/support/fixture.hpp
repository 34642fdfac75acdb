// tests/support/fixture.hpp — reads a golden fixture written by tests/reference/make_fixtures.py.
//
// A fixture is tests/golden/<case>.txt, a plain text file of named tensors:
//
//   # <case>: <description>; made by tests/reference/make_fixtures.py
//   <name> <ndim> <d0> <d1> ...        one header line per entry
//   <values>                           prod(d) values (1 when ndim is 0), row-major, over one or more lines
//
// Lines whose first non-blank character is '#' and blank lines are ignored. The values of an
// entry start on the line after its header and end at the end of a line. Floats are written
// exactly (17 significant digits), integers as integers.
//
//   attend_test::Fixture fx("mha_h2_bias_1d");
//   auto queries = fx.tensor3<float>("queries");          // (batch, steps, features)
//   auto W_q = fx.matrix<double>("W_q.weight");           // (out, in), as PyTorch stores it
//   auto heads = fx.index("num_heads");
//
// Every failure — a missing or malformed file, a missing entry, a wrong ndim, a float where an
// integer is wanted — throws std::runtime_error naming the file, the entry and what was wrong.
#pragma once

#include <attend/tensor.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifndef ATTEND_GOLDEN_DIR
#error "ATTEND_GOLDEN_DIR must be defined as a string literal naming tests/golden (a compile definition)"
#endif

namespace attend_test {

class Fixture {
 public:
  // Reads ATTEND_GOLDEN_DIR "/" + case_name + ".txt".
  explicit Fixture(const std::string& case_name) : Fixture(case_name, ATTEND_GOLDEN_DIR) {}

  // Reads directory + "/" + case_name + ".txt".
  Fixture(const std::string& case_name, const std::string& directory)
      : path_(directory + "/" + case_name + ".txt") {
    std::ifstream in(path_);
    if (!in) fail("cannot open the file");
    parse(in);
  }

  // The file this fixture was read from.
  const std::string& path() const { return path_; }

  // The entry names, in the order of the file.
  const std::vector<std::string>& names() const { return order_; }

  bool has(const std::string& name) const { return entries_.count(name) != 0; }

  std::vector<attend::Index> shape(const std::string& name) const { return entry(name).shape; }

  // ndim 3: (d0, d1, d2), row-major like the PyTorch tensor it was written from.
  template <class Scalar>
  attend::Tensor3<Scalar> tensor3(const std::string& name) const {
    const Entry& e = entry(name, 3);
    attend::Tensor3<Scalar> out(e.shape[0], e.shape[1], e.shape[2]);
    fill(e, out.data());
    return out;
  }

  // ndim 2: (d0, d1), row-major.
  template <class Scalar>
  attend::Matrix<Scalar> matrix(const std::string& name) const {
    const Entry& e = entry(name, 2);
    attend::Matrix<Scalar> out(e.shape[0], e.shape[1]);
    fill(e, out.data());
    return out;
  }

  // ndim 1: (d0).
  template <class Scalar>
  attend::Vector<Scalar> vector(const std::string& name) const {
    const Entry& e = entry(name, 1);
    attend::Vector<Scalar> out(e.shape[0]);
    fill(e, out.data());
    return out;
  }

  // ndim 2, integer values (per-query valid lengths).
  attend::Matrix<attend::Index> index_matrix(const std::string& name) const {
    const Entry& e = integer_entry(name, 2);
    attend::Matrix<attend::Index> out(e.shape[0], e.shape[1]);
    for (std::size_t i = 0; i < e.integers.size(); ++i) out.data()[i] = e.integers[i];
    return out;
  }

  // ndim 1, integer values (per-batch valid lengths).
  std::vector<attend::Index> index_vector(const std::string& name) const {
    return integer_entry(name, 1).integers;
  }

  // ndim 0, an integer (num_heads, kernel_size, ...).
  attend::Index index(const std::string& name) const { return integer_entry(name, 0).integers[0]; }

  // ndim 0, any number.
  double scalar(const std::string& name) const { return entry(name, 0).values[0]; }

 private:
  struct Entry {
    std::vector<attend::Index> shape;
    std::vector<double> values;            // every value, row-major
    std::vector<attend::Index> integers;   // the same values, when every one is written as an integer
    bool integral = true;
  };

  std::string path_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("fixture " + path_ + ": " + what);
  }
  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    throw std::runtime_error("fixture " + path_ + ", entry '" + name + "': " + what);
  }

  static std::string shape_string(const std::vector<attend::Index>& shape) {
    std::ostringstream out;
    out << '(';
    for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
    if (shape.size() == 1) out << ',';
    out << ')';
    return out.str();
  }

  const Entry& entry(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      std::string known;
      for (const auto& n : order_) known += (known.empty() ? "" : ", ") + n;
      fail(name, "no such entry (the file has: " + known + ")");
    }
    return it->second;
  }

  const Entry& entry(const std::string& name, std::size_t ndim) const {
    const Entry& e = entry(name);
    if (e.shape.size() != ndim) {
      fail(name, "expected ndim " + std::to_string(ndim) + ", got ndim " + std::to_string(e.shape.size()) +
                     " with shape " + shape_string(e.shape));
    }
    return e;
  }

  const Entry& integer_entry(const std::string& name, std::size_t ndim) const {
    const Entry& e = entry(name, ndim);
    if (!e.integral) fail(name, "expected integer values, got floating-point values");
    return e;
  }

  template <class Scalar>
  static void fill(const Entry& e, Scalar* out) {
    for (std::size_t i = 0; i < e.values.size(); ++i) out[i] = static_cast<Scalar>(e.values[i]);
  }

  // Whole-token number parsing: false unless all of `token` is consumed.
  static bool parse_double(const std::string& token, double& value) {
    const char* begin = token.c_str();
    char* end = nullptr;
    errno = 0;
    value = std::strtod(begin, &end);
    // ERANGE on underflow still gives the nearest representable value (a denormal or 0).
    return end != begin && *end == '\0' && !(errno == ERANGE && std::abs(value) > 1.0);
  }
  static bool parse_integer(const std::string& token, attend::Index& value) {
    const char* begin = token.c_str();
    char* end = nullptr;
    errno = 0;
    const long long parsed = std::strtoll(begin, &end, 10);
    if (end == begin || *end != '\0' || errno == ERANGE) return false;
    value = static_cast<attend::Index>(parsed);
    return true;
  }

  static bool skipped(const std::string& line) {
    const auto first = line.find_first_not_of(" \t\r");
    return first == std::string::npos || line[first] == '#';
  }

  void parse(std::istream& in) {
    std::string line;
    int line_number = 0;
    auto where = [&] { return "line " + std::to_string(line_number) + ": "; };

    while (std::getline(in, line)) {
      ++line_number;
      if (skipped(line)) continue;

      // Header: <name> <ndim> <d0> ... <d(ndim-1)>
      std::istringstream header(line);
      std::string name, token;
      header >> name;
      std::vector<std::string> fields;
      while (header >> token) fields.push_back(token);
      attend::Index ndim = 0;
      if (fields.empty() || !parse_integer(fields[0], ndim) || ndim < 0) {
        fail(where() + "expected a header '<name> <ndim> <d0> ...', got '" + line + "'");
      }
      if (fields.size() != static_cast<std::size_t>(ndim) + 1) {
        fail(where() + "header of '" + name + "' has ndim " + std::to_string(ndim) + " but " +
             std::to_string(fields.size() - 1) + " dimensions");
      }
      if (entries_.count(name)) fail(where() + "entry '" + name + "' appears twice");

      Entry e;
      std::size_t count = 1;
      for (attend::Index d = 0; d < ndim; ++d) {
        attend::Index size = 0;
        if (!parse_integer(fields[static_cast<std::size_t>(d) + 1], size) || size < 0) {
          fail(where() + "header of '" + name + "' has a bad dimension '" + fields[static_cast<std::size_t>(d) + 1] + "'");
        }
        e.shape.push_back(size);
        count *= static_cast<std::size_t>(size);
      }

      // Values: exactly `count` of them, on the following lines.
      e.values.reserve(count);
      while (e.values.size() < count) {
        if (!std::getline(in, line)) {
          fail("entry '" + name + "' " + shape_string(e.shape) + " ends after " + std::to_string(e.values.size()) +
               " of its " + std::to_string(count) + " values (end of file)");
        }
        ++line_number;
        if (skipped(line)) continue;
        std::istringstream values(line);
        while (values >> token) {
          if (e.values.size() == count) {
            fail(where() + "entry '" + name + "' " + shape_string(e.shape) + " has more than its " +
                 std::to_string(count) + " values");
          }
          double value = 0;
          if (!parse_double(token, value)) fail(where() + "entry '" + name + "' has a bad value '" + token + "'");
          e.values.push_back(value);
          attend::Index integer = 0;
          if (e.integral && parse_integer(token, integer)) {
            e.integers.push_back(integer);
          } else {
            e.integral = false;
          }
        }
      }
      if (!e.integral) e.integers.clear();
      entries_.emplace(name, std::move(e));
      order_.push_back(name);
    }
    if (order_.empty()) fail("no entries");
  }
};

}  // namespace attend_test
