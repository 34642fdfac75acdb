// examples/compare_encoders.cpp — the chapter's closing table, measured on this machine.
//
// To encode n tokens of width d, the chapter compares a CNN (kernel k), an RNN and self-attention:
//
//                     computational cost    sequential operations    maximum path length
//   CNN               O(k n d^2)            O(1)                     O(n/k)
//   RNN               O(n d^2)              O(n)                     O(n)
//   self-attention    O(n^2 d)              O(1)                     O(1)
//
// This program builds the three encoders of attend/sequence_encoders.hpp and checks each column:
//   (a) cost: it times one forward pass on one thread (the median of several timings, after a warm-up) over a
//       range of n at fixed d, and of d at fixed n, and fits the exponent of time by least squares on log-log axes;
//       beside it, the exponent of the exact FLOP count over the same sizes, and the seed's.
//   (b) sequential operations: the length of each encoder's dependency chain, and what it does to parallelism:
//       each encoder's forward on one sequence with attend's kernels on 1 thread and on 2
//       (attend::set_num_threads), which share out the work inside a stage but cannot run two stages at once.
//   (c) maximum path length: how many hops a change of x_1 needs to reach y_n, measured by running the chain
//       stage by stage (attend::measured_path_length), against the formula.
//   (d) learning: one training step (forward, then backward into the input and the parameters) of each encoder's
//       layer, MultiHeadAttention, RNN and Conv1d, against n and against d on one thread, beside its forward pass:
//       the backward pass has the forward's complexity class, at about twice its products.
//
// usage: compare_encoders [output_directory] [--long]
//   writes compare_encoders.csv (n, seconds per forward of each encoder at d = 32), compare_encoders.gp and, when
//   gnuplot is installed, compare_encoders.png: time against n on log-log axes. --long sweeps wider and repeats
//   more (a few minutes); the default run takes well under a minute.
#include <algorithm>
#include <atomic>
#include <attend/complexity.hpp>
#include <attend/conv1d.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/random.hpp>
#include <attend/rnn.hpp>
#include <attend/sequence_encoders.hpp>
#include <attend/threads.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "plot.hpp"

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace ex = attend_examples;
using attend::Index;
using attend::Tensor3;
using Clock = std::chrono::steady_clock;

