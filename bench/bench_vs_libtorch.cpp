// Is attend faster than libtorch on this machine? Multi-head self-attention, a transformer encoder layer, RNN and
// Conv1d in float, evaluation mode and training steps, on the same weights and inputs, with the same number of
// threads, in one process.
//
//   ./build/bench/bench_vs_libtorch                                    the whole sweep at 1 and 2 threads
//   ./build/bench/bench_vs_libtorch --threads=1 --max-n=512 --rounds=3 --min-time=0.05    a short run
//   OPENBLAS_CORETYPE=SkylakeX ./build/bench/bench_vs_libtorch --rounds=9 --csv=vs_libtorch.csv   the reference run
//   ./build/bench/bench_vs_libtorch_blas ...    the same program with EIGEN_USE_BLAS: attend's products on OpenBLAS
//
// Options (all optional):
//   --threads=1,2       thread counts to run at, in this order
//   --rounds=5          alternating rounds per shape; every time printed is the median over the rounds
//   --min-time=0.1      seconds of calls per contender per round (at least one call)
//   --long-call=1       a shape whose slowest contender takes longer per call gets at most 3 rounds (n = 8192)
//   --max-n=8192        leave out the attention shapes with a longer sequence
//   --parts=attention,training,kernel,gqa,encoder,encoder_training,rnn,conv1d,linear_bf16,mha_bf16
//                       which comparisons to run (the sgemm ceiling always runs); training: a forward + backward step
//                       of the attention shapes up to n = 4096, against libtorch's autograd; kernel, gqa, encoder,
//                       encoder_training, linear_bf16, mha_bf16: PyTorch 2 only (encoder: a whole
//                       nn.TransformerEncoderLayer, see its section; linear_bf16 and mha_bf16: Linear and
//                       MultiHeadAttention in bfloat16 and float, see their sections)
//   --attend-openblas-threads=N       OpenBLAS's threads during attend's calls; 0: the --threads count. Default 1 in
//                                     the _blas program when attend has OpenMP, else 0 (see Threads below)
//   --csv=FILE --json=FILE            also write the results there (CSV: one row per measurement, for
//                                     plot_vs_libtorch.gp; JSON: the same with the configuration and every round)
//
// Multi-head self-attention on X (batch, n, d) with h heads, bias off, no mask, five contenders:
//   attend         attend::MultiHeadAttention<float> in eval mode, operator()(X, X, X): the public module as a user
//                  gets it, AttentionPath::automatic (the path it took is printed: direct or tiled)
//   attend_direct  the same module and weights with set_path(AttentionPath::direct): the (batch * h, n, n) weights
//   attend_tiled   the same with set_path(AttentionPath::tiled): the online-softmax kernel, no (n, n) matrix
//   torch_mha      torch::nn::MultiheadAttention (in_proj_weight = [W_q; W_k; W_v], out_proj = W_o, bias off), on
//                  its native (n, batch, d) layout, need_weights = false
//   torch_fused    at::_native_multi_head_attention, the fused kernel behind Python's nn.MultiheadAttention fast
//                  path, on (batch, n, d); it requires biases: zeros
// FLOPs of one forward pass, counted as 2 per multiply-add of the products (softmax, scaling and biases not counted):
//   4 projections (Q, K, V, output)   4 x (batch n, d) x (d, d)                   8 b n d^2
//   scores Q K^T, every head          b h x (n, d/h) x (d/h, n)                   2 b n^2 d
//   weights @ V, every head           b h x (n, n) x (n, d/h)                     2 b n^2 d
//   total                                                                        8 b n d^2 + 4 b n^2 d
// RNN: attend::RNN vs torch::nn::RNN (tanh, one layer, batch_first), every h_t returned; FLOPs 2 x
//   RNN::multiply_adds = 2 (b s h i + b (s - 1) h^2) (h_0 = 0: the first step has no recurrent product).
// Conv1d: attend::Conv1d vs torch::nn::Conv1d (padding 'same', stride 1, bias); attend on (batch, steps, channels),
//   torch on its native (batch, channels, steps), converted outside the timing; FLOPs 2 b s out in k.
// The ceiling: sgemm C = A B, all (1024, 1024) float, by OpenBLAS (cblas_sgemm) and by Eigen (in the _blas program
//   Eigen's product is OpenBLAS's sgemm too), at each thread count, at the start of it and again at its end, and as
//   two more contenders in every shape's rounds. "% sgemm" is attend's GFLOP/s over the faster of the two sgemms timed
//   in the same rounds as it: the machine is shared, and its speed drifts by a fifth within minutes, so a ceiling
//   measured once per thread count is a different machine's by the time the last shape runs.
//
// Method. Each contender runs once and its output is compared with libtorch's (the program stops if they disagree);
// that call and one more are the warm-up, the second also sets how many calls make one timing (enough for
// --min-time). Then --rounds rounds (at most 3 for a shape whose slowest call takes over --long-call seconds: the
// multi-second calls at n = 8192): each round times every contender of the shape once, in an order rotated by one
// per round, so that none always runs first or right after the same other, and slow drifts of the machine's load fall
// on all alike. The figure of a contender is its median seconds per call over the rounds. At more than one thread a
// pause of 0.15 s precedes each timing: OpenBLAS's and OpenMP's worker threads spin for a while after their work, and
// must not steal the next contender's cores.
//
// Threads. At each thread count t, t for everyone: at::set_num_threads(t) (libtorch's intra-op pool; OpenMP in
// Debian's build), attend::set_num_threads(t) (attend's OpenMP loops: omp_set_num_threads and Eigen::setNbThreads; the
// same OpenMP runtime as libtorch's), openblas_set_num_threads(t) (libtorch's GEMMs are OpenBLAS's here). One
// exception, in the _blas program only: during attend's calls OpenBLAS runs on one thread (--attend-openblas-threads).
// attend shares its work among its t OpenMP threads and each calls sgemm on its own piece; Debian's OpenBLAS is the
// pthreads build, which does not see OpenMP's team and would spread each piece over its own t threads as well: more
// threads than cores (the tiled path then runs several times slower at 2 threads; --attend-openblas-threads=0 shows
// it).
// OPENBLAS_CORETYPE and every other environment variable are read and printed, never set: OPENBLAS_CORETYPE chooses
// OpenBLAS's kernels when the library loads (Haswell = AVX2, SkylakeX = AVX-512). Unset, OpenBLAS detects the CPU, but
// 0.3.21 (Debian 12) knows only the models of its time: on an Ice Lake Xeon it takes its SkylakeX kernels, on an
// Emerald Rapids Xeon (model 207) it falls back to Prescott's SSE3 ones, a fifth of the speed (sgemm 1024^3 on one
// core: 20 GFLOP/s against 109 with SkylakeX). The program says so when OpenBLAS runs without AVX-512 kernels on a
// CPU that has them; OPENBLAS_CORETYPE=SkylakeX gives libtorch its best configuration on either machine.
#include <attend/attention_path.hpp>
#include <attend/conv1d.hpp>
#include <attend/dot_product_attention.hpp>
#include <attend/from_torch.hpp>
#include <attend/linear.hpp>
#include <attend/mask.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/random.hpp>
#include <attend/rnn.hpp>
#include <attend/scaled_dot_product_attention.hpp>
#include <attend/score_options.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <attend/transformer_encoder_block.hpp>

#include <ATen/Version.h>
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#ifdef ATTEND_BENCH_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using attend::Index;
using attend::Matrix;
using attend::Tensor3;

// ---- what the command line chooses ------------------------------------------------------------------------------

// The masks of the sweep: none; valid lengths (batch row b sees its first n - n (b + 1) / (4 batch) keys: 3n/4 to
// nearly n), given to libtorch as a key-padding mask; causal (query i sees keys 0..i).
enum class MaskKind { none, lens, causal };

const char* mask_name(MaskKind mask) {
  return mask == MaskKind::none ? "none" : mask == MaskKind::lens ? "lens" : "causal";
}

constexpr const char* all_parts =
    "attention,training,kernel,gqa,encoder,encoder_training,rnn,conv1d,linear_bf16,mha_bf16";

struct Options {
  std::vector<int> threads{1, 2};
  int rounds = 5;
  double min_time = 0.1;  // seconds per contender per round
  double long_call = 1;   // seconds per call above which a shape gets at most 3 rounds
  Index max_n = 8192;
  bool attention = true, training = true, kernel = true, gqa = true, encoder = true, encoder_training = true, rnn = true,
       conv1d = true, linear_bf16 = true, mha_bf16 = true;
  std::vector<MaskKind> masks{MaskKind::none, MaskKind::lens, MaskKind::causal};
  std::string csv, json;
#ifdef EIGEN_USE_BLAS
  int attend_openblas_threads = attend::has_openmp() ? 1 : 0;
#else
  int attend_openblas_threads = 0;
#endif
};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, separator);)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto equals = arg.find('=');
    const std::string key = arg.substr(0, equals), value = equals == std::string::npos ? "" : arg.substr(equals + 1);
    if (key == "--threads") {
      options.threads.clear();
      for (const std::string& t : split(value, ',')) options.threads.push_back(std::stoi(t));
    } else if (key == "--rounds") {
      options.rounds = std::stoi(value);
    } else if (key == "--min-time") {
      options.min_time = std::stod(value);
    } else if (key == "--long-call") {
      options.long_call = std::stod(value);
    } else if (key == "--max-n") {
      options.max_n = std::stol(value);
    } else if (key == "--parts") {
      options.attention = options.training = options.kernel = options.gqa = options.encoder =
          options.encoder_training = options.rnn = options.conv1d = options.linear_bf16 = options.mha_bf16 = false;
      for (const std::string& part : split(value, ',')) {
        if (part == "attention") options.attention = true;
        else if (part == "training") options.training = true;
        else if (part == "kernel") options.kernel = true;
        else if (part == "gqa") options.gqa = true;
        else if (part == "encoder") options.encoder = true;
        else if (part == "encoder_training") options.encoder_training = true;
        else if (part == "rnn") options.rnn = true;
        else if (part == "conv1d") options.conv1d = true;
        else if (part == "linear_bf16") options.linear_bf16 = true;
        else if (part == "mha_bf16") options.mha_bf16 = true;
        else
          throw std::invalid_argument("--parts: unknown part '" + part + "' (" + all_parts + ")");
      }
    } else if (key == "--masks") {
      options.masks.clear();
      for (const std::string& mask : split(value, ',')) {
        if (mask == "none") options.masks.push_back(MaskKind::none);
        else if (mask == "lens") options.masks.push_back(MaskKind::lens);
        else if (mask == "causal") options.masks.push_back(MaskKind::causal);
        else throw std::invalid_argument("--masks: unknown mask '" + mask + "' (none, lens, causal)");
      }
    } else if (key == "--attend-openblas-threads") {
      options.attend_openblas_threads = std::stoi(value);
    } else if (key == "--csv") {
      options.csv = value;
    } else if (key == "--json") {
      options.json = value;
    } else {
      throw std::invalid_argument("unknown option '" + arg +
                                  "'; options: --threads=1,2 --rounds=5 --min-time=0.1 --long-call=1 --max-n=8192 "
                                  "--parts=" + std::string(all_parts) + " --masks=none,lens,causal --attend-openblas-threads=N --csv=FILE --json=FILE");
    }
  }
  if (options.threads.empty() || options.rounds < 1 || options.min_time < 0 || options.attend_openblas_threads < 0)
    throw std::invalid_argument(
        "--threads needs at least one count, --rounds at least 1, --min-time and --attend-openblas-threads at least 0");
  for (int t : options.threads)
    if (t < 1) throw std::invalid_argument("--threads: every count must be at least 1");
  return options;
}

// ---- configuration: threads, backend, OpenBLAS ---------------------------------------------------------------------

#ifdef EIGEN_USE_BLAS
constexpr const char* backend = "EIGEN_USE_BLAS (attend's large products call OpenBLAS's sgemm)";
#else
constexpr const char* backend = "Eigen's own GEMM kernels";
#endif

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "(unset)";
}

