// Is attend's multi-head self-attention faster than libtorch's, on one core, in float, in evaluation mode?
//
//   ./build/bench/bench_vs_libtorch --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// The same weights and inputs (batch, n, d) with h heads, bias off, no mask, through four forward passes:
//   attend_direct  attend::MultiHeadAttention: projections, the (batch * h, n, n) weights, W_o (the d2l route)
//   attend_tiled   the same projections and W_o (Linear::apply) around detail::flash_attention_heads, the tiled
//                  online-softmax kernel: no (n, n) matrix
//   torch_mha      torch::nn::MultiheadAttention (in_proj_weight = [W_q; W_k; W_v], out_proj = W_o, bias off), on
//                  its native (n, batch, d) layout, need_weights = false
//   torch_fused    at::_native_multi_head_attention, the fused kernel behind nn.MultiheadAttention's fast path, on
//                  (batch, n, d); it requires biases: zeros
// plus a machine ceiling measured in the same run: single-core sgemm 1024^3 by Eigen and by OpenBLAS (cblas_sgemm).
// Every thread count is 1: this target is built without OpenMP, so Eigen is serial; torch::set_num_threads(1)
// and openblas_set_num_threads(1) (libtorch's GEMMs are OpenBLAS's here). OPENBLAS_CORETYPE is read and printed,
// never set: it chooses OpenBLAS's kernels at load time (Haswell = AVX2).
//
// FLOPs of one forward pass: 8 b n d^2 (four projections) + 4 b n^2 d (scores and weights @ V). The benchmarks of a
// shape are registered next to each other and, unless the command line says otherwise, their repetitions are
// randomly interleaved (--benchmark_enable_random_interleaving), so the machine's load falls on all of them alike.
// After the runs a table gives, per shape, the median (or only) time of each, GFLOP/s, the share of the sgemm
// ceiling, and torch's best time over attend's. Before them, attend's and libtorch's outputs are compared once.
#include <attend/detail/flash_attention.hpp>
#include <attend/linear.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#ifdef ATTEND_BENCH_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using attend::Index;
using attend::Matrix;
using attend::Tensor3;

struct Shape {
  Index batch, n, d, heads;
};

// The shapes asked about: the seed's, a mid-size batch, and long sequences up to n = 8192.
const Shape shapes[] = {{2, 4, 100, 5},    {8, 128, 256, 8},  {1, 1024, 256, 8},
                        {1, 2048, 64, 1},  {1, 4096, 256, 8}, {1, 8192, 64, 1}};

std::string shape_name(const Shape& s) {
  return attend::detail::message("b", s.batch, "_n", s.n, "_d", s.d, "_h", s.heads);
}

double forward_flops(const Shape& s) {
  const double b = s.batch, n = s.n, d = s.d;
  return 8 * b * n * d * d + 4 * b * n * n * d;
}

torch::Tensor to_torch(const float* data, std::vector<int64_t> sizes) {
  return torch::from_blob(const_cast<float*>(data), sizes, torch::kFloat32).clone();
}

// One shape's weights, inputs and the four ways to run it.
class Case {
 public:
  explicit Case(const Shape& s)
      : s_(s),
        generator_(42),
        attention_(s.d, s.d, s.d, s.d, s.heads, 0.0f, false, generator_),
        X_(s.batch, s.n, s.d),
        mha_(torch::nn::MultiheadAttentionOptions(s.d, s.heads).bias(false)) {
    attention_.eval();
    for (Index i = 0; i < X_.size(); ++i) X_.data()[i] = generator_.uniform(-1.0f, 1.0f);

    torch::NoGradGuard no_grad;
    const auto weight = [&](attend::Linear<float>& layer) { return to_torch(layer.weight().data(), {s.d, s.d}); };
    in_proj_ = torch::cat({weight(attention_.W_q()), weight(attention_.W_k()), weight(attention_.W_v())}, 0);
    out_proj_ = weight(attention_.W_o());
    mha_->in_proj_weight.copy_(in_proj_);
    mha_->out_proj->weight.copy_(out_proj_);
    mha_->eval();
    in_proj_bias_ = torch::zeros({3 * s.d});
    out_proj_bias_ = torch::zeros({s.d});
    X_batch_first_ = to_torch(X_.data(), {s.batch, s.n, s.d});
    X_seq_first_ = X_batch_first_.transpose(0, 1).contiguous();  // (n, batch, d)
  }

  const Shape& shape() const { return s_; }

  // (batch, n, d), attend's MultiHeadAttention as it is.
  Tensor3<float> attend_direct() { return attention_(X_, X_, X_); }

  // (batch, n, d): projections, the tiled kernel, W_o.
  Tensor3<float> attend_tiled() {
    const Index rows = s_.batch * s_.n;
    const auto X = attend::detail::as_matrix(X_);  // (batch * n, d)
    Matrix<float> Q(rows, s_.d), K(rows, s_.d), V(rows, s_.d), heads(rows, s_.d);  // each (batch * n, heads * d/h)
    attention_.W_q().apply(X, Q);
    attention_.W_k().apply(X, K);
    attention_.W_v().apply(X, V);
    attend::detail::flash_attention_heads<float>(Q, K, V, s_.batch, s_.n, s_.n, s_.heads, attend::Mask{}, heads);
    Tensor3<float> Y(s_.batch, s_.n, s_.d);  // (batch, n, d)
    attention_.W_o().apply(heads, attend::detail::as_matrix(Y));
    return Y;
  }