namespace {

// How much to measure.
struct Plan {
  int repeats;                  // timings per size; their median is kept
  std::vector<Index> n_values;  // (a) time against n, all three encoders at d = n_sweep_d
  Index n_sweep_d;
  Index attention_d_n;                    // (a) self-attention against d, at this n
  std::vector<Index> attention_d_values;  //     heads of width 16: d / 16 heads
  Index recurrent_d_n;                    // (a) RNN and CNN against d, at this n
  std::vector<Index> rnn_d_values;        //     the RNN's W_hh (d^2 floats) within this core's L2 cache
  std::vector<Index> cnn_d_values;
  std::vector<Index> kernel_values;  // (a) CNN against k, at n = recurrent_d_n, d = kernel_d
  Index kernel_d;
  Index threads_n;                      // (b) one sequence of this length,
  std::vector<Index> threads_d_values;  //     at these widths
  std::vector<Index> path_n_values;     // (c)
  std::vector<Index> train_n_values;    // (d) a training step against n at d = train_n_d
  Index train_n_d;
  std::vector<Index> train_d_values;  // (d) against d at n = train_d_n
  Index train_d_n;
};

Plan default_plan() {
  return {7,
          {512, 724, 1024, 1448, 2048, 2896, 4096},
          32,
          1448,
          {16, 32, 48, 64, 96, 128},
          256,
          {128, 160, 192, 224, 256, 320, 384, 448, 512},
          {128, 192, 256, 384, 512, 768, 1024},
          {1, 3, 5, 9, 17},
          256,
          512,
          {64, 256},
          {2, 4, 8, 16, 32, 64, 128},
          {512, 1024, 2048},
          32,
          {64, 128, 256},
          256};
}

Plan long_plan() {
  return {11,
          {256, 362, 512, 724, 1024, 1448, 2048, 2896, 4096, 5792, 8192},
          32,
          2048,
          {16, 32, 48, 64, 96, 128, 192, 256},
          256,
          {96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480, 512},
          {128, 192, 256, 384, 512, 768, 1024, 1536, 2048},
          {1, 3, 5, 9, 17, 33},
          256,
          1024,
          {32, 64, 128, 256, 512},
          {2, 4, 8, 16, 32, 64, 128, 256},
          {256, 512, 1024, 2048, 4096},
          32,
          {64, 96, 128, 192, 256, 384},
          256};
}

constexpr Index attention_head_width = 16;  // every self-attention head is 16 wide: d / 16 heads
constexpr Index cnn_kernel = 3;             // the CNN's kernel in (a) and (b)

double seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

// Every timed forward writes an element of its result here, so that the optimiser cannot drop it; atomic, as the
// control of (b) runs two forwards at once.
std::atomic<float> sink{0};

// (batch, n, d), uniform in [-1, 1).
Tensor3<float> random_input(Index batch, Index n, Index d, std::uint64_t seed) {
  attend::Generator generator(seed);
  Tensor3<float> X(batch, n, d);  // (batch, n, d)
  for (Index i = 0; i < X.size(); ++i) X.data()[i] = generator.uniform<float>(-1.0f, 1.0f);
  return X;
}

// Per function of `runs`: the median over `repeats` rounds of the seconds one call takes, by
// std::chrono::steady_clock. Each function is first called once untimed (caches, the allocator's first touch of its
// pages); then every round times each function in turn, over as many calls as fill about 20 ms, so that the clock's
// resolution and a single interruption weigh little, and a change in the machine's load during the measurement
// touches all of them alike.
std::vector<double> median_seconds(const std::vector<std::function<void()>>& runs, int repeats) {
  std::vector<int> calls;
  for (const auto& run : runs) {
    run();
    const auto start = Clock::now();
    run();
    calls.push_back(std::max(1, static_cast<int>(0.02 / std::max(seconds(Clock::now() - start), 1e-7))));
  }
  std::vector<std::vector<double>> samples(runs.size());
  for (int r = 0; r < repeats; ++r)
    for (std::size_t f = 0; f < runs.size(); ++f) {
      const auto begin = Clock::now();
      for (int c = 0; c < calls[f]; ++c) runs[f]();
      samples[f].push_back(seconds(Clock::now() - begin) / calls[f]);
    }
  std::vector<double> medians;
  for (const auto& s : samples) medians.push_back(attend::median(s));
  return medians;
}

// One forward pass of `encoder` on X (batch, n, d), as a function to time; it keeps its own copy of X.
template <class Encoder>
std::function<void()> forward_run(Encoder& encoder, const Tensor3<float>& X) {
  return [&encoder, X] {
    const Tensor3<float> Y = encoder(X);  // (batch, n, d)
    sink.store(Y.data()[0], std::memory_order_relaxed);
  };
}

// One forward pass of `encoder` on a random (1, n, d) input, as a function to time.
template <class Encoder>
std::function<void()> forward_run(Encoder& encoder, Index n, Index d) {
  return forward_run(encoder, random_input(1, n, d, 7));
}

// (d): one layer of each encoder, in training mode (no dropout): operator() records, backward() differentiates.
struct TrainingLayers {
  TrainingLayers(Index d, attend::Generator& generator)
      : attention(d, d, d, d, std::max<Index>(d / 16, 1), 0.0f, false, generator),
        rnn(d, d, generator),
        cnn(d, d, 3, true, generator) {}
  attend::MultiHeadAttention<float> attention;
  attend::RNN<float> rnn;
  attend::Conv1d<float> cnn;
};

// Per layer of `layers` (self-attention, RNN, CNN): its forward pass on X, then its training step (the forward and
// the backward from a gradient of ones), as functions to time.
std::vector<std::function<void()>> training_runs(TrainingLayers& layers, const Tensor3<float>& X) {
  Tensor3<float> ones(X.dimensions());  // (1, n, d): dL/dY for L = sum(Y)
  ones.setConstant(1.0f);
  const auto keep = [](const Tensor3<float>& Y) { sink.store(Y.data()[0], std::memory_order_relaxed); };
  return {[&layers, X, keep] { keep(layers.attention.forward(X, X, X)); },
          [&layers, X, ones, keep] {
            layers.attention(X, X, X);
            keep(layers.attention.backward(ones).queries);
          },
          [&layers, X, keep] { keep(layers.rnn.forward(X)); },
          [&layers, X, ones, keep] {
            layers.rnn(X);
            keep(layers.rnn.backward(ones));
          },
          [&layers, X, keep] { keep(layers.cnn.forward(X)); },
          [&layers, X, ones, keep] {
            layers.cnn(X);
            keep(layers.cnn.backward(ones));
          }};
}

struct Sweep {
  std::vector<double> seconds, flops;  // per size: seconds per forward (median), FLOPs of one forward
};

// One encoder per size, make(size), timed on a (1, n, d) input with (n, d) = shape(size); all sizes interleaved.
template <class Encoder, class Make, class Shape>
Sweep sweep(const std::vector<Index>& sizes, const Make& make, const Shape& shape, int repeats) {
  std::vector<Encoder> encoders;
  for (Index size : sizes) encoders.push_back(make(size));
  std::vector<std::function<void()>> runs;
  Sweep result;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto [n, d] = shape(sizes[i]);
    runs.push_back(forward_run(encoders[i], n, d));
    result.flops.push_back(encoders[i].flops(1, n));
  }
  result.seconds = median_seconds(runs, repeats);
  return result;
}

std::vector<double> as_doubles(const std::vector<Index>& values) { return {values.begin(), values.end()}; }

// "2.05 (seed 2) ok", or OFF when the fitted exponent is more than 0.2 from the seed's.
std::string verdict(double fitted, double seed) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << fitted << " (seed " << std::setprecision(0) << seed << ") "
      << (std::abs(fitted - seed) <= 0.2 ? "ok " : "OFF");
  return out.str();
}

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

// ---- (b): the library's threads ---------------------------------------------------------------------------------

// What (b) measures of one encoder on one sequence; NaN where not measured (without OpenMP, no 2-thread forward).
struct ThreadTiming {
  double one_thread = std::numeric_limits<double>::quiet_NaN();   // seconds per forward, attend::set_num_threads(1)
  double two_threads = std::numeric_limits<double>::quiet_NaN();  //                   and attend::set_num_threads(2)
  float difference = std::numeric_limits<float>::quiet_NaN();     // max |2 threads - 1 thread| over the output
  double control = std::numeric_limits<double>::quiet_NaN();      // 2 x one forward alone / two at once
};

