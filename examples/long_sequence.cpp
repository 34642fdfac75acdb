// examples/long_sequence.cpp — self-attention over a long sequence, in memory linear in its length.
//
// The seed's computation forms, for every head, the (n, n) matrix of attention weights: at n = 16384 that is
// 16384^2 floats = 1 GiB per head. MultiHeadAttention in evaluation mode takes the tiled path instead
// (attention_path.hpp): blocks of 256 keys stream past blocks of 128 queries with a running softmax, and no (n, n)
// matrix exists. This program runs one forward pass of MultiHeadAttention<float> (d = 64, one head) on
// X (1, n, 64), prints the path taken, the time, and the process's peak resident memory (getrusage), then checks a
// few output rows against the direct formula softmax(q K^T / sqrt(d)) V computed row by row here, in double.
//
// usage: long_sequence [output_directory] [n]   (n defaults to 16384; the directory is unused)
#include <attend/attend.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

namespace {

using attend::Index;

// Peak resident memory of this process so far, in MiB (Linux reports ru_maxrss in KiB).
double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// Output row i of one-head attention, in double, from the projections: softmax(q_i K^T / sqrt(d)) V, then W_o.
std::vector<double> reference_row(const attend::Matrix<double>& Q, const attend::Matrix<double>& K,
                                  const attend::Matrix<double>& V, const attend::Matrix<double>& W_o, Index i) {
  const Index d = K.cols();
  Eigen::VectorXd scores = (K * Q.row(i).transpose()) / std::sqrt(static_cast<double>(d));  // (n)
  scores = (scores.array() - scores.maxCoeff()).exp();
  const Eigen::RowVectorXd head = (scores.transpose() * V) / scores.sum();  // (d)
  const Eigen::RowVectorXd out = head * W_o.transpose();                     // (d)
  return {out.data(), out.data() + out.size()};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Index n = argc > 2 ? std::stol(argv[2]) : 16384, d = 64;
    attend::MultiHeadAttention<float> attention(d, d, d, d, 1, 0.0f);
    attention.eval();
    attend::Generator generator(7);
    attend::Tensor3<float> X(1, n, d);  // (1, n, d)
    for (Index i = 0; i < X.size(); ++i) X.data()[i] = generator.uniform(-1.0f, 1.0f);

    const double before = peak_rss_mib();
    const auto start = std::chrono::steady_clock::now();
    const attend::Tensor3<float> Y = attention(X, X, X);  // (1, n, d)
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool tiled = attention.last_call_tiled();
    std::cout << "MultiHeadAttention<float>, one head, d = " << d << ", n = " << n << ", " << attend::num_threads()
              << " thread(s)\n"
              << "path: " << (tiled ? "tiled" : "direct") << " (the (n, n) weights would take "
              << static_cast<double>(n) * static_cast<double>(n) * 4.0 / (1 << 20) << " MiB)\n"
              << "forward pass: " << seconds << " s\n"
              << "peak resident memory of the process: " << peak_rss_mib() << " MiB (" << before
              << " MiB before the call)\n";

    // Check rows against the formula in double: first, middle, last.
    const auto to_double = [](const attend::Matrix<float>& W) { return attend::Matrix<double>(W.cast<double>()); };
    const attend::Matrix<double> Xd = Eigen::Map<const attend::Matrix<float>>(X.data(), n, d).cast<double>();  // (n, d)
    const attend::Matrix<double> Q = Xd * to_double(attention.W_q().weight()).transpose();
    const attend::Matrix<double> K = Xd * to_double(attention.W_k().weight()).transpose();
    const attend::Matrix<double> V = Xd * to_double(attention.W_v().weight()).transpose();
    double worst = 0;
    for (const Index i : {Index(0), n / 2, n - 1}) {
      const std::vector<double> expected = reference_row(Q, K, V, to_double(attention.W_o().weight()), i);
      for (Index j = 0; j < d; ++j)
        worst = std::max(worst, std::abs(static_cast<double>(Y(0, i, j)) - expected[static_cast<std::size_t>(j)]) /
                                    std::max(1e-3, std::abs(expected[static_cast<std::size_t>(j)])));
    }
    std::cout << "rows 0, n/2, n-1 against softmax(q K^T / sqrt(d)) V W_o^T in double: largest relative difference "
              << worst << '\n';
    return worst < 1e-3 ? EXIT_SUCCESS : EXIT_FAILURE;
  } catch (const std::exception& error) {
    std::cerr << "long_sequence: " << error.what() << '\n';
    return EXIT_FAILURE;
  }
}