  // (n, batch, d), libtorch's module on its own layout.
  torch::Tensor torch_mha() {
    return std::get<0>(mha_->forward(X_seq_first_, X_seq_first_, X_seq_first_, {}, /*need_weights=*/false));
  }

  // (batch, n, d), the fused operator.
  torch::Tensor torch_fused() {
    return std::get<0>(at::_native_multi_head_attention(X_batch_first_, X_batch_first_, X_batch_first_, s_.d,
                                                        s_.heads, in_proj_, in_proj_bias_, out_proj_, out_proj_bias_,
                                                        {}, /*need_weights=*/false));
  }

 private:
  Shape s_;
  attend::Generator generator_;
  attend::MultiHeadAttention<float> attention_;
  Tensor3<float> X_;  // (batch, n, d)
  torch::nn::MultiheadAttention mha_;
  torch::Tensor in_proj_, out_proj_, in_proj_bias_, out_proj_bias_;  // (3d, d), (d, d), (3d), (d)
  torch::Tensor X_batch_first_, X_seq_first_;                        // (batch, n, d), (n, batch, d)
};

// max |a - t| / max |t|, over all elements; a and t (batch, n, d).
double relative_difference(const Tensor3<float>& a, const torch::Tensor& t) {
  const torch::Tensor ours = to_torch(a.data(), {a.dimension(0), a.dimension(1), a.dimension(2)});
  return (ours - t).abs().max().item<double>() / t.abs().max().item<double>();
}

void check_agreement(std::vector<std::unique_ptr<Case>>& cases) {
  c10::InferenceMode inference;
  std::printf("attend vs libtorch, max |attend - torch| / max |torch| over the output:\n");
  for (auto& c : cases) {
    const torch::Tensor mha = c->torch_mha().transpose(0, 1).contiguous(), fused = c->torch_fused();
    const Tensor3<float> direct = c->attend_direct(), tiled = c->attend_tiled();
    std::printf("  %-18s direct vs torch_mha %.2e, tiled vs torch_mha %.2e, torch_fused vs torch_mha %.2e\n",
                shape_name(c->shape()).c_str(), relative_difference(direct, mha), relative_difference(tiled, mha),
                (fused - mha).abs().max().item<double>() / mha.abs().max().item<double>());
  }
  std::printf("\n");
}

