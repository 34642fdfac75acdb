// Self-test of the test support: the fixture reader (tests/support/fixture.hpp) on real golden
// files and on malformed ones, and the Near matcher (tests/support/matchers.hpp).
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "support/fixture.hpp"
#include "support/matchers.hpp"

using attend::Index;
using Catch::Matchers::Contains;

namespace {

using Shape = std::vector<Index>;

// Writes <temp dir>/<name>.txt and returns the directory.
// A directory of this process's own, removed when the program ends: ctest runs this program once per
// instruction-set level, side by side, and each writes files of the same names.
struct TempDirectory {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("attend_test_fixture_" + std::to_string(std::random_device{}()));
  ~TempDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

std::string write_temp_fixture(const std::string& name, const std::string& text) {
  static const TempDirectory own;
  std::filesystem::create_directories(own.path);
  std::ofstream(own.path / (name + ".txt")) << text;
  return own.path.string();
}

}  // namespace

TEST_CASE("Every golden file parses", "[fixture]") {
  int files = 0;
  for (const auto& file : std::filesystem::directory_iterator(ATTEND_GOLDEN_DIR)) {
    if (file.path().extension() != ".txt") continue;
    INFO(file.path().string());
    const std::string case_name = file.path().stem().string();
    CHECK_NOTHROW(attend_test::Fixture(case_name));
    ++files;
  }
  CHECK(files >= 30);
}

TEST_CASE("Fixture reads transpose_qkv in row-major order", "[fixture]") {
  const attend_test::Fixture fx("transpose_qkv");
  CHECK(fx.has("X"));
  CHECK_FALSE(fx.has("missing"));
  CHECK(fx.shape("X") == Shape{2, 3, 12});
  CHECK(fx.shape("output") == Shape{8, 3, 3});
  CHECK(fx.shape("num_heads") == Shape{});
  CHECK(fx.index("num_heads") == 4);
  CHECK(fx.scalar("num_heads") == 4.0);

  // transpose_qkv's definition, checked on the values read: head h of batch row b is
  // row b * num_heads + h and holds features h * 3 .. h * 3 + 2.
  const auto X = fx.tensor3<double>("X");
  const auto output = fx.tensor3<double>("output");
  for (Index b = 0; b < 2; ++b)
    for (Index h = 0; h < 4; ++h)
      for (Index s = 0; s < 3; ++s)
        for (Index j = 0; j < 3; ++j) CHECK(output(b * 4 + h, s, j) == X(b, s, h * 3 + j));

  REQUIRE_THAT(fx.tensor3<double>("inverse"), attend_test::Near(X));
}

TEST_CASE("Fixture reads the chapter's self-attention example", "[fixture]") {
  const attend_test::Fixture fx("mha_self_seed");
  CHECK(fx.index("num_heads") == 5);
  CHECK(fx.index("bias") == 0);
  CHECK(fx.index_vector("valid_lens") == std::vector<Index>{3, 2});
  CHECK(fx.shape("X") == Shape{2, 4, 100});
  CHECK(fx.shape("output") == Shape{2, 4, 100});
  CHECK(fx.shape("attention_weights") == Shape{10, 4, 4});
  const auto W_o = fx.matrix<float>("W_o.weight");
  CHECK(W_o.rows() == 100);
  CHECK(W_o.cols() == 100);
  // PyTorch's initialisation: uniform in +-1/sqrt(fan_in) = +-0.1.
  CHECK(W_o.cwiseAbs().maxCoeff() <= 0.1f);
  CHECK_FALSE(fx.has("W_o.bias"));

  // Batch row 1 has 2 valid keys: keys 2 and 3 get no weight in any head or query.
  const auto weights = fx.tensor3<double>("attention_weights");
  for (Index h = 0; h < 5; ++h)
    for (Index q = 0; q < 4; ++q) {
      CHECK(weights(5 + h, q, 2) == 0.0);
      CHECK(weights(5 + h, q, 3) == 0.0);
      CHECK(weights(5 + h, q, 0) + weights(5 + h, q, 1) == Approx(1.0).epsilon(1e-15));
    }
}

TEST_CASE("Fixture reads integers, matrices and vectors", "[fixture]") {
  const attend_test::Fixture fx("mha_h4_bias_2d");
  CHECK(fx.index("bias") == 1);
  attend::Matrix<Index> expected(2, 3);
  expected << 1, 2, 7, 0, 4, 12;
  CHECK(fx.index_matrix("valid_lens") == expected);
  const auto b = fx.vector<double>("W_q.bias");
  CHECK(b.size() == 12);
  const auto W_k = fx.matrix<double>("W_k.weight");
  CHECK(W_k.rows() == 12);
  CHECK(W_k.cols() == 6);

  const attend_test::Fixture softmax("masked_softmax_book_1d");
  CHECK(softmax.index_vector("valid_lens") == std::vector<Index>{2, 3});
  const auto out = softmax.tensor3<double>("output");
  CHECK(out(0, 1, 2) == 0.0);
  CHECK(out(1, 0, 3) == 0.0);
  CHECK(out(1, 0, 2) > 0.0);
}

TEST_CASE("Fixture reports what is wrong", "[fixture]") {
  CHECK_THROWS_WITH(attend_test::Fixture("no_such_case"), Contains("no_such_case.txt") && Contains("cannot open"));

  const attend_test::Fixture fx("transpose_qkv");
  CHECK_THROWS_AS(fx.tensor3<double>("Y"), std::runtime_error);
  CHECK_THROWS_WITH(fx.tensor3<double>("Y"),
                    Contains("transpose_qkv.txt") && Contains("'Y'") && Contains("no such entry"));
  CHECK_THROWS_WITH(fx.matrix<double>("X"), Contains("'X'") && Contains("expected ndim 2, got ndim 3"));
  CHECK_THROWS_WITH(fx.vector<float>("num_heads"), Contains("expected ndim 1, got ndim 0"));
  CHECK_THROWS_WITH(fx.index("X"), Contains("expected ndim 0"));
  CHECK_THROWS_WITH(fx.index_vector("X"), Contains("expected ndim 1"));
  CHECK_THROWS_WITH(fx.index_matrix("X"), Contains("expected ndim 2"));
  CHECK_THROWS_WITH(fx.scalar("output"), Contains("expected ndim 0"));

  const attend_test::Fixture floats("dot_product_1d");
  CHECK_THROWS_WITH(floats.index_matrix("queries"), Contains("expected ndim 2"));
  const auto dir = write_temp_fixture("float_as_index", "x 0\n1.5\nv 1 2\n1 2.0\n");
  const attend_test::Fixture f(std::string("float_as_index"), dir);
  CHECK(f.scalar("x") == 1.5);
  CHECK_THROWS_WITH(f.index("x"), Contains("expected integer values"));
  CHECK_THROWS_WITH(f.index_vector("v"), Contains("expected integer values"));
}

TEST_CASE("Fixture rejects malformed files", "[fixture]") {
  struct Bad {
    const char* name;
    const char* text;
    const char* message;
  };
  const Bad cases[] = {
      {"bad_empty", "# only a comment\n\n", "no entries"},
      {"bad_short", "# c\nX 2 2 2\n1 2\n3\n", "ends after 3 of its 4 values"},
      {"bad_long", "X 1 2\n1 2 3\n", "more than its 2 values"},
      {"bad_value", "X 1 2\n1 zwei\n", "bad value 'zwei'"},
      {"bad_header", "X\n1\n", "expected a header"},
      {"bad_ndim", "X 2 3\n1 2 3\n", "has ndim 2 but 1 dimensions"},
      {"bad_dim", "X 1 -2\n", "bad dimension '-2'"},
      {"bad_twice", "X 0\n1\nX 0\n2\n", "appears twice"},
  };
  for (const auto& bad : cases) {
    INFO(bad.name);
    const auto dir = write_temp_fixture(bad.name, bad.text);
    CHECK_THROWS_WITH(attend_test::Fixture(std::string(bad.name), dir),
                      Contains(std::string(bad.name) + ".txt") && Contains(bad.message));
  }

  // Comments and blank lines may sit anywhere; values may span lines; nan and inf are values.
  const auto dir = write_temp_fixture("good_layout", "# c\nX 3 1 2 2\n\n1 2\n# between\n3\n4\ns 0\nnan\nz 1 0\n");
  const attend_test::Fixture good(std::string("good_layout"), dir);
  const auto X = good.tensor3<float>("X");
  CHECK(X(0, 0, 0) == 1.0f);
  CHECK(X(0, 0, 1) == 2.0f);
  CHECK(X(0, 1, 0) == 3.0f);
  CHECK(X(0, 1, 1) == 4.0f);
  CHECK(std::isnan(good.scalar("s")));
  CHECK(good.vector<double>("z").size() == 0);
  CHECK(good.names() == std::vector<std::string>{"X", "s", "z"});
}

TEST_CASE("Fixture reads infinities, as the modern fixtures write them", "[fixture]") {
  // make_modern_fixtures.py writes a bias that hides a key, and the lse of a row that sees no key, as -inf.
  const double inf = std::numeric_limits<double>::infinity();
  const auto dir = write_temp_fixture("infinities", "b 3 1 2 2\n-inf 0.5\ninf -1\nn 1 2\n1 -inf\n");
  const attend_test::Fixture f(std::string("infinities"), dir);
  const auto b = f.tensor3<double>("b");
  CHECK(b(0, 0, 0) == -inf);
  CHECK(b(0, 0, 1) == 0.5);
  CHECK(b(0, 1, 0) == inf);
  CHECK(b(0, 1, 1) == -1.0);
  CHECK(f.tensor3<float>("b")(0, 0, 0) == -std::numeric_limits<float>::infinity());  // still -inf in float
  CHECK_THROWS_WITH(f.index_vector("n"), Contains("expected integer values"));  // an infinity is not an integer

  // The real files: sdpa_bias_heads hides keys by a bias of -inf, sdpa_zero_rows has rows of lse -inf.
  const attend_test::Fixture bias_heads("sdpa_bias_heads"), zero_rows("sdpa_zero_rows");
  const auto count = [](const attend::Tensor3<double>& X, double value) {
    Index n = 0;
    for (Index i = 0; i < X.size(); ++i) n += X.data()[i] == value;
    return n;
  };
  CHECK(count(bias_heads.tensor3<double>("bias"), -inf) > 0);
  CHECK(count(zero_rows.tensor3<double>("lse"), -inf) == 8);  // B=2, query rows 0 and 1, H=2
}

TEST_CASE("Near passes on identical tensors", "[matchers]") {
  const attend_test::Fixture fx("mha_h2_bias_1d");
  const auto output = fx.tensor3<double>("output");
  REQUIRE_THAT(output, attend_test::Near(output, attend_test::tolerance<double>()));
  REQUIRE_THAT(output, attend_test::Near(output));
  const auto W_q = fx.matrix<double>("W_q.weight");
  REQUIRE_THAT(W_q, attend_test::Near(W_q));
  const auto b_q = fx.vector<double>("W_q.bias");
  REQUIRE_THAT(b_q, attend_test::Near(b_q));

  // A float copy of the float64 fixture agrees with it at float tolerance, not at double's.
  const auto output_f = fx.tensor3<float>("output");
  REQUIRE_THAT(output_f, attend_test::Near(output, attend_test::tolerance<float>()));
  REQUIRE_THAT(fx.matrix<float>("W_q.weight"), attend_test::Near(W_q, attend_test::tolerance<float>()));
  REQUIRE_THAT(fx.vector<float>("W_q.bias"), attend_test::Near(b_q, attend_test::tolerance<float>()));
  const attend::Tensor3<double> output_d = output_f.cast<double>();
  REQUIRE_THAT(output_d, !attend_test::Near(output, attend_test::tolerance<double>()));
}

TEST_CASE("Near fails on a shape mismatch", "[matchers]") {
  attend::Tensor3<double> a(2, 3, 4), e(2, 4, 3);
  a.setZero();
  e.setZero();
  const auto near = attend_test::Near(e);
  CHECK_FALSE(near.match(a));
  CHECK_THAT(near.describe(), Contains("actual (2, 3, 4)") && Contains("expected (2, 4, 3)"));

  attend::Matrix<float> m = attend::Matrix<float>::Zero(2, 3);
  const auto near_m = attend_test::Near(attend::Matrix<double>::Zero(3, 2).eval(), attend_test::tolerance<float>());
  CHECK_FALSE(near_m.match(m));
  CHECK_THAT(near_m.describe(), Contains("actual (2, 3)") && Contains("expected (3, 2)"));

  attend::Vector<double> v = attend::Vector<double>::Zero(3);
  const auto near_v = attend_test::Near(attend::Vector<double>::Zero(4).eval());
  CHECK_FALSE(near_v.match(v));
  CHECK_THAT(near_v.describe(), Contains("actual (3,)") && Contains("expected (4,)"));
}

TEST_CASE("Near fails on NaN and infinity", "[matchers]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  attend::Tensor3<double> e(1, 2, 2);
  e.setValues({{{0.0, 1.0}, {2.0, 3.0}}});

  attend::Tensor3<double> a = e;
  a(0, 1, 0) = nan;
  const auto near = attend_test::Near(e);
  CHECK_FALSE(near.match(a));
  CHECK_THAT(near.describe(),
             Contains("1 of 4 elements differ") && Contains("(0, 1, 0)") && Contains("actual is not finite"));

  a = e;
  a(0, 0, 1) = inf;
  CHECK_FALSE(near.match(a));

  // Non-finite values that the expected tensor has too are a match.
  attend::Tensor3<double> e2 = e;
  e2(0, 0, 0) = nan;
  e2(0, 1, 1) = -inf;
  attend::Tensor3<double> a2 = e2;
  CHECK(attend_test::Near(e2).match(a2));
  a2(0, 1, 1) = inf;
  CHECK_FALSE(attend_test::Near(e2).match(a2));
  a2 = e2;
  a2(0, 0, 0) = 0.0;
  const auto near2 = attend_test::Near(e2);
  CHECK_FALSE(near2.match(a2));
  CHECK_THAT(near2.describe(), Contains("expected is not finite"));
}

TEST_CASE("Near applies abs + rel * |e|", "[matchers]") {
  attend::Vector<double> e(3);
  e << 0.0, 1000.0, -2.0;
  const attend_test::Tolerance<double> tol{1e-6, 1e-3};
  attend::Vector<double> a = e;
  a(0) = 0.9e-3;           // within abs
  a(1) = 1000.0 + 1.9e-3;  // within abs + rel * 1000 = 2e-3
  CHECK(attend_test::Near(e, tol).match(a));
  a(1) = 1000.0 + 2.1e-3;
  a(2) = -2.0 - 1.5e-3;
  const auto near = attend_test::Near(e, tol);
  CHECK_FALSE(near.match(a));
  CHECK_THAT(near.describe(), Contains("2 of 3 elements differ") && Contains("the first at (1,)"));
}