// The line of libtorch's build summary that says which of its own vector kernels run (AVX2 or AVX512).
std::string torch_cpu_capability() {
  std::stringstream summary(at::show_config());
  for (std::string line; std::getline(summary, line);) {
    const auto at = line.find("CPU capability usage:");
    if (at != std::string::npos) return line.substr(at + 22);
  }
  return "?";
}

// OpenBLAS's threads during libtorch's calls and the sgemm ceiling (others), and during attend's (attend).
struct OpenblasThreads {
  int others = 1, attend = 1;
};
OpenblasThreads openblas_threads;

// Sets OpenBLAS's threads for the next calls: attend's or everyone else's.
void use_openblas_threads(bool for_attend) {
#ifdef ATTEND_BENCH_OPENBLAS
  const int wanted = for_attend ? openblas_threads.attend : openblas_threads.others;
  if (openblas_get_num_threads() != wanted) openblas_set_num_threads(wanted);
#else
  (void)for_attend;
#endif
}

// Runs f() with OpenBLAS's threads set for attend, then sets them back; returns what f returns.
template <class F>
auto as_attend(F f) {
  use_openblas_threads(true);
  auto result = f();
  use_openblas_threads(false);
  return result;
}

// The same thread count for attend, libtorch and OpenBLAS (see the top of the file).
void set_threads(int threads, const Options& options) {
  at::set_num_threads(threads);
  attend::set_num_threads(threads);  // omp_set_num_threads and Eigen::setNbThreads
  openblas_threads = {threads, options.attend_openblas_threads > 0 ? options.attend_openblas_threads : threads};
  use_openblas_threads(false);
}

nlohmann::ordered_json configuration() {
  nlohmann::ordered_json c;
  c["program_backend"] = backend;
  c["eigen"] = attend::detail::message(EIGEN_WORLD_VERSION, '.', EIGEN_MAJOR_VERSION, '.', EIGEN_MINOR_VERSION,
                                       ", ", Eigen::SimdInstructionSetsInUse());
  c["attend_isa"] = attend::isa_name(attend::active_isa());
  c["attend_openmp"] = attend::has_openmp();
  c["torch"] = TORCH_VERSION;
  c["torch_cpu_capability"] = torch_cpu_capability();
  c["torch_mkldnn"] = at::hasMKLDNN();
  c["OPENBLAS_CORETYPE"] = environment("OPENBLAS_CORETYPE");
  c["ATEN_CPU_CAPABILITY"] = environment("ATEN_CPU_CAPABILITY");
  c["OMP_NUM_THREADS"] = environment("OMP_NUM_THREADS");
  c["OPENBLAS_NUM_THREADS"] = environment("OPENBLAS_NUM_THREADS");
#ifdef ATTEND_BENCH_OPENBLAS
  c["openblas_config"] = openblas_get_config();
  c["openblas_corename"] = openblas_get_corename();
  c["cpu_avx512f"] = __builtin_cpu_supports("avx512f") != 0;
  c["openblas_parallel"] = openblas_get_parallel() == 0   ? "sequential"
                           : openblas_get_parallel() == 1 ? "pthreads"
                                                          : "OpenMP";
#endif
  return c;
}

void print_configuration(const nlohmann::ordered_json& c) {
  std::printf("attend vs libtorch, float, eval mode; this program: %s\n", backend);
  std::printf("  Eigen %s; attend %s OpenMP\n", c["eigen"].get<std::string>().c_str(),
              c["attend_openmp"].get<bool>() ? "with" : "WITHOUT (attend runs on one thread whatever --threads says)");
  std::printf("  libtorch %s: its own kernels %s (ATEN_CPU_CAPABILITY=%s), MKL-DNN %s\n", TORCH_VERSION,
              c["torch_cpu_capability"].get<std::string>().c_str(), c["ATEN_CPU_CAPABILITY"].get<std::string>().c_str(),
              c["torch_mkldnn"].get<bool>() ? "yes" : "no");
  std::printf("  OPENBLAS_CORETYPE=%s (read, never set, by this program)\n",
              c["OPENBLAS_CORETYPE"].get<std::string>().c_str());
  if (c.contains("openblas_config")) {
    const std::string core = c["openblas_corename"].get<std::string>();
    std::printf("  OpenBLAS: %s; core %s; threading %s\n", c["openblas_config"].get<std::string>().c_str(), core.c_str(),
                c["openblas_parallel"].get<std::string>().c_str());
    if (c["cpu_avx512f"].get<bool>() && core != "SkylakeX" && core != "Cooperlake" && core != "SapphireRapids")
      std::printf("  NOTE: this CPU has AVX-512 but OpenBLAS runs its %s kernels, and so do libtorch's GEMMs: not "
                  "libtorch's best here; OPENBLAS_CORETYPE=SkylakeX gives it AVX-512 ones\n",
                  core.c_str());
  } else {
    std::printf("  OpenBLAS not found at build time: no OpenBLAS sgemm ceiling, OpenBLAS's threads not controlled\n");
  }
  std::printf("  OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s\n", c["OMP_NUM_THREADS"].get<std::string>().c_str(),
              c["OPENBLAS_NUM_THREADS"].get<std::string>().c_str());
}

void print_threads() {
  std::printf("  threads: libtorch %d, attend %d, Eigen %d", at::get_num_threads(), attend::num_threads(),
              Eigen::nbThreads());
#ifdef ATTEND_BENCH_OPENBLAS
  std::printf(", OpenBLAS %d (during attend's calls: %d)", openblas_threads.others, openblas_threads.attend);
#endif
  std::printf("\n");
}

// ---- timing -------------------------------------------------------------------------------------------------------

// One implementation of a problem: run() is one forward pass, its result handed to benchmark::DoNotOptimize.
struct Contender {
  std::string name;
  std::function<void()> run;
};

// One shape of one comparison, as the tables, the CSV and the plot see it.
struct Problem {
  std::string part;    // "attention", "rnn", "conv1d", "sgemm"
  std::string label;   // "(8,128,256,8)": the shape in the order the part's table names it
  std::string series;  // the shapes a plot joins by a line, e.g. "d256_h8"
  std::string note;    // printed at the end of the shape's row
  Index batch, n;      // n: sequence length (steps); for sgemm the matrix size
  double flops;        // per call, as counted at the top of this file
  double gemm_flops = 0;  // per call of the gemm_* contenders, where the part has them (the encoder's bound)
};

struct Measurement {
  std::string name;
  double median;               // seconds per call, median over the rounds
  std::vector<double> rounds;  // seconds per call, each round
};

bool is_attend(const Contender& c) { return c.name.rfind("attend", 0) == 0; }

double seconds_per_call(const Contender& c, long calls) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) c.run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : (values[m - 1] + values[m]) / 2;
}

// The method at the top of the file: the contenders' first calls are done (the agreement check); one call more sets
// the calls per timing, then `rounds` rotated rounds (3 when a call of the slowest takes over --long-call seconds).
std::vector<Measurement> alternate(const std::vector<Contender>& contenders, const Options& options, int threads) {
  const auto pause = [threads] {
    if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
  };
  const std::size_t k = contenders.size();
  std::vector<long> calls(k);
  double slowest = 0;  // seconds per call of the slowest contender
  for (std::size_t i = 0; i < k; ++i) {
    pause();
    use_openblas_threads(is_attend(contenders[i]));
    const double once = seconds_per_call(contenders[i], 1);
    calls[i] = std::max(1L, static_cast<long>(std::ceil(options.min_time / std::max(once, 1e-9))));
    slowest = std::max(slowest, once);
  }
  const int rounds = slowest > options.long_call ? std::min(options.rounds, 3) : options.rounds;
  std::vector<Measurement> result(k);
  for (std::size_t i = 0; i < k; ++i) result[i].name = contenders[i].name;
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t i = (j + round) % k;
      pause();
      use_openblas_threads(is_attend(contenders[i]));
      result[i].rounds.push_back(seconds_per_call(contenders[i], calls[i]));
    }
  }
  use_openblas_threads(false);
  for (Measurement& m : result) m.median = median(m.rounds);
  return result;
}

// ---- results: tables, CSV, JSON -----------------------------------------------------------------------------------

struct Result {
  int threads;
  Problem problem;
  std::vector<Measurement> measurements;
  double ceiling;  // GFLOP/s of sgemm at this thread count, in the same rounds as the shape's contenders

  double seconds(const std::string& name) const {
    for (const Measurement& m : measurements)
      if (m.name == name) return m.median;
    return NAN;
  }
  double gflops(const std::string& name) const {
    return (is_gemm(name) ? problem.gemm_flops : problem.flops) / seconds(name) / 1e9;
  }
  static bool is_gemm(const std::string& name) { return name.rfind("gemm_", 0) == 0; }

  // PyTorch's fastest time over the time of the problem's FLOPs at the rate of the faster gemm_* contender; NaN where
  // the part has none.
  double bound(double torch_best) const {
    double rate = 0;  // FLOP/s
    for (const Measurement& m : measurements)
      if (is_gemm(m.name)) rate = std::max(rate, problem.gemm_flops / m.median);
    return rate > 0 ? torch_best / (problem.flops / rate) : NAN;
  }
};

// A part's table: a header, then one row per shape, printed as each is measured. Columns, for contenders c:
// median microseconds of each c; GFLOP/s of each c; t/attend for every torch contender t (above 1: attend is faster);
// attend's GFLOP/s as a share of the sgemm ceiling timed in the same rounds.
class Table {
 public:
  Table(std::string shape_header, std::vector<std::string> names) : shape_header_(std::move(shape_header)),
                                                                     names_(std::move(names)) {}

  void header(const std::string& title) const {
    std::printf("\n%s\n%-18s %8s |", title.c_str(), shape_header_.c_str(), "GFLOP");
    for (const std::string& n : names_) std::printf(" %12s", (short_name(n) + " us").c_str());
    std::printf(" |");
    for (const std::string& n : names_) std::printf(" %7s", short_name(n).c_str());
    std::printf(" GFLOP/s |");
    for (const std::string& n : names_)
      if (is_torch(n)) std::printf(" %9s", (short_name(n) + "/att").c_str());
    std::printf(" %9s", "best/att");
    if (with_bound()) std::printf(" %6s %6s", "bound", "%bound");
    std::printf(" | att %% sgemm\n");
  }

  void row(const Result& r) const {
    std::printf("%-18s %8.3f |", r.problem.label.c_str(), r.problem.flops / 1e9);
    for (const std::string& n : names_) std::printf(" %12.1f", r.seconds(n) * 1e6);
    std::printf(" |");
    for (const std::string& n : names_) std::printf(" %7.1f", r.gflops(n));
    std::printf("         |");
    double best = NAN;  // libtorch's fastest float contender
    for (const std::string& n : names_)
      if (is_torch(n)) {
        std::printf(" %9.2f", r.seconds(n) / r.seconds("attend"));
        const double t = r.seconds(n);  // NaN for a contender this shape does not have
        if (n.find("bf16") == std::string::npos && std::isfinite(t) && !(t >= best)) best = t;
      }
    std::printf(" %9.2f", best / r.seconds("attend"));
    if (with_bound()) {
      const double bound = r.bound(best);
      std::printf(" %6.2f %5.0f%%", bound, 100 * best / r.seconds("attend") / bound);
    }
    std::printf(" | %6.0f %%  %s\n", r.ceiling > 0 ? 100 * r.gflops("attend") / r.ceiling : NAN,
                r.problem.note.c_str());
    std::fflush(stdout);
  }

