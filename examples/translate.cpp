// examples/translate.cpp — d2l's Transformer (encoder-decoder) trained in C++ to translate English number words into
// digits written units first: "three hundred forty two" -> "2 4 3". The order of the words and of the digits differ
// ("twelve" is one word and two digits, "forty" a tens digit, a missing "hundred" a leading zero that is not
// written), so each output digit has to find its word by attention.
//
//   ./build/examples/translate [output_directory]
//
// The data: the numbers 0 .. 999 in words (made up here, no download), 900 for training and 100 held out. The model:
// TransformerEncoder and TransformerDecoder (2 blocks each, 32 hidden units, 4 heads, dropout 0.1), trained with
// teacher forcing (the decoder reads <bos> and the target shifted by one) on d2l's masked cross-entropy, Adam.
// Then greedy decoding of the held-out numbers token by token through the decoder's key/value caches, scored by
// d2l's BLEU (k = 2), and two pictures: the loss curve (translate_loss.png) and the encoder-decoder attention
// weights of the last decoder block for one sentence, per head (translate_attention.png, d2l's figure).
#include <attend/attend.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "plot.hpp"

namespace ex = attend_examples;
using attend::Index;
using attend::Matrix;
using attend::Tensor3;

namespace {

// ---- the task ------------------------------------------------------------------------------------------------------

const std::vector<std::string> ones = {"zero",    "one",     "two",       "three",    "four",
                                       "five",    "six",     "seven",     "eight",    "nine",
                                       "ten",     "eleven",  "twelve",    "thirteen", "fourteen",
                                       "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
const std::vector<std::string> tens = {"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
                                       "ninety"};

// n in [0, 999] in English words.
std::vector<std::string> words_of(int n) {
  std::vector<std::string> words;
  if (n >= 100) {
    words.push_back(ones[static_cast<std::size_t>(n / 100)]);
    words.push_back("hundred");
    n %= 100;
    if (n == 0) return words;
  }
  if (n < 20) {
    words.push_back(ones[static_cast<std::size_t>(n)]);
  } else {
    words.push_back(tens[static_cast<std::size_t>(n / 10)]);
    if (n % 10 != 0) words.push_back(ones[static_cast<std::size_t>(n % 10)]);
  }
  return words;
}

// n's decimal digits, units first: 342 -> "2", "4", "3".
std::vector<std::string> digits_of(int n) {
  std::vector<std::string> digits;
  do {
    digits.push_back(std::to_string(n % 10));
    n /= 10;
  } while (n > 0);
  return digits;
}

// Tokens: 0 <pad>, 1 <bos>, 2 <eos>, then the words.
struct Vocab {
  std::vector<std::string> tokens = {"<pad>", "<bos>", "<eos>"};
  std::map<std::string, Index> index;
  Index add(const std::string& token) {
    const auto found = index.find(token);
    if (found != index.end()) return found->second;
    tokens.push_back(token);
    return index[token] = static_cast<Index>(tokens.size()) - 1;
  }
  Index size() const { return static_cast<Index>(tokens.size()); }
};
constexpr Index pad = 0, bos = 1, eos = 2;

// A batch of sentences as (batch, steps) tokens, each followed by <eos> and padded; lens: the lengths with <eos>.
Matrix<Index> to_tokens(const std::vector<std::vector<Index>>& sentences, Index steps, std::vector<Index>& lens) {
  Matrix<Index> tokens = Matrix<Index>::Constant(static_cast<Index>(sentences.size()), steps, pad);
  lens.clear();
  for (std::size_t b = 0; b < sentences.size(); ++b) {
    const auto& s = sentences[b];
    for (std::size_t t = 0; t < s.size(); ++t) tokens(Index(b), Index(t)) = s[t];
    tokens(Index(b), Index(s.size())) = eos;
    lens.push_back(static_cast<Index>(s.size()) + 1);
  }
  return tokens;
}

// d2l's BLEU: exp(min(0, 1 - len_label / len_pred)) times, for n = 1 .. k, the clipped n-gram precision to the
// power 1 / 2^n.
double bleu(const std::vector<std::string>& pred, const std::vector<std::string>& label, int k) {
  const double len_pred = double(pred.size()), len_label = double(label.size());
  if (pred.empty()) return 0;
  double score = std::exp(std::min(0.0, 1 - len_label / len_pred));
  for (int n = 1; n <= k; ++n) {
    if (int(pred.size()) < n) return 0;
    std::map<std::string, int> label_subs;
    for (std::size_t i = 0; i + n <= label.size(); ++i) {
      std::string gram;
      for (int j = 0; j < n; ++j) gram += label[i + std::size_t(j)] + " ";
      ++label_subs[gram];
    }
    int matches = 0;
    for (std::size_t i = 0; i + n <= pred.size(); ++i) {
      std::string gram;
      for (int j = 0; j < n; ++j) gram += pred[i + std::size_t(j)] + " ";
      if (label_subs[gram] > 0) {
        ++matches;
        --label_subs[gram];
      }
    }
    score *= std::pow(double(matches) / (len_pred - n + 1), std::pow(0.5, n));
  }
  return score;
}

std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const auto& w : words) text += (text.empty() ? "" : " ") + w;
  return text;
}