// A std::thread of its own for the control's second forward, kept across the timings: a thread started for every
// forward would also pay, inside the timing, for its first touch of memory (a new thread gets an allocator arena
// of its own), more than a forward of half a millisecond costs. It sleeps between jobs.
class HelperThread {
 public:
  HelperThread() : thread_([this] { serve(); }) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return ready_; });
  }
  HelperThread(const HelperThread&) = delete;
  HelperThread& operator=(const HelperThread&) = delete;
  ~HelperThread() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  // Starts job on the helper thread and returns; wait() returns once it is done. One job at a time; job must
  // live until then.
  void start(const std::function<void()>& job) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
    }
    changed_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return job_ == nullptr; });
  }

 private:
  void serve() {
    // OpenMP's thread count is a setting of each thread: this one starts at the default (OMP_NUM_THREADS, or one
    // per hardware thread) and keeps attend's kernels on itself. set_num_threads also writes Eigen's count, which
    // the other threads' forwards read: the constructor returns only after it.
    attend::set_num_threads(1);
    std::unique_lock<std::mutex> lock(mutex_);
    ready_ = true;
    changed_.notify_all();
    for (;;) {
      changed_.wait(lock, [this] { return quit_ || job_ != nullptr; });
      if (quit_) return;
      lock.unlock();
      (*job_)();  // start() leaves job_ alone until wait() has seen it cleared
      lock.lock();
      job_ = nullptr;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;             // ready_, quit_ or job_ changed
  const std::function<void()>* job_ = nullptr;  // the job to run, or none
  bool ready_ = false;                          // serve() has set its thread count
  bool quit_ = false;
  std::thread thread_;  // last: it starts once the members above exist
};

// The control: encoder's forward on X and its copy's (a self-attention call keeps its weights and its workspace in
// the encoder) run at the same time, the copy's on `helper`, each with attend's kernels on its own thread only,
// against encoder's forward alone on one thread, in the same rounds. Returns 2 x alone / both at once: 2 when the
// second core does as much as the first. Leaves the calling thread on 1 thread.
template <class Encoder>
double control_speedup(Encoder& encoder, Encoder& copy, const Tensor3<float>& X, HelperThread& helper, int repeats) {
  attend::set_num_threads(1);
  const std::function<void()> own = forward_run(encoder, X), other = forward_run(copy, X);
  const std::vector<double> t = median_seconds({own,
                                                [&] {
                                                  helper.start(other);
                                                  own();
                                                  helper.wait();
                                                }},
                                               repeats);
  return 2 * t[0] / t[1];
}

// encoder's forward on X with attend::set_num_threads(1) and with (2), in the same rounds, into timing's
// one_thread, two_threads and difference; without OpenMP only one_thread. Leaves the calling thread on 1 thread.
template <class Encoder>
void time_on_threads(Encoder& encoder, const Tensor3<float>& X, int repeats, ThreadTiming& timing) {
  const std::function<void()> own = forward_run(encoder, X);
  const std::function<void()> on_one_thread = [&] {
    attend::set_num_threads(1);
    own();
  };
  if (attend::has_openmp()) {
    attend::set_num_threads(1);
    const Tensor3<float> one = encoder(X);  // (1, n, d)
    attend::set_num_threads(2);
    const Tensor3<float> two = encoder(X);  // (1, n, d)
    timing.difference = Eigen::Tensor<float, 0, Eigen::RowMajor>((one - two).abs().maximum())();
    const std::vector<double> t = median_seconds({on_one_thread,
                                                  [&] {
                                                    attend::set_num_threads(2);
                                                    own();
                                                  }},
                                                 repeats);
    timing.one_thread = t[0];
    timing.two_threads = t[1];
  } else {
    timing.one_thread = median_seconds({on_one_thread}, repeats)[0];
  }
  attend::set_num_threads(1);
}

// (b)'s encoders at one width d, each with a copy for the control's second forward, and their input.
struct EncodersAt {
  EncodersAt(Index d, Index layers, Index n, attend::Generator generator)
      : attention(d, d / attention_head_width, layers, std::max<Index>(n, 1000), generator),
        rnn(d, layers, generator),
        cnn(d, cnn_kernel, layers, generator),
        attention_copy(attention),
        rnn_copy(rnn),
        cnn_copy(cnn),
        X(random_input(1, n, d, 8)) {}

  Index d() const { return attention.num_hiddens(); }

  attend::SelfAttentionEncoder<float> attention;
  attend::RNNEncoder<float> rnn;
  attend::CNNEncoder<float> cnn;
  attend::SelfAttentionEncoder<float> attention_copy;
  attend::RNNEncoder<float> rnn_copy;
  attend::CNNEncoder<float> cnn_copy;
  Tensor3<float> X;  // (1, n, d)
};

// The 1-minute load average, or -1 where /proc/loadavg is missing.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return in ? load : -1;
}

// ---- the picture ------------------------------------------------------------------------------------------------