 private:
  static bool is_torch(const std::string& n) { return n.rfind("torch", 0) == 0; }
  bool with_bound() const {
    return std::any_of(names_.begin(), names_.end(), [](const std::string& n) { return Result::is_gemm(n); });
  }
  static std::string short_name(const std::string& n) {
    if (n == "attend_direct") return "direct";
    if (n == "attend_tiled") return "tiled";
    if (n == "torch_mha") return "mha";
    if (n == "torch_fused") return "fused";
    if (n == "torch_sdpa") return "sdpa";
    if (n == "torch_sdpa_bf16") return "bf16";
    if (n == "torch_sdpa_gqa") return "gqa";
    if (n == "torch_sdpa_repeat_kv") return "rep";
    if (n == "torch_layer") return "layer";
    if (n == "gemm_torch") return "mm";
    if (n == "gemm_eigen") return "eigen";
    return n;
  }
  std::string shape_header_;
  std::vector<std::string> names_;
};

void write_csv(const std::string& path, const std::vector<Result>& results) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << "threads,part,series,batch,n,impl,median_us,gflops,sgemm_gflops\n";
  for (const Result& r : results)
    for (const Measurement& m : r.measurements)
      out << r.threads << ',' << r.problem.part << ',' << r.problem.series << ',' << r.problem.batch << ','
          << r.problem.n << ',' << m.name << ',' << m.median * 1e6 << ',' << r.gflops(m.name) << ','
          << r.ceiling << '\n';
}

void write_json(const std::string& path, const nlohmann::ordered_json& config, const Options& options,
                const std::vector<Result>& results) {
  nlohmann::ordered_json j;
  j["configuration"] = config;
  j["rounds"] = options.rounds;
  j["min_time_s"] = options.min_time;
  j["long_call_s"] = options.long_call;
  for (const Result& r : results) {
    nlohmann::ordered_json row;
    row["threads"] = r.threads;
    row["part"] = r.problem.part;
    row["shape"] = r.problem.label;
    row["series"] = r.problem.series;
    row["batch"] = r.problem.batch;
    row["n"] = r.problem.n;
    row["flops"] = r.problem.flops;
    row["sgemm_gflops"] = r.ceiling;
    for (const Measurement& m : r.measurements)
      row["impl"][m.name] = {{"median_s", m.median}, {"gflops", r.gflops(m.name)},
                             {"rounds_s", m.rounds}};
    j["results"].push_back(row);
  }
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << j.dump(1) << '\n';
}

// ---- agreement ----------------------------------------------------------------------------------------------------

torch::Tensor to_torch(const float* data, std::vector<int64_t> sizes) {
  return torch::from_blob(const_cast<float*>(data), sizes, torch::kFloat32).clone();
}

// max |a - t| / max |t| over all elements; a and t of the same shape (batch, steps, features).
double relative_difference(const Tensor3<float>& a, const torch::Tensor& t) {
  const torch::Tensor ours = to_torch(a.data(), {a.dimension(0), a.dimension(1), a.dimension(2)});
  return (ours - t).abs().max().item<double>() / t.abs().max().item<double>();
}

// Prints the differences of a shape, `label: name diff, ...`; throws when one is above the tolerance.
void check(const std::string& label, const std::vector<std::pair<std::string, double>>& differences, double tolerance) {
  std::printf("  agreement %-18s", label.c_str());
  bool ok = true;
  for (const auto& [name, difference] : differences) {
    std::printf("  %s %.1e", name.c_str(), difference);
    ok = ok && difference <= tolerance;  // false on NaN too
  }
  std::printf("  %s\n", ok ? "ok" : "DISAGREE");
  if (!ok) throw std::runtime_error(label + ": attend and libtorch disagree beyond " + std::to_string(tolerance));
}

// ---- multi-head self-attention -------------------------------------------------------------------------------------

struct AttentionShape {
  Index batch, n, d, heads;
  MaskKind mask = MaskKind::none;
};

// Batch row b's valid length (see MaskKind).
Index valid_length(Index b, Index batch, Index n) { return n - n * (b + 1) / (4 * batch); }

attend::Mask attend_mask(const AttentionShape& s) {
  if (s.mask == MaskKind::causal) return attend::Mask::causal();
  if (s.mask == MaskKind::none) return {};
  std::vector<Index> lens;
  for (Index b = 0; b < s.batch; ++b) lens.push_back(valid_length(b, s.batch, s.n));
  return attend::ValidLens::per_batch(lens);
}

// libtorch's masks for the same rule: a key-padding mask (batch, n), true where a key is ignored, and an attention
// mask (n, n), -inf where query i may not see key j and 0 elsewhere (a float mask: nn::MultiheadAttention's C++
// forward adds it to the scores); undefined tensors where the shape has none.
torch::Tensor key_padding_mask(const AttentionShape& s) {
  if (s.mask != MaskKind::lens) return {};
  torch::Tensor pad = torch::zeros({s.batch, s.n}, torch::kBool);
  for (Index b = 0; b < s.batch; ++b) pad[b].slice(0, valid_length(b, s.batch, s.n)).fill_(true);
  return pad;
}
torch::Tensor causal_block_mask(const AttentionShape& s) {
  if (s.mask != MaskKind::causal) return {};
  return torch::zeros({s.n, s.n}).masked_fill(torch::ones({s.n, s.n}, torch::kBool).triu(1),
                                               -std::numeric_limits<float>::infinity());
}

// The label of a shape in the tables: "(8,128,256,8)", with " lens" or " causal" after it.
std::string shape_label(const AttentionShape& s) {
  return attend::detail::message('(', s.batch, ',', s.n, ',', s.d, ',', s.heads, ')',
                                 s.mask == MaskKind::none ? "" : " ", s.mask == MaskKind::none ? "" : mask_name(s.mask));
}

// Its series in the CSV and JSON output: "d256_h8", with "_lens" or "_causal" after it.
std::string series_label(const AttentionShape& s) {
  return attend::detail::message('d', s.d, "_h", s.heads, s.mask == MaskKind::none ? "" : "_",
                                 s.mask == MaskKind::none ? "" : mask_name(s.mask));
}

// From the seed's example to n = 8192: a mid-size batch, BERT-base's width (768, 12 heads), then d = 256 with 8 heads
// up to n = 8192, and one head of d = 64 (the long-sequence case of the memory target: n = 16384 under 128 MiB) at
// n = 2048 and 8192.
const AttentionShape attention_shapes[] = {{2, 4, 100, 5},     {8, 128, 256, 8},   {2, 384, 768, 12}, {4, 512, 256, 8},
                                           {1, 1024, 256, 8},  {1, 2048, 64, 1},   {1, 2048, 256, 8},
                                           {1, 4096, 256, 8},  {1, 8192, 64, 1},   {1, 8192, 256, 8}};

// The sweep: every shape up to n = max_n, with each mask asked for.
std::vector<AttentionShape> attention_sweep(const std::vector<MaskKind>& masks, Index max_n) {
  std::vector<AttentionShape> sweep;
  for (MaskKind mask : masks)
    for (AttentionShape s : attention_shapes)
      if (s.n <= max_n) {
        s.mask = mask;
        sweep.push_back(s);
      }
  return sweep;
}

#if TORCH_VERSION_MAJOR >= 2
// Multi-head self-attention as PyTorch 2's building blocks make it: at::linear for Q, K and V in one product, then
// at::scaled_dot_product_attention on (batch, heads, n, d / heads) (its CPU flash-attention kernel), then at::linear.
// X: (batch, n, d); in_proj (3d, d), out_proj (d, d); keep: (batch, 1, 1, n), true where a key takes part, or
// undefined; causal: is_causal. -> (batch, n, d)
torch::Tensor sdpa_attention(const torch::Tensor& X, const torch::Tensor& in_proj, const torch::Tensor& out_proj,
                             Index heads, const torch::Tensor& keep, bool causal) {
  const int64_t b = X.size(0), n = X.size(1), d = X.size(2);
  const torch::Tensor qkv = at::linear(X, in_proj).view({b, n, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
  const torch::Tensor out = keep.defined() ? at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], keep)
                                           : at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], {}, 0.0, causal);
  return at::linear(out.transpose(1, 2).reshape({b, n, d}), out_proj);  // out: (b, heads, n, d / heads)
}
#endif

// SDPA's keep mask for a shape's valid lengths, (batch, 1, 1, n), or undefined.
torch::Tensor sdpa_keep(const AttentionShape& s) {
  const torch::Tensor pad = key_padding_mask(s);
  return pad.defined() ? pad.logical_not().view({s.batch, 1, 1, s.n}) : torch::Tensor();
}

// One shape's weights, inputs and the ways to run it.
class Attention {
 public:
  static constexpr bool inference = true;  // libtorch without autograd, like attend's eval mode

  explicit Attention(const AttentionShape& s)
      : s_(s),
        generator_(42),
        attention_(s.d, s.d, s.d, s.d, s.heads, 0.0f, false, generator_),
        direct_(attention_),
        tiled_(attention_),
        X_(s.batch, s.n, s.d),
        mask_(attend_mask(s)),
        mha_(torch::nn::MultiheadAttentionOptions(s.d, s.heads).bias(false)) {
    attention_.eval();
    direct_.eval();
    direct_.set_path(attend::AttentionPath::direct);
    tiled_.eval();
    tiled_.set_path(attend::AttentionPath::tiled);
    for (Index i = 0; i < X_.size(); ++i) X_.data()[i] = generator_.uniform(-1.0f, 1.0f);

    // libtorch gets attend's weights: in_proj_weight (3d, d) = [W_q; W_k; W_v], out_proj.weight (d, d) = W_o.
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
    X_seq_first_ = X_batch_first_.transpose(0, 1).contiguous();
    key_padding_ = key_padding_mask(s);
    block_ = causal_block_mask(s);
    keep_ = sdpa_keep(s);
  }

  Problem problem() const {
    const double b = s_.batch, n = s_.n, d = s_.d;
    return {"attention",
            shape_label(s_),
            series_label(s_),
            std::string("attend took ") + automatic_path(),
            s_.batch,
            s_.n,
            8 * b * n * d * d + 4 * b * n * n * d};
  }

  // (batch, n, d): attend's public module, on the path it chooses (AttentionPath::automatic).
  Tensor3<float> attend_module() { return attention_(X_, X_, X_, mask_); }

  // (batch, n, d): the same module told to take one path: direct (the (batch * h, n, n) weights) or tiled (the
  // online-softmax kernel, no (n, n) matrix).
  Tensor3<float> attend_direct() { return direct_(X_, X_, X_, mask_); }
  Tensor3<float> attend_tiled() { return tiled_(X_, X_, X_, mask_); }

  // The path AttentionPath::automatic takes on this shape.
  const char* automatic_path() const {
    const bool tiled =
        attend::detail::takes_tiled_path<float>(attend::AttentionPath::automatic, s_.batch * s_.heads * s_.n * s_.n);
    return tiled ? "tiled" : "direct";
  }

  // (n, batch, d): libtorch's module on its own layout, the mask as a key-padding or an attention mask.
  torch::Tensor torch_mha() {
    return std::get<0>(mha_->forward(X_seq_first_, X_seq_first_, X_seq_first_, key_padding_, /*need_weights=*/false,
                                     block_));
  }

  // (batch, n, d): the fused operator; the same tensor as query, key and value, so its Q/K/V projection is one GEMM.
  // Without a mask only.
  torch::Tensor torch_fused() {
    return std::get<0>(at::_native_multi_head_attention(X_batch_first_, X_batch_first_, X_batch_first_, s_.d,
                                                        s_.heads, in_proj_, in_proj_bias_, out_proj_, out_proj_bias_,
                                                        {}, /*need_weights=*/false));
  }

#if TORCH_VERSION_MAJOR >= 2
  // (batch, n, d): at::linear + at::scaled_dot_product_attention + at::linear.
  torch::Tensor torch_sdpa() {
    return sdpa_attention(X_batch_first_, in_proj_, out_proj_, s_.heads, keep_, s_.mask == MaskKind::causal);
  }
#endif