void set_counters(benchmark::State& state, double flops) {
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// Registers fn under name, timed in wall-clock microseconds.
template <class Fn>
void add(const std::string& name, Fn fn) {
  benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void register_shape(Case* c) {
  const std::string prefix = shape_name(c->shape()) + "/";
  const double flops = forward_flops(c->shape());
  add((prefix + "attend_direct").c_str(), [c, flops](benchmark::State& state) {
    for (auto _ : state) {
      Tensor3<float> Y = c->attend_direct();
      benchmark::DoNotOptimize(Y.data());
    }
    set_counters(state, flops);
  });
  add((prefix + "attend_tiled").c_str(), [c, flops](benchmark::State& state) {
    for (auto _ : state) {
      Tensor3<float> Y = c->attend_tiled();
      benchmark::DoNotOptimize(Y.data());
    }
    set_counters(state, flops);
  });
  add((prefix + "torch_mha").c_str(), [c, flops](benchmark::State& state) {
    c10::InferenceMode inference;
    for (auto _ : state) {
      torch::Tensor Y = c->torch_mha();
      benchmark::DoNotOptimize(Y.data_ptr());
    }
    set_counters(state, flops);
  });
  add((prefix + "torch_fused").c_str(), [c, flops](benchmark::State& state) {
    c10::InferenceMode inference;
    for (auto _ : state) {
      torch::Tensor Y = c->torch_fused();
      benchmark::DoNotOptimize(Y.data_ptr());
    }
    set_counters(state, flops);
  });
}

// The machine's ceiling: C = A B, all (1024, 1024) float, one core.
constexpr Index gemm_size = 1024;
const double gemm_flops = 2.0 * gemm_size * gemm_size * gemm_size;

void register_sgemm() {
  add("sgemm_1024/eigen", [](benchmark::State& state) {
    const Eigen::MatrixXf A = Eigen::MatrixXf::Random(gemm_size, gemm_size), B = Eigen::MatrixXf::Random(gemm_size, gemm_size);
    Eigen::MatrixXf C(gemm_size, gemm_size);
    for (auto _ : state) {
      C.noalias() = A * B;
      benchmark::DoNotOptimize(C.data());
    }
    set_counters(state, gemm_flops);
  });
#ifdef ATTEND_BENCH_OPENBLAS
  add("sgemm_1024/openblas", [](benchmark::State& state) {
    const Eigen::MatrixXf A = Eigen::MatrixXf::Random(gemm_size, gemm_size), B = Eigen::MatrixXf::Random(gemm_size, gemm_size);
    Eigen::MatrixXf C(gemm_size, gemm_size);
    const int n = static_cast<int>(gemm_size);
    for (auto _ : state) {
      cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
      benchmark::DoNotOptimize(C.data());
    }
    set_counters(state, gemm_flops);
  });
#endif
}

// The console output as usual, then a table built from the medians (or the single runs).
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      const bool single = run.run_type == Run::RT_Iteration && run.repetitions <= 1;
      if (!median && !single) continue;
      seconds_[run.run_name.function_name] =
          run.GetAdjustedRealTime() * benchmark::GetTimeUnitMultiplier(benchmark::kSecond) /
          benchmark::GetTimeUnitMultiplier(run.time_unit);
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    double ceiling = 0;
    std::printf("\nsingle-core sgemm 1024^3 (the ceiling below is the faster):");
    for (const char* library : {"eigen", "openblas"}) {
      const double t = time(std::string("sgemm_1024/") + library);
      if (t <= 0) continue;
      ceiling = std::max(ceiling, gemm_flops / t / 1e9);
      std::printf("  %s %.1f GFLOP/s", library, gemm_flops / t / 1e9);
    }
    std::printf("\n\n%-18s %12s %12s %12s %12s | %8s %8s | %18s %18s %18s %18s\n", "(batch,n,d,heads)",
                "direct us", "tiled us", "torch_mha us", "fused us", "T/direct", "T/tiled", "direct GF/s (%sg)",
                "tiled GF/s (%sg)", "torch_mha GF/s (%sg)", "fused GF/s (%sg)");
    for (const Shape& s : shapes) {
      const std::string name = shape_name(s);
      const double direct = time(name + "/attend_direct"), tiled = time(name + "/attend_tiled");
      const double mha = time(name + "/torch_mha"), fused = time(name + "/torch_fused");
      if (direct <= 0 && tiled <= 0 && mha <= 0 && fused <= 0) continue;
      double torch_best = 0;
      for (double t : {mha, fused})
        if (t > 0) torch_best = torch_best > 0 ? std::min(torch_best, t) : t;
      const auto us = [](double t) { return t > 0 ? t * 1e6 : NAN; };
      const auto ratio = [&](double t) { return t > 0 && torch_best > 0 ? torch_best / t : NAN; };
      std::printf("(%ld,%ld,%ld,%ld)%*s %12.1f %12.1f %12.1f %12.1f | %8.2f %8.2f |",
                  static_cast<long>(s.batch), static_cast<long>(s.n), static_cast<long>(s.d),
                  static_cast<long>(s.heads), static_cast<int>(18 - paren_width(s)), "", us(direct), us(tiled), us(mha),
                  us(fused), ratio(direct), ratio(tiled));
      for (double t : {direct, tiled, mha, fused}) {
        const double gflops = t > 0 ? forward_flops(s) / t / 1e9 : NAN;
        std::printf(" %11.1f (%3.0f%%)", gflops, ceiling > 0 ? 100 * gflops / ceiling : NAN);
      }
      std::printf("\n");
    }
    std::printf("T/x: libtorch's faster time (torch_mha or fused) over x's; above 1 means x is faster.\n");
  }

 private:
  double time(const std::string& name) const {
    const auto it = seconds_.find(name);
    return it == seconds_.end() ? 0 : it->second;
  }
  static std::size_t paren_width(const Shape& s) {
    return attend::detail::message('(', s.batch, ',', s.n, ',', s.d, ',', s.heads, ')').size();
  }

  std::map<std::string, double> seconds_;  // function name -> median seconds per iteration
};

void print_configuration() {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OPENBLAS_CORETYPE=%s (read, not set, by this program)\n", coretype ? coretype : "(unset)");
#ifdef ATTEND_BENCH_OPENBLAS
  std::printf("OpenBLAS: %s; core %s; threads %d\n", openblas_get_config(), openblas_get_corename(),
              openblas_get_num_threads());
#endif
  std::printf("libtorch %s: intra-op threads %d, inter-op threads %d\n", TORCH_VERSION, torch::get_num_threads(),
              torch::get_num_interop_threads());
  std::printf("Eigen %d.%d.%d, %s, threads %d\n\n", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION,
              Eigen::SimdInstructionSetsInUse(), Eigen::nbThreads());
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
#ifdef ATTEND_BENCH_OPENBLAS
  openblas_set_num_threads(1);
#endif
  print_configuration();

  // Interleave the repetitions unless the command line chooses.
  std::vector<char*> args(argv, argv + argc);
  const bool chosen = std::any_of(args.begin(), args.end(), [](const char* a) {
    return std::strncmp(a, "--benchmark_enable_random_interleaving", 38) == 0;
  });
  char interleave[] = "--benchmark_enable_random_interleaving=true";
  if (!chosen) args.insert(args.begin() + 1, interleave);
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

  std::vector<std::unique_ptr<Case>> cases;
  for (const Shape& s : shapes) cases.push_back(std::make_unique<Case>(s));
  check_agreement(cases);

  register_sgemm();
  for (auto& c : cases) register_shape(c.get());
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
}