std::string plot_script(const std::vector<Index>& n_values, const std::vector<double>& attention,
                        const std::vector<double>& rnn, Index d) {
  // Dashed guides of slope 2 and 1 through the last self-attention and RNN points.
  const double n_last = static_cast<double>(n_values.back());
  std::ostringstream gp;
  gp << std::setprecision(12) << ex::png_preamble(800, 560, "compare_encoders.png")
     << "set title 'One forward pass against sequence length n (d = " << d << ", batch 1, one layer, float)'\n"
     << "set xlabel 'n (tokens)'\n"
     << "set ylabel 'seconds per forward (median)'\n"
     << "set logscale xy\n"
     << "set xrange [" << static_cast<double>(n_values.front()) / 1.25 << ":" << n_last * 1.25 << "]\n"
     << "set grid xtics ytics mxtics mytics\n"
     << "set key top left box\n"
     << "n_last = " << n_last << "\n"
     << "quadratic(x) = " << attention.back() << " * (x / n_last)**2\n"
     << "linear(x) = " << rnn.back() << " * (x / n_last)\n"
     << "plot 'compare_encoders.csv' using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'self-attention', \\\n"
     << "     '' using 1:3 with linespoints lw 2 pt 5 lc rgb '#ff7f0e' title 'RNN', \\\n"
     << "     '' using 1:4 with linespoints lw 2 pt 9 lc rgb '#2ca02c' title 'CNN, k = " << cnn_kernel << "', \\\n"
     << "     quadratic(x) with lines dt 2 lc rgb '#1f77b4' title 'slope 2 (n^2)', \\\n"
     << "     linear(x) with lines dt 2 lc rgb '#ff7f0e' title 'slope 1 (n)'\n";
  return gp.str();
}

}  // namespace

// Every encoder returns a fresh (batch, n, d) output per layer: at n = 4096, d = 32, blocks of 512 KiB, taken and freed
// on every forward pass. glibc serves such blocks by mmap or returns the top of its heap to the system once it holds
// more than its trim threshold, and both thresholds move with what the process freed earlier: depending on the
// encoders timed before, a forward pass then faults its output's pages in again on every call, which doubled the
// CNN's and the RNN's time at n = 4096 in some runs and bent the fitted exponents. Fixed thresholds keep the memory
// with the process, so that the timings are those of the encoders.
void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