  // Runs every contender once and compares it with torch_mha: max |x - torch_mha| / max |torch_mha|.
  void check_agreement() {
    const torch::Tensor mha = torch_mha().transpose(0, 1).contiguous();  // (batch, n, d)
    const auto against = [&](const torch::Tensor& t) {
      return (t - mha).abs().max().item<double>() / mha.abs().max().item<double>();
    };
    std::vector<std::pair<std::string, double>> differences = {
        {"attend", relative_difference(as_attend([&] { return attend_module(); }), mha)},
        {"attend_direct", relative_difference(as_attend([&] { return attend_direct(); }), mha)},
        {"attend_tiled", relative_difference(as_attend([&] { return attend_tiled(); }), mha)}};
    if (s_.mask == MaskKind::none) differences.push_back({"torch_fused", against(torch_fused())});
#if TORCH_VERSION_MAJOR >= 2
    differences.push_back({"torch_sdpa", against(torch_sdpa())});
#endif
    check(problem().label, differences, 1e-4);
  }

  std::vector<Contender> contenders() {
    std::vector<Contender> all = {
        {"attend", [this] { benchmark::DoNotOptimize(attend_module().data()); }},
        {"attend_direct", [this] { benchmark::DoNotOptimize(attend_direct().data()); }},
        {"attend_tiled", [this] { benchmark::DoNotOptimize(attend_tiled().data()); }},
        {"torch_mha", [this] { benchmark::DoNotOptimize(torch_mha().data_ptr()); }}};
    if (s_.mask == MaskKind::none)
      all.push_back({"torch_fused", [this] { benchmark::DoNotOptimize(torch_fused().data_ptr()); }});
#if TORCH_VERSION_MAJOR >= 2
    all.push_back({"torch_sdpa", [this] { benchmark::DoNotOptimize(torch_sdpa().data_ptr()); }});
#endif
    return all;
  }

 private:
  AttentionShape s_;
  attend::Generator generator_;
  attend::MultiHeadAttention<float> attention_;  // AttentionPath::automatic, the default
  attend::MultiHeadAttention<float> direct_;     // the same weights, AttentionPath::direct
  attend::MultiHeadAttention<float> tiled_;      // the same weights, AttentionPath::tiled
  Tensor3<float> X_;                             // (batch, n, d)
  attend::Mask mask_;
  torch::nn::MultiheadAttention mha_;
  torch::Tensor in_proj_, out_proj_, in_proj_bias_, out_proj_bias_;  // (3d, d), (d, d), (3d), (d)
  torch::Tensor X_batch_first_, X_seq_first_;                        // (batch, n, d), (n, batch, d)
  torch::Tensor key_padding_, block_, keep_;  // (batch, n), (n, n), (batch, 1, 1, n) or undefined: see MaskKind
};

// ---- a training step of multi-head self-attention -----------------------------------------------------------------

// The attention shapes up to n = 4096: forward then backward, attend's operator() + backward() against libtorch's
// nn::MultiheadAttention with autograd (X and the weights requiring gradients, need_weights = false) and, with
// PyTorch 2, at::linear + at::scaled_dot_product_attention + at::linear with autograd; training mode, dropout 0.
// Each call of a contender is one step; the parameters' gradients accumulate (neither side zeroes them: PyTorch adds
// into .grad, attend into weight_grad()).
class AttentionTraining {
 public:
  static constexpr bool inference = false;  // libtorch needs autograd here

  explicit AttentionTraining(const AttentionShape& s)
      : s_(s),
        generator_(43),
        attention_(s.d, s.d, s.d, s.d, s.heads, 0.0f, false, generator_),
        direct_(attention_),
        tiled_(attention_),
        X_(s.batch, s.n, s.d),
        dY_(s.batch, s.n, s.d),
        mask_(attend_mask(s)),
        mha_(torch::nn::MultiheadAttentionOptions(s.d, s.heads).bias(false)) {
    direct_.set_path(attend::AttentionPath::direct);
    tiled_.set_path(attend::AttentionPath::tiled);
    for (Index i = 0; i < X_.size(); ++i) X_.data()[i] = generator_.uniform(-1.0f, 1.0f);
    for (Index i = 0; i < dY_.size(); ++i) dY_.data()[i] = generator_.uniform(-1.0f, 1.0f);
    const auto weight = [&](attend::Linear<float>& layer) { return to_torch(layer.weight().data(), {s.d, s.d}); };
    in_proj_ = torch::cat({weight(attention_.W_q()), weight(attention_.W_k()), weight(attention_.W_v())}, 0)
                   .requires_grad_(true);
    out_proj_ = weight(attention_.W_o()).requires_grad_(true);
    {
      torch::NoGradGuard no_grad;
      mha_->in_proj_weight.copy_(in_proj_);
      mha_->out_proj->weight.copy_(out_proj_);
    }
    mha_->train();
    X_batch_first_ = to_torch(X_.data(), {s.batch, s.n, s.d}).requires_grad_(true);
    dY_batch_first_ = to_torch(dY_.data(), {s.batch, s.n, s.d});
    X_seq_first_ = to_torch(X_.data(), {s.batch, s.n, s.d}).transpose(0, 1).contiguous().requires_grad_(true);
    dY_seq_first_ = dY_batch_first_.transpose(0, 1).contiguous();
    key_padding_ = key_padding_mask(s);
    block_ = causal_block_mask(s);
    keep_ = sdpa_keep(s);
  }

  Problem problem() const {
    const double b = s_.batch, n = s_.n, d = s_.d;
    // The forward's products and about twice as many in the backward (dX and dW of four projections; dV, dP, dQ, dK).
    return {"training",
            shape_label(s_),
            series_label(s_),
            "forward + backward",
            s_.batch,
            s_.n,
            3 * (8 * b * n * d * d + 4 * b * n * n * d)};
  }

  // One step on attend's module: the inputs' gradient summed over its three uses, (batch, n, d).
  Tensor3<float> attend_step(attend::MultiHeadAttention<float>& attention) {
    attention(X_, X_, X_, mask_);
    const attend::AttentionGradients<float> g = attention.backward(dY_);
    return g.queries + g.keys + g.values;
  }

  // One step on libtorch's module: X's gradient, (n, batch, d).
  torch::Tensor torch_mha_step() {
    X_seq_first_.mutable_grad() = torch::Tensor();
    torch::Tensor Y = std::get<0>(mha_->forward(X_seq_first_, X_seq_first_, X_seq_first_, key_padding_, false, block_));
    Y.backward(dY_seq_first_);
    return X_seq_first_.grad();
  }

#if TORCH_VERSION_MAJOR >= 2
  // One step through scaled_dot_product_attention: X's gradient, (batch, n, d).
  torch::Tensor torch_sdpa_step() {
    X_batch_first_.mutable_grad() = torch::Tensor();
    torch::Tensor Y = sdpa_attention(X_batch_first_, in_proj_, out_proj_, s_.heads, keep_,
                                     s_.mask == MaskKind::causal);
    Y.backward(dY_batch_first_);
    return X_batch_first_.grad();
  }
#endif

  void check_agreement() {
    const torch::Tensor dX = torch_mha_step().transpose(0, 1).contiguous();  // (batch, n, d)
    std::vector<std::pair<std::string, double>> differences = {
        {"attend", relative_difference(attend_step(attention_), dX)},
        {"attend_direct", relative_difference(attend_step(direct_), dX)},
        {"attend_tiled", relative_difference(attend_step(tiled_), dX)}};
#if TORCH_VERSION_MAJOR >= 2
    differences.push_back(
        {"torch_sdpa", (torch_sdpa_step() - dX).abs().max().item<double>() / dX.abs().max().item<double>()});
#endif
    check(problem().label, differences, 1e-3);
  }

  std::vector<Contender> contenders() {
    std::vector<Contender> all = {
        {"attend", [this] { benchmark::DoNotOptimize(attend_step(attention_).data()); }},
        {"attend_direct", [this] { benchmark::DoNotOptimize(attend_step(direct_).data()); }},
        {"attend_tiled", [this] { benchmark::DoNotOptimize(attend_step(tiled_).data()); }},
        {"torch_mha", [this] { benchmark::DoNotOptimize(torch_mha_step().data_ptr()); }}};
#if TORCH_VERSION_MAJOR >= 2
    all.push_back({"torch_sdpa", [this] { benchmark::DoNotOptimize(torch_sdpa_step().data_ptr()); }});
#endif
    return all;
  }

 private:
  AttentionShape s_;
  attend::Generator generator_;
  attend::MultiHeadAttention<float> attention_;  // AttentionPath::automatic
  attend::MultiHeadAttention<float> direct_;     // the same weights, AttentionPath::direct
  attend::MultiHeadAttention<float> tiled_;      // the same weights, AttentionPath::tiled
  Tensor3<float> X_, dY_;                        // (batch, n, d) each
  attend::Mask mask_;
  torch::nn::MultiheadAttention mha_;
  torch::Tensor in_proj_, out_proj_;                 // (3d, d), (d, d), requiring gradients
  torch::Tensor X_batch_first_, dY_batch_first_;     // (batch, n, d) each
  torch::Tensor X_seq_first_, dY_seq_first_;         // (n, batch, d) each
  torch::Tensor key_padding_, block_, keep_;         // see MaskKind
};

// ---- the kernel alone: scaled dot-product attention on (batch, heads, n, d) ----------------------------------------

// attend::DotProductAttention on (batch * heads, n, d) against at::scaled_dot_product_attention on (batch, heads, n,
// d) (PyTorch 2 only), in float and, beside them, SDPA in bfloat16 (its inputs converted once, outside the timing):
// what a user weighs beside float. FLOPs: 4 b h n^2 d.
#if TORCH_VERSION_MAJOR >= 2
struct KernelShape {
  Index batch, heads, n, d;
  MaskKind mask = MaskKind::none;
};

const KernelShape kernel_shapes[] = {{2, 5, 4, 20},    {8, 8, 128, 32},   {4, 8, 512, 32},  {1, 8, 1024, 32},
                                     {1, 25, 1024, 64}, {1, 1, 2048, 64}, {1, 8, 2048, 32}, {1, 4, 2048, 128},
                                     {1, 1, 8192, 64}};

class Kernel {
 public:
  static constexpr bool inference = true;

  explicit Kernel(const KernelShape& s) : s_(s), attention_(0.0f), tiled_(0.0f), Q_(s.batch * s.heads, s.n, s.d) {
    attention_.eval();
    tiled_.eval();
    tiled_.set_path(attend::AttentionPath::tiled);
    attend::Generator generator(44);
    for (Tensor3<float>* X : {&Q_, &K_, &V_}) {
      X->resize(s.batch * s.heads, s.n, s.d);
      for (Index i = 0; i < X->size(); ++i) X->data()[i] = generator.uniform(-1.0f, 1.0f);
    }
    const AttentionShape as{s.batch, s.n, s.heads * s.d, s.heads, s.mask};
    if (s.mask == MaskKind::causal) mask_ = attend::Mask::causal();
    if (s.mask == MaskKind::lens) {  // each head of batch row b gets row b's length
      std::vector<Index> lens;
      for (Index b = 0; b < s.batch; ++b)
        for (Index h = 0; h < s.heads; ++h) lens.push_back(valid_length(b, s.batch, s.n));
      mask_ = attend::ValidLens::per_batch(lens);
    }
    keep_ = sdpa_keep(as);
    const auto four = [&](const Tensor3<float>& X) { return to_torch(X.data(), {s.batch, s.heads, s.n, s.d}); };
    q_ = four(Q_);
    k_ = four(K_);
    v_ = four(V_);
    q16_ = q_.to(torch::kBFloat16);
    k16_ = k_.to(torch::kBFloat16);
    v16_ = v_.to(torch::kBFloat16);
    keep16_ = keep_;
  }