// ---- pictures ------------------------------------------------------------------------------------------------------

std::string loss_script() {
  std::ostringstream gp;
  gp << ex::png_preamble(720, 360, "translate_loss.png")
     << "set title 'Number words to digits: d2l''s Transformer trained with attend (Adam)'\n"
     << "set xlabel 'epoch'\n"
     << "set ylabel 'masked cross-entropy loss'\n"
     << "set logscale y\n"
     << "set grid\n"
     << "plot 'translate_loss.csv' using 1:2 with linespoints lw 2 lc rgb '#1f77b4' title 'training loss'\n";
  return gp.str();
}

// One panel per head: the source words on x, the predicted digits (and <eos>) on y.
std::string attention_script(Index num_heads, const std::vector<std::string>& keys,
                             const std::vector<std::string>& queries) {
  std::ostringstream gp;
  gp << ex::png_preamble(int(260 * num_heads + 120), 340, "translate_attention.png") << ex::palette_reds()
     << "per_head = " << keys.size() * queries.size() << "\n"
     << "set cbrange [0:1]\nset cbtics scale 0\n"
     << "set xrange [-0.5:" << keys.size() - 0.5 << "]\nset yrange [" << queries.size() - 0.5 << ":-0.5]\n"
     << "set size ratio -1\n"
     << "set xtics (";
  for (std::size_t i = 0; i < keys.size(); ++i) gp << (i ? ", " : "") << "'" << keys[i] << "' " << i;
  gp << ") rotate by 45 right out nomirror scale 0.5\n"
     << "set multiplot layout 1," << num_heads << " margins 0.06,0.91,0.24,0.84 spacing 0.015,0 \\\n"
     << "  title 'Encoder-decoder attention of the last decoder block, per head' font ',12'\n"
     << "do for [h = 0:" << num_heads - 1 << "] {\n"
     << "  set title sprintf('Head %d', h)\n"
     << "  if (h == 0) { set ytics (";
  for (std::size_t i = 0; i < queries.size(); ++i) gp << (i ? ", " : "") << "'" << queries[i] << "' " << i;
  gp << ") out nomirror scale 0.5 } else { set ytics format '' }\n"
     << "  if (h == " << num_heads - 1 << ") { set colorbox user origin 0.935,0.24 size 0.012,0.56 } "
     << "else { unset colorbox }\n"
     << "  plot 'translate_attention.csv' every ::(h * per_head)::((h + 1) * per_head - 1) using 3:2:4 "
     << "with image notitle\n"
     << "}\nunset multiplot\n";
  return gp.str();
}

}  // namespace