int main(int argc, char** argv) try {
  keep_freed_memory();
  // Arguments: [output_directory] [--long], in any order.
  bool long_run = false;
  std::vector<char*> positional{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--long")
      long_run = true;
    else if (arg.rfind("--", 0) == 0)
      throw std::invalid_argument("unknown option " + arg + "; usage: " + argv[0] + " [output_directory] [--long]");
    else
      positional.push_back(argv[i]);
  }
  if (positional.size() > 2)
    throw std::invalid_argument(std::string("usage: ") + argv[0] + " [output_directory] [--long]");
  const ex::fs::path dir = ex::output_directory(static_cast<int>(positional.size()), positional.data());
  const Plan plan = long_run ? long_plan() : default_plan();
  const auto program_start = Clock::now();

  std::cout << "The chapter's table:\n\n"
            << "                  computational cost   sequential operations   maximum path length\n"
            << "  CNN (kernel k)  O(k n d^2)           O(1)                    O(n/k)\n"
            << "  RNN             O(n d^2)             O(n)                    O(n)\n"
            << "  self-attention  O(n^2 d)             O(1)                    O(1)\n\n"
            << "Measured here: float, one sequence (batch 1); Eigen " << EIGEN_WORLD_VERSION << '.'
            << EIGEN_MAJOR_VERSION << '.' << EIGEN_MINOR_VERSION << " with " << Eigen::SimdInstructionSetsInUse()
            << "; " << std::thread::hardware_concurrency() << " hardware threads;\n"
            << (attend::has_openmp() ? "OpenMP on (attend::num_threads() = " + std::to_string(attend::num_threads()) +
                                           "); attend's kernels and Eigen kept on one thread in (a), on 1 and 2 in (b)"
                                     : std::string("no OpenMP, so attend's kernels and Eigen compute on one thread"))
            << (long_run ? "; the long sweep" : "") << ".\nEvery time is the median of " << plan.repeats
            << " timings after a warm-up; an exponent is the least-squares slope of log time\nagainst log size."
            << " Self-attention heads are " << attention_head_width << " wide (d / " << attention_head_width
            << " heads); the CNN's kernel is " << cnn_kernel << " unless said.\n";

  // The thread count the program started with (OMP_NUM_THREADS, or OpenMP's default: one per hardware thread),
  // restored after (a) and (b), which set their own.
  const int start_threads = attend::num_threads();

  // ---- (a) computational cost ----------------------------------------------------------------------------------
  // The cost of one thread's work: attend's kernels share their work among attend::num_threads() threads, so on
  // more than one the large sizes of a sweep, whose work is worth a team, would run on several and the small ones on
  // one, bending the fits. attend::set_num_threads(1) keeps attend's kernels and Eigen's products on one thread.
  attend::set_num_threads(1);
  // A sweep times all its (encoder, size) pairs in the same rounds (see median_seconds).
  const Index d_fixed = plan.n_sweep_d;
  const std::size_t n_count = plan.n_values.size();
  std::cout << "\n(a) Computational cost: one forward pass, one layer, on one thread\n\n"
            << "  time against n at d = " << d_fixed << " (ms):\n"
            << "       n   self-attention        RNN    CNN k=" << cnn_kernel << '\n';
  attend::Generator generator(2024);
  // One self-attention encoder per n, all with the same parameters: each keeps the attention weights of its last
  // call, (heads, n, n), and a call that replaced another size's would also pay for releasing them.
  std::vector<attend::SelfAttentionEncoder<float>> attention_n(
      n_count, attend::SelfAttentionEncoder<float>(d_fixed, d_fixed / attention_head_width, 1,
                                                   std::max<Index>(plan.n_values.back(), 1000), generator));
  const attend::RNNEncoder<float> rnn_n(d_fixed, 1, generator);
  const attend::CNNEncoder<float> cnn_n(d_fixed, cnn_kernel, 1, generator);
  // Self-attention apart: its large n sweep the caches, which the small RNN and CNN calls timed right after would
  // pay for, the more as n grows.
  std::vector<std::function<void()>> attention_runs, recurrent_runs;
  for (std::size_t i = 0; i < n_count; ++i) {
    attention_runs.push_back(forward_run(attention_n[i], plan.n_values[i], d_fixed));
    recurrent_runs.push_back(forward_run(rnn_n, plan.n_values[i], d_fixed));
    recurrent_runs.push_back(forward_run(cnn_n, plan.n_values[i], d_fixed));
  }
  const std::vector<double> attention_seconds = median_seconds(attention_runs, plan.repeats);
  const std::vector<double> recurrent_seconds = median_seconds(recurrent_runs, plan.repeats);
  Sweep in_n[3];  // self-attention, RNN, CNN: per n
  ex::Table csv{{"n", "self_attention_seconds", "rnn_seconds", "cnn_seconds"}, {}};
  for (std::size_t i = 0; i < n_count; ++i) {
    const Index n = plan.n_values[i];
    const double flops[3] = {attention_n[i].flops(1, n), rnn_n.flops(1, n), cnn_n.flops(1, n)};
    in_n[0].seconds.push_back(attention_seconds[i]);
    in_n[1].seconds.push_back(recurrent_seconds[2 * i]);
    in_n[2].seconds.push_back(recurrent_seconds[2 * i + 1]);
    for (std::size_t e = 0; e < 3; ++e) in_n[e].flops.push_back(flops[e]);
    csv.rows.push_back({static_cast<double>(n), in_n[0].seconds[i], in_n[1].seconds[i], in_n[2].seconds[i]});
    std::cout << std::setw(8) << n << std::setw(17) << fixed(1e3 * in_n[0].seconds[i], 3) << std::setw(11)
              << fixed(1e3 * in_n[1].seconds[i], 3) << std::setw(11) << fixed(1e3 * in_n[2].seconds[i], 3) << '\n';
  }
  attention_n.clear();
  const std::vector<double> n_axis = as_doubles(plan.n_values);
  double e_n[3];  // exponents of time in n
  std::ostringstream flop_line, time_line;
  for (std::size_t e = 0; e < 3; ++e) {
    e_n[e] = attend::loglog_slope(n_axis, in_n[e].seconds);
    const int width = e == 0 ? 8 : 11;
    flop_line << std::setw(width) << fixed(attend::loglog_slope(n_axis, in_n[e].flops), 2);
    time_line << std::setw(width) << fixed(e_n[e], 2);
  }
  std::cout << "  exponent of the FLOP count   " << flop_line.str() << '\n'
            << "  exponent of time             " << time_line.str() << '\n';

  // The other sweeps: size, ms, GFLOP/s; then the exponents; returns the exponent of time.
  const auto report = [&](const char* size_name, const std::vector<Index>& sizes, const Sweep& sweep) {
    std::cout << std::setw(8) << size_name << "         ms   GFLOP/s\n";
    for (std::size_t i = 0; i < sizes.size(); ++i)
      std::cout << std::setw(8) << sizes[i] << std::setw(11) << fixed(1e3 * sweep.seconds[i], 3) << std::setw(10)
                << fixed(sweep.flops[i] / sweep.seconds[i] / 1e9, 1) << '\n';
    const std::vector<double> axis = as_doubles(sizes);
    const double exponent = attend::loglog_slope(axis, sweep.seconds);
    std::cout << "  exponent of the FLOP count " << fixed(attend::loglog_slope(axis, sweep.flops), 2) << ", of time "
              << fixed(exponent, 2) << '\n';
    return exponent;
  };

  const Index n_attention = plan.attention_d_n;
  std::cout << "\n  self-attention, time against d at n = " << n_attention << " (d / " << attention_head_width
            << " heads):\n";
  const auto e_attention_d =
      report("d", plan.attention_d_values,
             sweep<attend::SelfAttentionEncoder<float>>(
                 plan.attention_d_values,
                 [&](Index d) {
                   return attend::SelfAttentionEncoder<float>(d, d / attention_head_width, 1,
                                                              std::max<Index>(n_attention, 1000), generator);
                 },
                 [&](Index d) { return std::make_pair(n_attention, d); }, plan.repeats));

  const Index n_recurrent = plan.recurrent_d_n;
  std::cout << "\n  RNN, time against d at n = " << n_recurrent << ":\n";
  const auto e_rnn_d =
      report("d", plan.rnn_d_values,
             sweep<attend::RNNEncoder<float>>(
                 plan.rnn_d_values, [&](Index d) { return attend::RNNEncoder<float>(d, 1, generator); },
                 [&](Index d) { return std::make_pair(n_recurrent, d); }, plan.repeats));
  std::cout << "  (only up to d = " << plan.rnn_d_values.back() << ": on one sequence every step is a matrix-vector"
            << " product that reads all of\n  W_hh, d^2 floats, and from d = 512 or so W_hh crowds a 1.25 MB L2 cache"
            << " like this machine's: every step\n  then slows down by a constant factor as W_hh streams from L3,"
            << " which would bend the fit upwards.)\n";

  std::cout << "\n  CNN (k=" << cnn_kernel << "), time against d at n = " << n_recurrent << ":\n";
  const auto e_cnn_d =
      report("d", plan.cnn_d_values,
             sweep<attend::CNNEncoder<float>>(
                 plan.cnn_d_values, [&](Index d) { return attend::CNNEncoder<float>(d, cnn_kernel, 1, generator); },
                 [&](Index d) { return std::make_pair(n_recurrent, d); }, plan.repeats));

  std::cout << "\n  CNN, time against the kernel size k at n = " << n_recurrent << ", d = " << plan.kernel_d << ":\n";
  const auto e_kernel =
      report("k", plan.kernel_values,
             sweep<attend::CNNEncoder<float>>(
                 plan.kernel_values, [&](Index k) { return attend::CNNEncoder<float>(plan.kernel_d, k, 1, generator); },
                 [&](Index /*k*/) { return std::make_pair(n_recurrent, plan.kernel_d); }, plan.repeats));

  std::cout << "\n  summary: the exponent of time, and the seed's; ok = within 0.2\n"
            << "                  in n                in d                exact FLOPs of one forward\n"
            << "  CNN k=" << cnn_kernel << "        " << verdict(e_n[2], 1) << "   " << verdict(e_cnn_d, 2)
            << "   L 2 b n k d^2    in k: " << verdict(e_kernel, 1) << "\n"
            << "  RNN            " << verdict(e_n[1], 1) << "   " << verdict(e_rnn_d, 2) << "   L 2 b (2n - 1) d^2\n"
            << "  self-attention " << verdict(e_n[0], 2) << "   " << verdict(e_attention_d, 1)
            << "   L (8 b n d^2 + 4 b n^2 d)\n"
            << "  (L layers, batch b; GEMM multiply-adds count 2 flops; softmax, tanh, biases and the positional\n"
            << "  encoding are not counted. Self-attention's 8 b n d^2 projections hide its n^2 d at small n: hence\n"
            << "  its large n. The RNN and the CNN are timed against d at large d, where the d^2 products outweigh\n"
            << "  the per-step and per-position overheads.)\n";

  attend::set_num_threads(start_threads);  // (a) is done

  // ---- (b) sequential operations -------------------------------------------------------------------------------
  // Each encoder's forward on attend's own threads: attend::set_num_threads(1) against (2), timed in the same
  // rounds, and the control (two single-threaded forwards at once).
  const Index layers = 2, n_chain = plan.threads_n;
  std::cout << "\n(b) Sequential operations: one sequence of n = " << n_chain << ", " << layers << " layers, "
            << (attend::has_openmp() ? "on 1 and 2 of attend's threads" : "on 1 thread") << "\n\n";
  if (attend::has_openmp())
    std::cout << "  Each encoder's forward with attend::set_num_threads(1) and with (2), in the same rounds. On two\n"
              << "  threads attend shares out the work inside each stage, in pieces fixed by the shapes (not by the\n"
              << "  thread count): self-attention its Q, K, V and output projections (chunks of rows) and its\n"
              << "  (head, query block) work items; the CNN its chunks of output steps. The RNN shares only its\n"
              << "  input projection, one product over all n steps; its recurrence h_t = tanh(x_t W_xh + h_{t-1} W_hh\n"
              << "  + b) is n steps one after another, each a small matrix-vector product run on one thread, and\n"
              << "  the second core has nothing to do for them.\n";
  else
    std::cout << "  (b) needs OpenMP, and this build has none (attend::has_openmp() is false): attend's kernels\n"
              << "  run on the calling thread whatever attend::set_num_threads says, so there is no 2-thread\n"
              << "  forward to time. The 2-thread columns are left empty; the control still shows what a second\n"
              << "  core would give.\n";
  std::cout << "  stages: the sequential operations, L for self-attention and the CNN, L n for the RNN.\n"
            << "  speedup = time on 1 thread / time on 2 threads. control = 2 x time on 1 thread / time of two\n"
            << "  independent single-threaded forwards at once, one per std::thread (batch parallelism, open to\n"
            << "  all three), timed first, in rounds of its own: what the second core gave then, roughly the\n"
            << "  ceiling of the speedup (timed apart, the two can disagree on a busy machine).\n";
  const double load = load_average();
  if (load >= 0)
    std::cout << "  The load average when (b) began: " << fixed(load, 2) << " on "
              << std::thread::hardware_concurrency() << " hardware threads"
              << (load > 0.5 ? ";\n  other processes were running, and the control shows what they left.\n" : ".\n");
  if (load > 0.5 && attend::has_openmp())
    std::cout << "  attend's threads meet at the end of every loop they share, so while another process holds the\n"
              << "  second core, 2 threads can be slower than 1.\n";
  std::cout << "\n       d   encoder           stages        1 thread   2 threads   speedup   control   "
               "work per stage   max |diff|\n";
  // Shown as "-" where (b) has no 2-thread forward.
  const auto or_dash = [](double value, const std::string& text) {
    return std::isnan(value) ? std::string("-") : text;
  };
  std::vector<EncodersAt> widths;  // one set of encoders per d
  widths.reserve(plan.threads_d_values.size());
  for (Index d : plan.threads_d_values) widths.emplace_back(d, layers, n_chain, attend::Generator(99));
  std::vector<std::vector<ThreadTiming>> timings(widths.size(), std::vector<ThreadTiming>(3));  // per d: per encoder
  // The controls first, all of them: after a loop they shared, OpenMP's idle threads spin on the second core for a
  // while before they sleep (a few ms in GCC's libgomp, 200 ms in LLVM's libomp), which would slow the control's
  // helper. Until the first 2-thread forward below, there are none.
  {
    HelperThread helper;
    for (std::size_t w = 0; w < widths.size(); ++w) {
      EncodersAt& at = widths[w];
      timings[w][0].control = control_speedup(at.attention, at.attention_copy, at.X, helper, plan.repeats);
      timings[w][1].control = control_speedup(at.rnn, at.rnn_copy, at.X, helper, plan.repeats);
      timings[w][2].control = control_speedup(at.cnn, at.cnn_copy, at.X, helper, plan.repeats);
    }
  }
  bool attention_tiled = true;  // whether every self-attention call took the tiled path
  for (std::size_t w = 0; w < widths.size(); ++w) {
    EncodersAt& at = widths[w];
    time_on_threads(at.attention, at.X, plan.repeats, timings[w][0]);
    time_on_threads(at.rnn, at.X, plan.repeats, timings[w][1]);
    time_on_threads(at.cnn, at.X, plan.repeats, timings[w][2]);
    for (Index l = 0; l < layers; ++l) attention_tiled = attention_tiled && at.attention.attention(l).last_call_tiled();
    const Index stages[] = {at.attention.sequential_operations(n_chain), at.rnn.sequential_operations(n_chain),
                            at.cnn.sequential_operations(n_chain)};
    const char* names[] = {"self-attention", "RNN", "CNN k=3"};
    const char* counts[] = {" = L", " = L n", " = L"};
    for (std::size_t e = 0; e < 3; ++e) {
      const ThreadTiming& t = timings[w][e];
      const double per_stage = t.one_thread / static_cast<double>(stages[e]);
      std::ostringstream difference;
      difference << std::setprecision(1) << std::scientific << t.difference;
      std::ostringstream row;
      row << std::setw(8) << (e == 0 ? std::to_string(at.d()) : "") << "   " << std::left << std::setw(18) << names[e]
          << std::setw(12) << std::to_string(stages[e]) + counts[e] << std::right << std::setw(10)
          << fixed(1e3 * t.one_thread, 2) + " ms" << std::setw(12)
          << or_dash(t.two_threads, fixed(1e3 * t.two_threads, 2) + " ms") << std::setw(9)
          << or_dash(t.two_threads, fixed(t.one_thread / t.two_threads, 2) + "x") << std::setw(10)
          << fixed(t.control, 2) + "x" << std::setw(17)
          << (per_stage >= 1e-3 ? fixed(1e3 * per_stage, 2) + " ms" : fixed(1e6 * per_stage, 1) + " us")
          << std::setw(13) << or_dash(t.difference, difference.str());
      std::cout << row.str() << '\n';
    }
  }
  std::cout << "\n  Self-attention and the CNN have L = " << layers << " stages whatever n, and inside each the work of"
            << " the n positions\n"
            << "  depends only on the stage's input: it splits into pieces that any number of threads can share,\n"
            << "  and with p cores an O(1)-chain encoder can approach p times faster on one sequence. The RNN's\n"
            << "  L n = " << layers * n_chain << " stages are steps of microseconds (see the column), one after another"
            << " on one thread:\n"
            << "  more threads speed up only its input projection, so it gains at most that projection's share of\n"
            << "  the time (Amdahl's law), however many cores.\n";
  if (attend::has_openmp())
    std::cout << "  max |diff|: attend's pieces do not depend on the number of threads and each is computed by one\n"
              << "  thread in a fixed order, so 1 and 2 threads are designed to give the same bits: 0.\n";
  if (!attention_tiled)
    std::cout << "  (Some self-attention calls took the direct path, which forms the n x n weights: there its work\n"
              << "  items are whole (batch row, head) pairs, not (head, query block) items.)\n";
  attend::set_num_threads(start_threads);  // (b) is done

  // ---- (c) maximum path length ----------------------------------------------------------------------------------
  const Index path_d = 8, n_path_max = plan.path_n_values.back();
  attend::Generator path_generator(7);
  attend::SelfAttentionEncoder<float> path_attention(path_d, 2, 1, path_generator);
  const attend::RNNEncoder<float> path_rnn(path_d, 1, path_generator);
  const std::vector<Index> kernels{3, 4, 5, 7};
  std::vector<attend::CNNEncoder<float>> path_cnns;  // enough layers for x_1 to reach y_n at the largest n
  for (Index k : kernels) path_cnns.emplace_back(path_d, k, n_path_max - 1, path_generator);
  std::cout << "\n(c) Maximum path length: hops from x_1 to y_n, measured (perturb x_1, run the chain stage by stage,\n"
            << "    count the stages that carry the change further) = formula\n\n"
            << "       n   self-attention        RNN";
  for (Index k : kernels) std::cout << "    CNN k=" << k;
  std::cout << '\n';
  bool all_agree = true;
  const auto cell = [&](Index measured, Index formula) {
    all_agree = all_agree && measured == formula;
    std::ostringstream out;
    out << measured << (measured == formula ? " = " : " != ") << formula;
    return out.str();
  };
  for (Index n : plan.path_n_values) {
    const Tensor3<float> X = random_input(1, n, path_d, 11);  // (1, n, 8)
    std::cout << std::setw(8) << n << std::setw(17)
              << cell(attend::measured_path_length(path_attention, X), path_attention.max_path_length_formula(n))
              << std::setw(11) << cell(attend::measured_path_length(path_rnn, X), path_rnn.max_path_length_formula(n));
    for (auto& cnn : path_cnns)
      std::cout << std::setw(12) << cell(attend::measured_path_length(cnn, X), cnn.max_path_length_formula(n));
    std::cout << '\n';
  }
  std::cout
      << "  " << (all_agree ? "every measurement agrees with its formula" : "SOME MEASUREMENTS DISAGREE") << ":\n"
      << "  self-attention 1 (O(1)); RNN n - 1 (O(n)); CNN ceil((n - 1) / floor((k - 1) / 2)) (O(n/k)). A 'same'\n"
      << "  convolution with an even k puts its extra tap on the right, so information moves right by\n"
      << "  (k - 2) / 2 per layer, not k / 2: k = 4 is no faster than k = 3 from x_1 to y_n.\n";

  // ---- (d) learning ---------------------------------------------------------------------------------------------
  // One layer of each encoder, on one thread as in (a): its forward pass and its training step, timed in the same
  // rounds, against n at d = train_n_d and against d at n = train_d_n.
  attend::set_num_threads(1);
  std::cout << "\n(d) Learning: one training step (forward + backward) of one layer, on one thread, beside the "
               "forward pass\n";
  const auto training_sweep = [&](const char* size_name, const std::vector<Index>& sizes, auto shape) {
    std::vector<TrainingLayers> layers;
    layers.reserve(sizes.size());
    std::vector<std::function<void()>> runs;
    for (Index size : sizes) {
      const auto [n, d] = shape(size);
      layers.emplace_back(d, generator);
      for (auto& run : training_runs(layers.back(), random_input(1, n, d, 13))) runs.push_back(run);
    }
    const std::vector<double> t = median_seconds(runs, plan.repeats);  // per size: 3 x (forward, training step)
    std::cout << std::setw(8) << size_name
              << "   self-attention: step ms (x fwd)      RNN: step ms (x fwd)      CNN k=3: step ms (x fwd)\n";
    std::vector<double> steps[3];
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::cout << std::setw(8) << sizes[i];
      for (std::size_t e = 0; e < 3; ++e) {
        const double forward = t[6 * i + 2 * e], step = t[6 * i + 2 * e + 1];
        steps[e].push_back(step);
        std::cout << std::setw(e == 0 ? 19 : 17) << fixed(1e3 * step, 3) << " (" << fixed(step / forward, 2) << ")";
      }
      std::cout << '\n';
    }
    std::cout << "  exponent of a step's time";
    for (std::size_t e = 0; e < 3; ++e)
      std::cout << std::setw(e == 0 ? 19 : 26) << fixed(attend::loglog_slope(as_doubles(sizes), steps[e]), 2);
    std::cout << '\n';
  };
  std::cout << "\n  against n at d = " << plan.train_n_d
            << " (self-attention: " << std::max<Index>(plan.train_n_d / 16, 1)
            << " heads; it takes the tiled path where its weights would pass 1 MiB):\n";
  training_sweep("n", plan.train_n_values, [&](Index n) { return std::make_pair(n, plan.train_n_d); });
  std::cout << "\n  against d at n = " << plan.train_d_n << ":\n";
  training_sweep("d", plan.train_d_values, [&](Index d) { return std::make_pair(plan.train_d_n, d); });
  std::cout << "  A backward pass repeats the forward's products about twice over (the gradient of the input and of\n"
            << "  the weights; self-attention also recomputes its weights on the tiled path), so a training step\n"
            << "  keeps the forward's exponents (self-attention n^2 d at large n, the RNN and the CNN n d^2) at 2.5\n"
            << "  to 4.5 times its time. The RNN's backward runs its n steps in reverse, one after another, as its\n"
            << "  forward does.\n";
  attend::set_num_threads(start_threads);  // (d) is done

  // ---- the CSV and the picture ----------------------------------------------------------------------------------
  std::cout << '\n';
  ex::write_csv(dir / "compare_encoders.csv", csv);
  ex::draw(dir, "compare_encoders", plot_script(plan.n_values, in_n[0].seconds, in_n[1].seconds, d_fixed));

  std::cout << "total time " << fixed(seconds(Clock::now() - program_start), 1) << " s\n";
  return 0;
} catch (const std::exception& error) {
  std::cerr << "compare_encoders: " << error.what() << '\n';
  return 1;
}