  Problem problem() const {
    const double b = s_.batch, h = s_.heads, n = s_.n, d = s_.d;
    return {"kernel",
            attend::detail::message('(', s_.batch, ',', s_.heads, ',', s_.n, ',', s_.d, ')',
                                    s_.mask == MaskKind::none ? "" : " ",
                                    s_.mask == MaskKind::none ? "" : mask_name(s_.mask)),
            attend::detail::message('d', s_.d, "_h", s_.heads),
            "",
            s_.batch,
            s_.n,
            4 * b * h * n * n * d};
  }

  Tensor3<float> attend_kernel(attend::DotProductAttention<float>& a) { return a(Q_, K_, V_, mask_); }
  torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return keep_.defined() ? at::scaled_dot_product_attention(q, k, v, keep_)
                           : at::scaled_dot_product_attention(q, k, v, {}, 0.0, s_.mask == MaskKind::causal);
  }

  void check_agreement() {
    const torch::Tensor reference = sdpa(q_, k_, v_).reshape({s_.batch * s_.heads, s_.n, s_.d});
    const torch::Tensor bf16 = sdpa(q16_, k16_, v16_).to(torch::kFloat32).reshape({s_.batch * s_.heads, s_.n, s_.d});
    check(problem().label,
          {{"attend", relative_difference(attend_kernel(attention_), reference)},
           {"attend_tiled", relative_difference(attend_kernel(tiled_), reference)}},
          1e-4);
    std::printf("  bfloat16 SDPA against float SDPA: max |diff| / max |x| = %.1e\n",
                (bf16 - reference).abs().max().item<double>() / reference.abs().max().item<double>());
  }

  std::vector<Contender> contenders() {
    return {{"attend", [this] { benchmark::DoNotOptimize(attend_kernel(attention_).data()); }},
            {"attend_tiled", [this] { benchmark::DoNotOptimize(attend_kernel(tiled_).data()); }},
            {"torch_sdpa", [this] { benchmark::DoNotOptimize(sdpa(q_, k_, v_).data_ptr()); }},
            {"torch_sdpa_bf16", [this] { benchmark::DoNotOptimize(sdpa(q16_, k16_, v16_).data_ptr()); }}};
  }

 private:
  KernelShape s_;
  attend::DotProductAttention<float> attention_;  // AttentionPath::automatic
  attend::DotProductAttention<float> tiled_;      // AttentionPath::tiled
  Tensor3<float> Q_, K_, V_;                      // (batch * heads, n, d) each
  attend::Mask mask_;
  torch::Tensor q_, k_, v_, q16_, k16_, v16_;  // (batch, heads, n, d): float, bfloat16
  torch::Tensor keep_, keep16_;
};

// ---- Linear in bfloat16 (PyTorch 2 only) ------------------------------------------------------------------------------

// attend::Linear<bfloat16> ("attend") and Linear<float> ("attend_float") forward over (1, rows, in) into a
// preallocated output, against at::linear on bfloat16 tensors ("torch_linear_bf16": oneDNN's bf16 GEMM, on AVX512-BF16
// or AMX where the CPU has them) and on float ("torch_linear"); bias on, the same values (bfloat16 inputs and weights
// are the float ones rounded, by both libraries alike). A decoding step is 1 to 4 rows; prefill more. Every contender
// reads the same one weight each call (in cache as far as it fits, alike for all). FLOPs: 2 rows in out.
struct LinearShape {
  Index rows, in, out;
};

const LinearShape linear_shapes[] = {{1, 4096, 4096},   {1, 2048, 8192},  {4, 4096, 4096},
                                     {32, 2048, 2048},  {256, 1024, 1024}, {1024, 512, 512},
                                     {2048, 768, 2304}, {512, 4096, 4096}};

class LinearBf16 {
 public:
  static constexpr bool inference = true;

  explicit LinearBf16(const LinearShape& s)
      : s_(s), wide_(s.in, s.out, true, draws_wide_), narrow_(s.in, s.out, true, draws_narrow_),
        X_(1, s.rows, s.in), X16_(1, s.rows, s.in), Y_(1, s.rows, s.out), Y16_(1, s.rows, s.out) {
    attend::Generator draws(46);
    for (Index i = 0; i < X_.size(); ++i) {
      X_.data()[i] = draws.uniform(-1.0f, 1.0f);
      X16_.data()[i] = attend::bfloat16(X_.data()[i]);
    }
    x_ = to_torch(X_.data(), {1, s.rows, s.in});
    w_ = to_torch(wide_.weight().data(), {s.out, s.in});
    b_ = to_torch(wide_.bias().data(), {s.out});
    x16_ = x_.to(torch::kBFloat16);
    w16_ = w_.to(torch::kBFloat16);
    b16_ = b_.to(torch::kBFloat16);
  }

  Problem problem() const {
    return {"linear_bf16",
            attend::detail::message('(', s_.rows, ',', s_.in, ',', s_.out, ')'),
            attend::detail::message("in", s_.in),
            "",
            1,
            s_.rows,
            2.0 * s_.rows * s_.in * s_.out};
  }

  void check_agreement() {
    const torch::Tensor reference = at::linear(x_, w_, b_);
    const torch::Tensor reference16 = at::linear(x16_, w16_, b16_).to(torch::kFloat32);
    narrow_.forward(X16_, Y16_);
    Tensor3<float> Y16_wide(1, s_.rows, s_.out);  // attend's bfloat16 result, widened
    for (Index i = 0; i < Y16_.size(); ++i) Y16_wide.data()[i] = static_cast<float>(Y16_.data()[i]);
    wide_.forward(X_, Y_);
    check(problem().label,
          {{"attend_float", relative_difference(Y_, reference)},
           {"attend_bf16", relative_difference(Y16_wide, reference)},
           {"attend_bf16 vs torch_bf16", relative_difference(Y16_wide, reference16)}},
          1e-2);
  }

  std::vector<Contender> contenders() {
    return {{"attend", [this] { narrow_.forward(X16_, Y16_), benchmark::DoNotOptimize(Y16_.data()); }},
            {"attend_float", [this] { wide_.forward(X_, Y_), benchmark::DoNotOptimize(Y_.data()); }},
            {"torch_linear_bf16", [this] { benchmark::DoNotOptimize(at::linear(x16_, w16_, b16_).data_ptr()); }},
            {"torch_linear", [this] { benchmark::DoNotOptimize(at::linear(x_, w_, b_).data_ptr()); }}};
  }

 private:
  LinearShape s_;
  attend::Generator draws_wide_{45}, draws_narrow_{45};  // one seed: the same draws for both layers
  attend::Linear<float> wide_;               // (out, in) weights drawn from seed 45
  attend::Linear<attend::bfloat16> narrow_;  // the same, rounded
  Tensor3<float> X_;                         // (1, rows, in)
  Tensor3<attend::bfloat16> X16_;            // X_ rounded
  Tensor3<float> Y_;                         // (1, rows, out)
  Tensor3<attend::bfloat16> Y16_;            // (1, rows, out)
  torch::Tensor x_, w_, b_, x16_, w16_, b16_;
};

// ---- multi-head self-attention in bfloat16 (PyTorch 2 only) --------------------------------------------------------

// attend::MultiHeadAttention<bfloat16> ("attend") and <float> ("attend_float"), evaluation-mode forward into a
// preallocated output with a kept workspace, against PyTorch's on bfloat16 tensors: at::linear +
// at::scaled_dot_product_attention + at::linear ("torch_sdpa_bf16") and, without a mask, the fused
// at::_native_multi_head_attention ("torch_fused_bf16"); and PyTorch's float SDPA composition ("torch_sdpa"). The same
// values throughout: the bfloat16 weights and inputs are the float ones rounded (by both libraries alike). The mid and
// large shapes of the attention sweep (batch x n >= 1024, d >= 128).
class AttentionBf16 {
 public:
  static constexpr bool inference = true;

  explicit AttentionBf16(const AttentionShape& s)
      : s_(s), wide_(s.d, s.d, s.d, s.d, s.heads, 0.0f, false, draws_wide_),
        narrow_(s.d, s.d, s.d, s.d, s.heads, attend::bfloat16(0.0f), false, draws_narrow_), X_(s.batch, s.n, s.d),
        X16_(s.batch, s.n, s.d), Y_(s.batch, s.n, s.d), Y16_(s.batch, s.n, s.d), mask_(attend_mask(s)) {
    wide_.eval();
    narrow_.eval();
    attend::Generator draws(47);
    for (Index i = 0; i < X_.size(); ++i) {
      X_.data()[i] = draws.uniform(-1.0f, 1.0f);
      X16_.data()[i] = attend::bfloat16(X_.data()[i]);
    }
    torch::NoGradGuard no_grad;
    const auto weight = [&](attend::Linear<float>& layer) { return to_torch(layer.weight().data(), {s.d, s.d}); };
    in_proj_ = torch::cat({weight(wide_.W_q()), weight(wide_.W_k()), weight(wide_.W_v())}, 0);
    out_proj_ = weight(wide_.W_o());
    X_t_ = to_torch(X_.data(), {s.batch, s.n, s.d});
    in_proj16_ = in_proj_.to(torch::kBFloat16);
    out_proj16_ = out_proj_.to(torch::kBFloat16);
    X16_t_ = X_t_.to(torch::kBFloat16);
    zeros16_ = torch::zeros({3 * s.d}, torch::kBFloat16);
    keep_ = sdpa_keep(s);
  }

  static std::vector<AttentionShape> sweep(const std::vector<MaskKind>& masks, Index max_n) {
    std::vector<AttentionShape> shapes;
    for (const AttentionShape& s : attention_sweep(masks, max_n))
      if (s.batch * s.n >= 1024 && s.d >= 128) shapes.push_back(s);
    return shapes;
  }

  Problem problem() const {
    const double b = s_.batch, n = s_.n, d = s_.d;
    return {"attention_bf16",
            shape_label(s_),
            series_label(s_),
            "",
            s_.batch,
            s_.n,
            8 * b * n * d * d + 4 * b * n * n * d};
  }

  void check_agreement() {
    const torch::Tensor reference = torch_sdpa();
    wide_.forward(X_, X_, X_, mask_, wide_workspace_, Y_);
    narrow_.forward(X16_, X16_, X16_, mask_, narrow_workspace_, Y16_);
    Tensor3<float> Y16_wide(Y16_.dimensions());  // attend's bfloat16 result, widened
    for (Index i = 0; i < Y16_.size(); ++i) Y16_wide.data()[i] = static_cast<float>(Y16_.data()[i]);
    std::vector<std::pair<std::string, double>> differences = {
        {"attend_float", relative_difference(Y_, reference)},
        {"attend_bf16", relative_difference(Y16_wide, reference)},
        {"attend_bf16 vs torch_sdpa_bf16", relative_difference(Y16_wide, torch_sdpa_bf16().to(torch::kFloat32))}};
    check(problem().label, differences, 2e-2);
  }

  std::vector<Contender> contenders() {
    std::vector<Contender> all = {
        {"attend", [this] { narrow_.forward(X16_, X16_, X16_, mask_, narrow_workspace_, Y16_); }},
        {"attend_float", [this] { wide_.forward(X_, X_, X_, mask_, wide_workspace_, Y_); }},
        {"torch_sdpa_bf16", [this] { benchmark::DoNotOptimize(torch_sdpa_bf16().data_ptr()); }},
        {"torch_sdpa", [this] { benchmark::DoNotOptimize(torch_sdpa().data_ptr()); }}};
    if (s_.mask == MaskKind::none)
      all.push_back({"torch_fused_bf16", [this] {
                       benchmark::DoNotOptimize(std::get<0>(at::_native_multi_head_attention(
                                                                X16_t_, X16_t_, X16_t_, s_.d, s_.heads, in_proj16_,
                                                                zeros16_, out_proj16_, zeros16_.narrow(0, 0, s_.d), {},
                                                                /*need_weights=*/false))
                                                    .data_ptr());
                     }});
    return all;
  }

 private:
  torch::Tensor torch_sdpa() {
    return sdpa_attention(X_t_, in_proj_, out_proj_, s_.heads, keep_, s_.mask == MaskKind::causal);
  }
  torch::Tensor torch_sdpa_bf16() {
    return sdpa_attention(X16_t_, in_proj16_, out_proj16_, s_.heads, keep_, s_.mask == MaskKind::causal);
  }