int main(int argc, char** argv) try {
  const ex::fs::path dir = ex::output_directory(argc, argv);
  const Index num_hiddens = 32, ffn_num_hiddens = 64, num_heads = 4, num_blks = 2, batch = 32, epochs = 50;
  const float dropout = 0.1f, lr = 0.005f;

  // 1. The data: every number in words and in digits; a fixed shuffle puts 100 aside.
  Vocab src_vocab, tgt_vocab;
  std::vector<std::vector<Index>> src_all, tgt_all;
  std::vector<int> numbers(1000);
  std::iota(numbers.begin(), numbers.end(), 0);
  attend::Generator generator(11);
  for (std::size_t i = numbers.size() - 1; i > 0; --i)
    std::swap(numbers[i], numbers[static_cast<std::size_t>(generator.uniform01<double>() * double(i + 1))]);
  for (int n : numbers) {
    std::vector<Index> s, t;
    for (const auto& w : words_of(n)) s.push_back(src_vocab.add(w));
    for (const auto& d : digits_of(n)) t.push_back(tgt_vocab.add(d));
    src_all.push_back(s);
    tgt_all.push_back(t);
  }
  const std::size_t num_train = 900;
  const Index src_steps = 6, tgt_steps = 4;  // 4 words or 3 digits at most, plus <eos>

  // 2. The model.
  attend::TransformerEncoder<float> encoder(src_vocab.size(), num_hiddens, ffn_num_hiddens, num_heads, num_blks,
                                            dropout, false, 1000, generator);
  attend::TransformerDecoder<float> decoder(tgt_vocab.size(), num_hiddens, ffn_num_hiddens, num_heads, num_blks,
                                            dropout, 1000, generator);
  std::vector<attend::Parameter<float>> parameters = encoder.parameters();
  for (auto& p : decoder.parameters()) parameters.push_back(p);
  attend::Adam<float> adam(parameters, lr);
  std::printf(
      "number words -> digits, units first: %zu training pairs, %zu held out; source vocabulary %ld, target %ld\n"
      "d2l's Transformer: %ld + %ld blocks, %ld hidden, %ld heads, dropout %.1f; Adam lr %.3f, batches of %ld; "
      "kernels: %s, %d thread(s)\n\n",
      num_train, numbers.size() - num_train, static_cast<long>(src_vocab.size()), static_cast<long>(tgt_vocab.size()),
      static_cast<long>(num_blks), static_cast<long>(num_blks), static_cast<long>(num_hiddens),
      static_cast<long>(num_heads), double(dropout), double(lr), static_cast<long>(batch),
      attend::isa_name(attend::active_isa()), attend::num_threads());

  // 3. Training with teacher forcing.
  ex::Table curve{{"epoch", "loss"}, {}};
  std::vector<std::size_t> order(num_train);
  std::iota(order.begin(), order.end(), 0);
  const auto start = std::chrono::steady_clock::now();
  for (Index epoch = 1; epoch <= epochs; ++epoch) {
    for (std::size_t i = order.size() - 1; i > 0; --i)
      std::swap(order[i], order[static_cast<std::size_t>(generator.uniform01<double>() * double(i + 1))]);
    double loss_sum = 0;
    Index batches = 0;
    for (std::size_t first = 0; first + std::size_t(batch) <= num_train; first += std::size_t(batch)) {
      std::vector<std::vector<Index>> src, tgt;
      for (std::size_t i = first; i < first + std::size_t(batch); ++i) {
        src.push_back(src_all[order[i]]);
        tgt.push_back(tgt_all[order[i]]);
      }
      std::vector<Index> src_lens, tgt_lens;
      const Matrix<Index> X = to_tokens(src, src_steps, src_lens);  // (batch, src_steps)
      const Matrix<Index> Y = to_tokens(tgt, tgt_steps, tgt_lens);  // (batch, tgt_steps): the labels
      Matrix<Index> dec_input(batch, tgt_steps);                    // <bos>, then Y shifted right
      dec_input.col(0).setConstant(bos);
      dec_input.rightCols(tgt_steps - 1) = Y.leftCols(tgt_steps - 1);
      const attend::Mask src_mask = attend::ValidLens::per_batch(src_lens);
      const Tensor3<float> enc = encoder(X, src_mask);
      attend::DecoderState<float> state = decoder.init_state(enc, src_mask);
      const Tensor3<float> logits = decoder(dec_input, state);  // (batch, tgt_steps, tgt vocab)
      const attend::Loss<float> loss = attend::cross_entropy(logits, Y, attend::ValidLens::per_batch(tgt_lens));
      adam.zero_grad();
      decoder.backward(loss.grad);
      encoder.backward(*state.enc_outputs_grad);
      adam.step();
      loss_sum += loss.value;
      ++batches;
    }
    curve.rows.push_back({double(epoch), loss_sum / double(batches)});
    if (epoch % 5 == 0 || epoch == 1)
      std::printf("epoch %3ld   loss %.4f\n", static_cast<long>(epoch), loss_sum / double(batches));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n%ld epochs in %.1f s\n\n", static_cast<long>(epochs), seconds);

  // 4. Greedy decoding of the held-out numbers, token by token through the caches.
  encoder.eval();
  decoder.eval();
  auto& last = decoder.block(num_blks - 1);
  last.attention2().set_path(attend::AttentionPath::direct);  // the path that forms the weights
  last.keep_attention_weights(true);
  std::vector<std::vector<Index>> src;
  for (std::size_t i = num_train; i < numbers.size(); ++i) src.push_back(src_all[i]);
  std::vector<Index> src_lens;
  const Matrix<Index> X = to_tokens(src, src_steps, src_lens);
  const attend::Mask src_mask = attend::ValidLens::per_batch(src_lens);
  const Index held_out = X.rows();
  attend::DecoderState<float> state = decoder.init_state(encoder.forward(X, src_mask), src_mask, tgt_steps + 1);
  Matrix<Index> next = Matrix<Index>::Constant(held_out, 1, bos);
  std::vector<std::vector<Index>> predicted(static_cast<std::size_t>(held_out));
  std::vector<bool> done(static_cast<std::size_t>(held_out), false);
  std::vector<std::vector<float>> rows_of_first;
  for (Index step = 0; step <= tgt_steps; ++step) {
    const Tensor3<float> logits = decoder(next, state);  // (held_out, 1, tgt vocab)
    const Tensor3<float>& w = last.attention2().attention_weights();  // (held_out * num_heads, 1, src_steps)
    std::vector<float> row;
    for (Index h = 0; h < num_heads; ++h)
      for (Index k = 0; k < src_steps; ++k) row.push_back(w(h, 0, k));
    if (!done[0]) rows_of_first.push_back(row);
    for (Index b = 0; b < held_out; ++b) {
      Index best = 0;
      for (Index v = 1; v < logits.dimension(2); ++v)
        if (logits(b, 0, v) > logits(b, 0, best)) best = v;
      next(b, 0) = best;
      if (done[std::size_t(b)]) continue;
      if (best == eos)
        done[std::size_t(b)] = true;
      else
        predicted[std::size_t(b)].push_back(best);
    }
  }

  double bleu_sum = 0;
  Index exact = 0;
  for (Index b = 0; b < held_out; ++b) {
    const int n = numbers[num_train + std::size_t(b)];
    std::vector<std::string> pred;
    for (Index token : predicted[std::size_t(b)]) pred.push_back(tgt_vocab.tokens[std::size_t(token)]);
    const std::vector<std::string> label = digits_of(n);
    const double score = bleu(pred, label, 2);
    bleu_sum += score;
    exact += pred == label;
    if (b < 6)
      std::printf("%-28s => %-7s bleu %.3f\n", joined(words_of(n)).c_str(), joined(pred).c_str(), score);
  }
  std::printf("\nheld out: mean BLEU %.3f, %ld of %ld exactly right\n\n", bleu_sum / double(held_out),
              static_cast<long>(exact), static_cast<long>(held_out));

  // 5. Pictures.
  ex::write_csv(dir / "translate_loss.csv", curve);
  ex::draw(dir, "translate_loss", loss_script());
  const int first_number = numbers[num_train];
  std::vector<std::string> keys = words_of(first_number);
  keys.push_back("<eos>");
  std::vector<std::string> queries;
  for (Index token : predicted[0]) queries.push_back(tgt_vocab.tokens[std::size_t(token)]);
  queries.push_back("<eos>");
  queries.resize(std::min(queries.size(), rows_of_first.size()));
  ex::Table table{{"head", "query", "key", "weight"}, {}};
  for (Index h = 0; h < num_heads; ++h)
    for (std::size_t q = 0; q < queries.size(); ++q)
      for (std::size_t k = 0; k < keys.size(); ++k)
        table.rows.push_back(
            {double(h), double(q), double(k), double(rows_of_first[q][std::size_t(h * src_steps) + k])});
  ex::write_csv(dir / "translate_attention.csv", table);
  ex::draw(dir, "translate_attention", attention_script(num_heads, keys, queries));
  return 0;
} catch (const std::exception& e) {
  std::cerr << "translate: " << e.what() << '\n';
  return 1;
}