  AttentionShape s_;
  attend::Generator draws_wide_{48}, draws_narrow_{48};  // one seed: the same draws for both modules
  attend::MultiHeadAttention<float> wide_;
  attend::MultiHeadAttention<attend::bfloat16> narrow_;  // the same weights, rounded
  Tensor3<float> X_;                                     // (batch, n, d)
  Tensor3<attend::bfloat16> X16_;                        // X_ rounded
  Tensor3<float> Y_;                                     // (batch, n, d)
  Tensor3<attend::bfloat16> Y16_;                        // (batch, n, d)
  attend::Mask mask_;
  attend::AttentionWorkspace<float> wide_workspace_;
  attend::AttentionWorkspace<attend::bfloat16> narrow_workspace_;
  torch::Tensor in_proj_, out_proj_, X_t_;                // (3d, d), (d, d), (batch, n, d)
  torch::Tensor in_proj16_, out_proj16_, X16_t_, zeros16_;  // the same in bfloat16; zero biases (3d)
  torch::Tensor keep_;                                    // (batch, 1, 1, n) or undefined: see MaskKind
};

// ---- grouped-query attention: prefill and decoding (PyTorch 2 only) ------------------------------------------------

// attend::scaled_dot_product_attention on (batch, steps, heads * d) — Q with `heads` heads, K and V with `kv_heads`,
// each key/value head read in place for its group — into a preallocated output, against at::scaled_dot_product_attention
// on contiguous (batch, heads, steps, d) tensors: with enable_gqa=true (PyTorch's own grouped-query path), and after
// repeat_interleave of K and V to `heads` heads (what transformers' repeat_kv does before SDPA). A prefill shape is
// causal self-attention over n steps; a decode shape is `queries` queries (1: one token) against n cached steps, no
// mask. FLOPs: 4 b heads queries n d (halved for causal prefill).
struct GroupedShape {
  Index batch, heads, kv_heads, queries, n, d;
  bool causal;
};

const GroupedShape grouped_shapes[] = {{1, 32, 8, 512, 512, 128, true},  {1, 32, 8, 2048, 2048, 128, true},
                                       {4, 16, 4, 1024, 1024, 64, true}, {1, 32, 8, 1, 1024, 128, false},
                                       {1, 32, 8, 1, 8192, 128, false},  {1, 32, 8, 1, 32768, 128, false},
                                       {8, 32, 8, 1, 4096, 128, false},  {1, 32, 8, 4, 8192, 128, false}};

class Grouped {
 public:
  static constexpr bool inference = true;

  explicit Grouped(const GroupedShape& s)
      : s_(s),
        Q_(s.batch, s.queries, s.heads * s.d),
        K_(s.batch, s.n, s.kv_heads * s.d),
        V_(s.batch, s.n, s.kv_heads * s.d),
        out_(s.batch, s.queries, s.heads * s.d) {
    attend::Generator generator(45);
    for (Tensor3<float>* X : {&Q_, &K_, &V_})
      for (Index i = 0; i < X->size(); ++i) X->data()[i] = generator.uniform(-1.0f, 1.0f);
    if (s.causal) mask_ = attend::Mask::causal();
    // (batch, steps, heads * d) -> (batch, heads, steps, d), contiguous: SDPA's favoured layout
    const auto four = [](const Tensor3<float>& X, Index heads) {
      const Index b = X.dimension(0), t = X.dimension(1), d = X.dimension(2) / heads;
      return to_torch(X.data(), {b, t, heads, d}).transpose(1, 2).contiguous();
    };
    q_ = four(Q_, s.heads);
    k_ = four(K_, s.kv_heads);
    v_ = four(V_, s.kv_heads);
  }

  Problem problem() const {
    const double flops = 4.0 * s_.batch * s_.heads * s_.queries * s_.n * s_.d * (s_.causal ? 0.5 : 1.0);
    return {"gqa",
            attend::detail::message('(', s_.batch, ',', s_.heads, '/', s_.kv_heads, ',', s_.queries, ',', s_.n, ',',
                                    s_.d, ')', s_.causal ? " causal" : ""),
            s_.queries == 1 ? "decode" : "prefill",
            "",
            s_.batch,
            s_.n,
            flops};
  }

  void attend_call() {
    attend::scaled_dot_product_attention(Q_, K_, V_, s_.heads, s_.kv_heads, mask_, options_, nullptr, out_);
  }
  torch::Tensor sdpa_gqa() { return at::scaled_dot_product_attention(q_, k_, v_, {}, 0.0, s_.causal, {}, true); }
  torch::Tensor sdpa_repeated() {
    const int64_t group = s_.heads / s_.kv_heads;
    return at::scaled_dot_product_attention(q_, k_.repeat_interleave(group, 1), v_.repeat_interleave(group, 1), {},
                                            0.0, s_.causal);
  }

  void check_agreement() {
    attend_call();
    // (batch, heads, queries, d) -> (batch, queries, heads * d), as attend's output
    const torch::Tensor reference =
        sdpa_gqa().transpose(1, 2).contiguous().reshape({s_.batch, s_.queries, s_.heads * s_.d});
    check(problem().label, {{"attend", relative_difference(out_, reference)}}, 1e-4);
  }

  std::vector<Contender> contenders() {
    return {{"attend", [this] { attend_call(); benchmark::DoNotOptimize(out_.data()); }},
            {"torch_sdpa_gqa", [this] { benchmark::DoNotOptimize(sdpa_gqa().data_ptr()); }},
            {"torch_sdpa_repeat_kv", [this] { benchmark::DoNotOptimize(sdpa_repeated().data_ptr()); }}};
  }

 private:
  GroupedShape s_;
  Tensor3<float> Q_, K_, V_, out_;  // (batch, queries, heads * d), (batch, n, kv_heads * d) twice, as Q_
  attend::Mask mask_;
  attend::ScoreOptions<float> options_;
  torch::Tensor q_, k_, v_;  // (batch, heads, queries, d), (batch, kv_heads, n, d) twice
};
#endif

// ---- a transformer encoder layer: forward and a training step (PyTorch 2 only) -------------------------------------

// attend::TransformerEncoderBlock (post-norm, ReLU, FFN width 4d, dropout 0; built from the torch layer's state dict by
// transformer_encoder_layer_from_torch) against PyTorch's three ways to run nn.TransformerEncoderLayer:
//   torch_layer   torch::nn::TransformerEncoderLayer, the module, on its (n, batch, d) layout; the mask as a key-padding
//                 mask or a float attention mask
//   torch_fused   at::_transformer_encoder_layer_fwd, the fused kernel behind Python's fast path (evaluation only, no
//                 mask), on (batch, n, d)
//   torch_sdpa    the layer written out over PyTorch 2's blocks on (batch, n, d): at::linear for Q, K, V in one
//                 product, at::scaled_dot_product_attention, at::linear, X + ... and at::layer_norm, at::linear, relu,
//                 at::linear, Y + ... and at::layer_norm
// FLOPs of one forward pass (2 per multiply-add of the products): the attention's 8 b n d^2 + 4 b n^2 d and the FFN's
// 2 x 2 b n d (4d) = 16 b n d^2; a training step counts three times the forward's. The bound: a plain GEMM of the
// layer's size, (b n, d) x (d, 4d) (the FFN's first product; at::mm and Eigen's, timed in the same rounds, the
// faster counts), gives a rate; "bound" is PyTorch's fastest time over the time of the layer's FLOPs at that rate:
// the t/att a layer running every FLOP at plain-GEMM speed would reach; "%bound" is attend's best/att over it.
#if TORCH_VERSION_MAJOR >= 2
const AttentionShape encoder_shapes[] = {{32, 32, 256, 8}, {8, 128, 256, 8}, {8, 128, 512, 8},
                                         {4, 256, 512, 8}, {2, 512, 256, 8}, {2, 1024, 512, 8}};

// The sweep of the encoder-layer parts: every shape with each mask asked for.
std::vector<AttentionShape> encoder_sweep(const std::vector<MaskKind>& masks) {
  std::vector<AttentionShape> sweep;
  for (MaskKind mask : masks)
    for (AttentionShape s : encoder_shapes) {
      s.mask = mask;
      sweep.push_back(s);
    }
  return sweep;
}

// The weights of one nn.TransformerEncoderLayer, and the layer written out over them. X: (batch, n, d) -> (batch, n,
// d); keep (batch, 1, 1, n) or undefined; causal: is_causal.
struct TorchEncoderWeights {
  torch::Tensor in_w, in_b, out_w, out_b, w1, b1, w2, b2, n1w, n1b, n2w, n2b;  // (3d, d), (3d), (d, d), (d), ...

  explicit TorchEncoderWeights(torch::nn::TransformerEncoderLayer& layer) {
    auto p = layer->named_parameters();
    in_w = p["self_attn.in_proj_weight"], in_b = p["self_attn.in_proj_bias"];
    out_w = p["self_attn.out_proj.weight"], out_b = p["self_attn.out_proj.bias"];
    w1 = p["linear1.weight"], b1 = p["linear1.bias"], w2 = p["linear2.weight"], b2 = p["linear2.bias"];
    n1w = p["norm1.weight"], n1b = p["norm1.bias"], n2w = p["norm2.weight"], n2b = p["norm2.bias"];
  }

  torch::Tensor layer(const torch::Tensor& X, Index heads, const torch::Tensor& keep, bool causal) const {
    const int64_t b = X.size(0), n = X.size(1), d = X.size(2);
    const torch::Tensor qkv = at::linear(X, in_w, in_b).view({b, n, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
    const torch::Tensor heads_out = keep.defined()  // (b, heads, n, d / heads)
                                        ? at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], keep)
                                        : at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], {}, 0.0, causal);
    const torch::Tensor A = at::linear(heads_out.transpose(1, 2).reshape({b, n, d}), out_w, out_b);
    const torch::Tensor Y = at::layer_norm(X + A, {d}, n1w, n1b, 1e-5);
    const torch::Tensor F = at::linear(at::relu(at::linear(Y, w1, b1)), w2, b2);
    return at::layer_norm(Y + F, {d}, n2w, n2b, 1e-5);
  }
};

// What both encoder parts share: the shape, attend's block and libtorch's layer on the same weights, inputs, masks
// and the plain GEMM of the bound.
class EncoderCase {
 public:
  explicit EncoderCase(const AttentionShape& s, std::uint64_t seed)
      : s_(s),
        torch_layer_(layer_options(s, seed)),
        block_(attend::transformer_encoder_layer_from_torch(state_dict(torch_layer_), s.heads)),
        weights_(torch_layer_),
        X_(s.batch, s.n, s.d),
        dY_(s.batch, s.n, s.d),
        mask_(attend_mask(s)),
        gemm_a_(s.batch * s.n, s.d),
        gemm_b_(s.d, 4 * s.d),
        gemm_c_(s.batch * s.n, 4 * s.d) {
    attend::Generator generator(seed);
    for (Tensor3<float>* T : {&X_, &dY_})
      for (Index i = 0; i < T->size(); ++i) T->data()[i] = generator.uniform(-1.0f, 1.0f);
    gemm_a_.setRandom();
    gemm_b_.setRandom();
    X_batch_first_ = to_torch(X_.data(), {s.batch, s.n, s.d});
    dY_batch_first_ = to_torch(dY_.data(), {s.batch, s.n, s.d});
    X_seq_first_ = X_batch_first_.transpose(0, 1).contiguous();
    dY_seq_first_ = dY_batch_first_.transpose(0, 1).contiguous();
    key_padding_ = key_padding_mask(s);
    block_mask_ = causal_block_mask(s);
    keep_ = sdpa_keep(s);
    gemm_a_torch_ = to_torch(gemm_a_.data(), {s.batch * s.n, s.d});
    gemm_b_torch_ = to_torch(gemm_b_.data(), {s.d, 4 * s.d});
  }

  Problem problem(const char* part, double multiple, const char* note) const {
    const double b = s_.batch, n = s_.n, d = s_.d;
    return {part,
            shape_label(s_),
            attend::detail::message('d', s_.d, s_.mask == MaskKind::none ? "" : "_",
                                    s_.mask == MaskKind::none ? "" : mask_name(s_.mask)),
            note,
            s_.batch,
            s_.n,
            multiple * (24 * b * n * d * d + 4 * b * n * n * d),
            8 * b * n * d * d};
  }

  // The plain GEMMs of the bound, (b n, d) x (d, 4d): libtorch's and Eigen's.
  std::vector<Contender> gemms() {
    return {{"gemm_torch", [this] { benchmark::DoNotOptimize(at::mm(gemm_a_torch_, gemm_b_torch_).data_ptr()); }},
            {"gemm_eigen", [this] {
               gemm_c_.noalias() = gemm_a_ * gemm_b_;
               benchmark::DoNotOptimize(gemm_c_.data());
             }}};
  }

 protected:
  // The layer's options; seeds libtorch's generator first, so that its initial weights are the same in every run.
  static torch::nn::TransformerEncoderLayerOptions layer_options(const AttentionShape& s, std::uint64_t seed) {
    torch::manual_seed(seed);
    return torch::nn::TransformerEncoderLayerOptions(s.d, s.heads).dim_feedforward(4 * s.d).dropout(0.0);
  }

  // The layer's parameters under nn.TransformerEncoderLayer's names, as attend's StateDict.
  static attend::StateDict<float> state_dict(torch::nn::TransformerEncoderLayer& layer) {
    attend::StateDict<float> dict;
    for (const auto& item : layer->named_parameters()) {
      const torch::Tensor t = item.value().detach().contiguous();
      attend::NamedTensor<float> named;
      named.shape.assign(t.sizes().begin(), t.sizes().end());
      named.values.assign(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
      dict[item.key()] = std::move(named);
    }
    return dict;
  }

  using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  AttentionShape s_;
  torch::nn::TransformerEncoderLayer torch_layer_;
  attend::TransformerEncoderBlock<float> block_;
  TorchEncoderWeights weights_;
  Tensor3<float> X_, dY_;  // (batch, n, d) each
  attend::Mask mask_;
  RowMatrix gemm_a_, gemm_b_, gemm_c_;             // (b n, d), (d, 4d), (b n, 4d)
  torch::Tensor X_batch_first_, dY_batch_first_;  // (batch, n, d) each
  torch::Tensor X_seq_first_, dY_seq_first_;      // (n, batch, d) each
  torch::Tensor key_padding_, block_mask_, keep_;  // see MaskKind
  torch::Tensor gemm_a_torch_, gemm_b_torch_;      // as gemm_a_, gemm_b_
};

class EncoderLayer : public EncoderCase {
 public:
  static constexpr bool inference = true;

  explicit EncoderLayer(const AttentionShape& s) : EncoderCase(s, 46) {
    block_.eval();
    torch_layer_->eval();
  }

  Problem problem() const { return EncoderCase::problem("encoder", 1, "forward"); }

  Tensor3<float> attend_forward() { return block_(X_, mask_); }  // (batch, n, d)
  torch::Tensor torch_layer() { return torch_layer_->forward(X_seq_first_, block_mask_, key_padding_); }  // (n, b, d)
  torch::Tensor torch_fused() {  // (batch, n, d)
    const TorchEncoderWeights& w = weights_;
    return at::_transformer_encoder_layer_fwd(X_batch_first_, s_.d, s_.heads, w.in_w, w.in_b, w.out_w, w.out_b,
                                              /*use_gelu=*/false, /*norm_first=*/false, 1e-5, w.n1w, w.n1b, w.n2w,
                                              w.n2b, w.w1, w.b1, w.w2, w.b2);
  }
  torch::Tensor torch_sdpa() {  // (batch, n, d)
    return weights_.layer(X_batch_first_, s_.heads, keep_, s_.mask == MaskKind::causal);
  }

  void check_agreement() {
    const torch::Tensor reference = torch_layer().transpose(0, 1).contiguous();  // (batch, n, d)
    const auto against = [&](const torch::Tensor& t) {
      return (t - reference).abs().max().item<double>() / reference.abs().max().item<double>();
    };
    std::vector<std::pair<std::string, double>> differences = {
        {"attend", relative_difference(as_attend([&] { return attend_forward(); }), reference)},
        {"torch_sdpa", against(torch_sdpa())}};
    if (s_.mask == MaskKind::none) differences.push_back({"torch_fused", against(torch_fused())});
    check(problem().label, differences, 1e-4);
  }

  std::vector<Contender> contenders() {
    std::vector<Contender> all = {
        {"attend", [this] { benchmark::DoNotOptimize(attend_forward().data()); }},
        {"torch_layer", [this] { benchmark::DoNotOptimize(torch_layer().data_ptr()); }},
        {"torch_sdpa", [this] { benchmark::DoNotOptimize(torch_sdpa().data_ptr()); }}};
    if (s_.mask == MaskKind::none)
      all.push_back({"torch_fused", [this] { benchmark::DoNotOptimize(torch_fused().data_ptr()); }});
    for (Contender& g : gemms()) all.push_back(std::move(g));
    return all;
  }
};

// One training step: forward, then backward from a fixed output gradient; the parameters' gradients accumulate on
// both sides (neither zeroes them). attend's block in training mode against the module and the written-out layer with
// autograd, X requiring its gradient.
class EncoderTraining : public EncoderCase {
 public:
  static constexpr bool inference = false;  // libtorch needs autograd here

  explicit EncoderTraining(const AttentionShape& s) : EncoderCase(s, 47) {
    block_.train();
    torch_layer_->train();
    X_batch_first_.requires_grad_(true);
    X_seq_first_.requires_grad_(true);
  }

  Problem problem() const { return EncoderCase::problem("encoder_training", 3, "forward + backward"); }

  Tensor3<float> attend_step() {  // dX, (batch, n, d)
    block_(X_, mask_);  // records what backward() reads
    return block_.backward(dY_);
  }
  torch::Tensor torch_layer_step() {  // dX, (n, batch, d)
    X_seq_first_.mutable_grad() = torch::Tensor();
    torch_layer_->forward(X_seq_first_, block_mask_, key_padding_).backward(dY_seq_first_);
    return X_seq_first_.grad();
  }
  torch::Tensor torch_sdpa_step() {  // dX, (batch, n, d)
    X_batch_first_.mutable_grad() = torch::Tensor();
    weights_.layer(X_batch_first_, s_.heads, keep_, s_.mask == MaskKind::causal).backward(dY_batch_first_);
    return X_batch_first_.grad();
  }

  // dX compared as a whole, |a - t|_F / |t|_F, not entry by entry: ReLU's derivative jumps at 0, and among the
  // b n 4d hidden units of the FFN a few lie within rounding of 0, so that one implementation takes the other side;
  // such a unit changes its row of dX by a term of the row's own size (1e-2 of max |dX| and up to 2e-4 of |dX|_F at
  // these shapes, seen between torch_layer and torch_sdpa as often as between either and attend; agreement otherwise
  // 3e-7). The forward, which is continuous there, is checked entry by entry in the part before.
  void check_agreement() {
    const torch::Tensor dX = torch_layer_step().transpose(0, 1).contiguous();  // (batch, n, d)
    const auto against = [&](const torch::Tensor& t) { return ((t - dX).norm() / dX.norm()).item<double>(); };
    const Tensor3<float> attend_dX = as_attend([&] { return attend_step(); });
    check(problem().label,
          {{"attend", against(to_torch(attend_dX.data(), {s_.batch, s_.n, s_.d}))},
           {"torch_sdpa", against(torch_sdpa_step())}},
          2e-3);
  }

  std::vector<Contender> contenders() {
    std::vector<Contender> all = {
        {"attend", [this] { benchmark::DoNotOptimize(attend_step().data()); }},
        {"torch_layer", [this] { benchmark::DoNotOptimize(torch_layer_step().data_ptr()); }},
        {"torch_sdpa", [this] { benchmark::DoNotOptimize(torch_sdpa_step().data_ptr()); }}};
    for (Contender& g : gemms()) all.push_back(std::move(g));
    return all;
  }
};
#endif

// ---- RNN ------------------------------------------------------------------------------------------------------------

struct RnnShape {
  Index batch, steps, input, hidden;
};

const RnnShape rnn_shapes[] = {{32, 64, 128, 128}, {8, 512, 256, 256}, {64, 128, 512, 512}};

class Rnn {
 public:
  static constexpr bool inference = true;  // libtorch without autograd, like attend's eval mode

  explicit Rnn(const RnnShape& s)
      : s_(s),
        generator_(7),
        rnn_(s.input, s.hidden, generator_),
        X_(s.batch, s.steps, s.input),
        torch_rnn_(torch::nn::RNNOptions(s.input, s.hidden).nonlinearity(torch::kTanh).batch_first(true)) {
    for (Index i = 0; i < X_.size(); ++i) X_.data()[i] = generator_.uniform(-1.0f, 1.0f);
    // libtorch gets attend's weights, under nn.RNN's names.
    torch::NoGradGuard no_grad;
    auto parameters = torch_rnn_->named_parameters();
    parameters["weight_ih_l0"].copy_(to_torch(rnn_.weight_ih().data(), {s.hidden, s.input}));
    parameters["weight_hh_l0"].copy_(to_torch(rnn_.weight_hh().data(), {s.hidden, s.hidden}));
    parameters["bias_ih_l0"].copy_(to_torch(rnn_.bias_ih().data(), {s.hidden}));
    parameters["bias_hh_l0"].copy_(to_torch(rnn_.bias_hh().data(), {s.hidden}));
    torch_rnn_->eval();
    X_torch_ = to_torch(X_.data(), {s.batch, s.steps, s.input});
  }

  Problem problem() const {
    return {"rnn",
            attend::detail::message('(', s_.batch, ',', s_.steps, ',', s_.input, ',', s_.hidden, ')'),
            attend::detail::message('i', s_.input, "_h", s_.hidden),
            "",
            s_.batch,
            s_.steps,
            2.0 * static_cast<double>(rnn_.multiply_adds(s_.batch, s_.steps))};
  }

  Tensor3<float> attend_forward() { return rnn_.forward(X_); }                                 // (batch, steps, hidden)
  torch::Tensor torch_forward() { return std::get<0>(torch_rnn_->forward(X_torch_)); }  // (batch, steps, hidden)

  void check_agreement() {
    const torch::Tensor expected = torch_forward();  // (batch, steps, hidden)
    check(problem().label, {{"attend", relative_difference(as_attend([&] { return attend_forward(); }), expected)}},
          1e-4);
  }

  std::vector<Contender> contenders() {
    return {{"attend", [this] { benchmark::DoNotOptimize(attend_forward().data()); }},
            {"torch", [this] { benchmark::DoNotOptimize(torch_forward().data_ptr()); }}};
  }

 private:
  RnnShape s_;
  attend::Generator generator_;
  attend::RNN<float> rnn_;
  Tensor3<float> X_;  // (batch, steps, input)
  torch::nn::RNN torch_rnn_;
  torch::Tensor X_torch_;  // (batch, steps, input)
};

// ---- Conv1d ---------------------------------------------------------------------------------------------------------

struct ConvShape {
  Index batch, steps, in, out, kernel;
};

const ConvShape conv_shapes[] = {{32, 128, 64, 64, 3}, {8, 1024, 128, 128, 5}, {1, 8192, 256, 256, 3}};

class Conv {
 public:
  static constexpr bool inference = true;  // libtorch without autograd, like attend's eval mode

  explicit Conv(const ConvShape& s)
      : s_(s),
        generator_(11),
        conv_(s.in, s.out, s.kernel, true, generator_),
        X_(s.batch, s.steps, s.in),
        torch_conv_(torch::nn::Conv1dOptions(s.in, s.out, s.kernel).padding(torch::kSame)) {
    for (Index i = 0; i < X_.size(); ++i) X_.data()[i] = generator_.uniform(-1.0f, 1.0f);
    // libtorch gets attend's weights: the same (out, in, kernel) layout.
    torch::NoGradGuard no_grad;
    torch_conv_->weight.copy_(to_torch(conv_.weight().data(), {s.out, s.in, s.kernel}));
    torch_conv_->bias.copy_(to_torch(conv_.bias().data(), {s.out}));
    torch_conv_->eval();
    X_torch_ = to_torch(X_.data(), {s.batch, s.steps, s.in}).transpose(1, 2).contiguous();
  }

  Problem problem() const {
    return {"conv1d",
            attend::detail::message('(', s_.batch, ',', s_.steps, ',', s_.in, ',', s_.out, ',', s_.kernel, ')'),
            attend::detail::message('c', s_.in, "_k", s_.kernel),
            "",
            s_.batch,
            s_.steps,
            2.0 * static_cast<double>(conv_.multiply_adds(s_.batch, s_.steps))};
  }

  Tensor3<float> attend_forward() { return conv_.forward(X_); }          // (batch, steps, out)
  torch::Tensor torch_forward() { return torch_conv_(X_torch_); }  // (batch, out, steps)

  void check_agreement() {
    const torch::Tensor expected = torch_forward().transpose(1, 2).contiguous();  // (batch, steps, out)
    check(problem().label, {{"attend", relative_difference(as_attend([&] { return attend_forward(); }), expected)}},
          1e-5);
  }

  std::vector<Contender> contenders() {
    return {{"attend", [this] { benchmark::DoNotOptimize(attend_forward().data()); }},
            {"torch", [this] { benchmark::DoNotOptimize(torch_forward().data_ptr()); }}};
  }

 private:
  ConvShape s_;
  attend::Generator generator_;
  attend::Conv1d<float> conv_;
  Tensor3<float> X_;  // (batch, steps, in)
  torch::nn::Conv1d torch_conv_;
  torch::Tensor X_torch_;  // (batch, in, steps)
};

// ---- the ceiling ----------------------------------------------------------------------------------------------------

// C = A B, all (1024, 1024) float, by Eigen and by OpenBLAS; the ceiling is the faster.
constexpr Index gemm_size = 1024;

struct Sgemm {
  Eigen::MatrixXf A = Eigen::MatrixXf::Random(gemm_size, gemm_size);  // (1024, 1024)
  Eigen::MatrixXf B = Eigen::MatrixXf::Random(gemm_size, gemm_size);  // (1024, 1024)
  Eigen::MatrixXf C = Eigen::MatrixXf(gemm_size, gemm_size);          // (1024, 1024)

  std::vector<Contender> contenders() {
    std::vector<Contender> c{{"eigen", [this] {
                                C.noalias() = A * B;
                                benchmark::DoNotOptimize(C.data());
                              }}};
#ifdef ATTEND_BENCH_OPENBLAS
    c.push_back({"openblas", [this] {
                   const int n = static_cast<int>(gemm_size);
                   cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(), n,
                               0.0f, C.data(), n);
                   benchmark::DoNotOptimize(C.data());
                 }});
#endif
    return c;
  }

  static constexpr double flops = 2.0 * gemm_size * gemm_size * gemm_size;

  // The ceiling from the sgemm contenders' measurements: the faster one's GFLOP/s.
  static double ceiling(const std::vector<Measurement>& measurements) {
    double best = 0;
    for (const Measurement& m : measurements) best = std::max(best, flops / m.median / 1e9);
    return best;
  }

  // GFLOP/s of each, and the ceiling, printed on one line.
  void measure(const Options& options, int threads, const char* when, std::vector<Result>& results) {
    const Problem problem{"sgemm", "(1024,1024,1024)", std::string("sgemm_") + when, "", 1, gemm_size, flops};
    const std::vector<Contender> list = contenders();
    for (const Contender& c : list) c.run();  // warm-up
    std::vector<Measurement> measured = alternate(list, options, threads);
    const double best = ceiling(measured);
    Result r{threads, problem, std::move(measured), best};
    std::printf("  sgemm 1024^3, %d thread%s, %s:", threads, threads > 1 ? "s" : "", when);
    for (const Measurement& m : r.measurements) std::printf("  %s %.1f GFLOP/s", m.name.c_str(), r.gflops(m.name));
    std::printf("\n");
    results.push_back(std::move(r));
  }
};

// ---- one part at one thread count -----------------------------------------------------------------------------------

template <class Shape, std::size_t N>
std::vector<Shape> as_vector(const Shape (&shapes)[N]) {
  return {shapes, shapes + N};
}

// Builds each shape's case, checks agreement, times its contenders and the sgemms in the same rounds, prints its row.
template <class Case, class Shape>
void run_part(const std::vector<Shape>& shapes, const Table& table, const std::string& title, const Options& options,
              int threads, Sgemm& sgemm, std::vector<Result>& results,
              const std::function<bool(const Shape&)>& wanted = nullptr) {
  std::vector<std::unique_ptr<Case>> cases;
  std::printf("\n");
  for (const Shape& s : shapes) {
    if (wanted && !wanted(s)) continue;
    cases.push_back(std::make_unique<Case>(s));  // outside inference mode: libtorch's modules get parameters
    c10::InferenceMode inference_mode(Case::inference);  // no autograd bookkeeping, like attend's eval mode
    cases.back()->check_agreement();
  }
  table.header(title);
  for (auto& c : cases) {
    c10::InferenceMode inference_mode(Case::inference);
    std::vector<Contender> contenders = c->contenders();
    const std::size_t own = contenders.size();
    for (Contender& g : sgemm.contenders()) contenders.push_back({"sgemm_" + g.name, std::move(g.run)});
    std::vector<Measurement> measured = alternate(contenders, options, threads);
    const std::vector<Measurement> gemms(measured.begin() + static_cast<std::ptrdiff_t>(own), measured.end());
    measured.resize(own);
    Result r{threads, c->problem(), std::move(measured), Sgemm::ceiling(gemms)};
    table.row(r);
    results.push_back(std::move(r));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const Options options = parse(argc, argv);
  const nlohmann::ordered_json config = configuration();
  print_configuration(config);

  std::vector<Result> results;
  Sgemm sgemm;
#if TORCH_VERSION_MAJOR >= 2
  const Table attention_table("(batch,n,d,heads)",
                              {"attend", "attend_direct", "attend_tiled", "torch_mha", "torch_fused", "torch_sdpa"});
  const Table training_table("(batch,n,d,heads)",
                             {"attend", "attend_direct", "attend_tiled", "torch_mha", "torch_sdpa"});
  const Table kernel_table("(batch,heads,n,d)", {"attend", "attend_tiled", "torch_sdpa", "torch_sdpa_bf16"});
  const Table grouped_table("(b,H/G,q,n,d)", {"attend", "torch_sdpa_gqa", "torch_sdpa_repeat_kv"});
  const Table encoder_table("(batch,n,d,heads)",
                            {"attend", "torch_layer", "torch_fused", "torch_sdpa", "gemm_torch", "gemm_eigen"});
  const Table encoder_training_table("(batch,n,d,heads)",
                                     {"attend", "torch_layer", "torch_sdpa", "gemm_torch", "gemm_eigen"});
  const Table linear_table("(rows,in,out)", {"attend", "attend_float", "torch_linear_bf16", "torch_linear"});
  const Table attention_bf16_table("(batch,n,d,heads)",
                                   {"attend", "attend_float", "torch_sdpa_bf16", "torch_fused_bf16", "torch_sdpa"});
#else
  const Table attention_table("(batch,n,d,heads)",
                              {"attend", "attend_direct", "attend_tiled", "torch_mha", "torch_fused"});
  const Table training_table("(batch,n,d,heads)", {"attend", "attend_direct", "attend_tiled", "torch_mha"});
#endif
  const Table rnn_table("(b,steps,in,hid)", {"attend", "torch"});
  const Table conv_table("(b,steps,in,out,k)", {"attend", "torch"});
  for (int threads : options.threads) {
    set_threads(threads, options);
    const std::string fewer = options.rounds > 3 ? attend::detail::message(" (3 where a call takes over ",
                                                                            options.long_call, " s)")
                                                 : std::string();
    std::printf("\n==== %d thread%s; times are medians of %d alternating rounds%s of >= %g s per contender\n", threads,
                threads > 1 ? "s" : "", options.rounds, fewer.c_str(), options.min_time);
    print_threads();
    sgemm.measure(options, threads, "start", results);
    const std::string at = attend::detail::message(", ", threads, " thread", threads > 1 ? "s" : "",
                                                   "; att = attend; t/att above 1: attend is faster");
    if (options.attention)
      run_part<Attention>(attention_sweep(options.masks, options.max_n), attention_table,
                          "multi-head self-attention" + at, options, threads, sgemm, results);
    if (options.training)
      run_part<AttentionTraining>(attention_sweep(options.masks, std::min<Index>(options.max_n, 4096)),
                                  training_table,
                                  "multi-head self-attention, one training step (forward + backward)" + at, options,
                                  threads, sgemm, results);
#if TORCH_VERSION_MAJOR >= 2
    if (options.kernel) {
      std::vector<KernelShape> shapes;
      for (MaskKind mask : options.masks)
        for (KernelShape k : kernel_shapes)
          if (k.n <= options.max_n) {
            k.mask = mask;
            shapes.push_back(k);
          }
      run_part<Kernel>(shapes, kernel_table, "scaled dot-product attention alone, (batch,heads,n,d)" + at, options,
                       threads, sgemm, results);
    }
    if (options.gqa) {
      std::vector<GroupedShape> shapes;
      for (const GroupedShape& g : grouped_shapes)
        if (g.n <= options.max_n) shapes.push_back(g);
      run_part<Grouped>(shapes, grouped_table,
                        "grouped-query attention, prefill and decoding, (batch,heads/kv_heads,queries,n,d)" + at,
                        options, threads, sgemm, results);
    }
    if (options.encoder)
      run_part<EncoderLayer>(encoder_sweep(options.masks), encoder_table,
                             "transformer encoder layer (post-norm, relu, ffn 4d), forward" + at, options, threads,
                             sgemm, results);
    if (options.encoder_training)
      run_part<EncoderTraining>(encoder_sweep(options.masks), encoder_training_table,
                                "transformer encoder layer, one training step (forward + backward)" + at, options,
                                threads, sgemm, results);
    if (options.linear_bf16)
      run_part<LinearBf16>(as_vector(linear_shapes), linear_table,
                           "Linear, forward; att = attend's bfloat16 (attend_float: its float)" + at, options, threads,
                           sgemm, results);
    if (options.mha_bf16)
      run_part<AttentionBf16>(AttentionBf16::sweep(options.masks, options.max_n), attention_bf16_table,
                              "multi-head self-attention, forward; att = attend's bfloat16 (attend_float: its float)" +
                                  at,
                              options, threads, sgemm, results);
#endif
    if (options.rnn)
      run_part<Rnn>(as_vector(rnn_shapes), rnn_table, "RNN (tanh, batch_first)" + at, options, threads, sgemm,
                    results);
    if (options.conv1d)
      run_part<Conv>(as_vector(conv_shapes), conv_table, "Conv1d (padding same)" + at, options, threads, sgemm,
                     results);
    std::printf("\n");
    sgemm.measure(options, threads, "end", results);
  }

  if (!options.csv.empty()) {
    write_csv(options.csv, results);
    std::printf("\nwrote %s\n", options.csv.c_str());
  }
  if (!options.json.empty()) {
    write_json(options.json, config, options, results);
    std::printf("wrote %s\n", options.json.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_vs_libtorch: %s\n", e.what());
  return 1;
}
