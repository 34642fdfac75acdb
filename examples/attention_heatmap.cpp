// examples/attention_heatmap.cpp — what each head of a masked multi-head self-attention looks at.
//
// Multi-head attention projects the queries, keys and values num_heads times (each head sees d = num_hiddens /
// num_heads features), runs scaled dot-product attention in every head independently, and concatenates the
// results. Each head thus has its own (queries, keys) weight matrix: row q says how query q splits its attention
// over the keys, and sums to 1. With a valid length of 7, keys 7 to 9 are masked: their columns are exactly 0
// in every head. The input is the positional encoding P[:10], so what a head sees depends on where the query and
// the key are. Its parameters are untrained (random, seeded: the picture is the same at every run), so each head's
// weights stay near 1/7 over the kept keys, with a pattern of its own.
//
// usage: attention_heatmap [output_directory]   (default: the current directory) — writes there
//   attention_heatmap.csv   head,query,key,weight: one line per weight, head-major, then query, then key
// with its gnuplot script (.gp) and, when gnuplot is installed, the picture (.png): one panel per head, keys on x,
// queries on y, one colour scale shared by all panels (d2l's show_heatmaps).
#include <algorithm>
#include <attend/attend.hpp>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>

#include "plot.hpp"

namespace ex = attend_examples;
using attend::Index;

namespace {

// One row of panels, titled "Head h", keys on x and queries on y (query 0 on top, as matplotlib draws a matrix),
// with one colour bar for all: the colour range is [0, the largest weight of any head].
std::string heads_script(Index num_heads, Index num_queries, Index num_keys, Index valid_len) {
  std::ostringstream gp;
  gp << ex::png_preamble(int(300 * num_heads + 100), 380, "attention_heatmap.png") << ex::palette_reds()
     << "heads = " << num_heads << "\nqueries = " << num_queries << "\nkeys = " << num_keys << "\n"
     << "per_head = queries * keys  # CSV lines per head\n"
     << "stats 'attention_heatmap.csv' using 4 nooutput\n"
     << "set cbrange [0:STATS_max]\n"
     << "set cbtics scale 0\n"
     << "set xrange [-0.5:keys - 0.5]\n"
     << "set yrange [queries - 0.5:-0.5]\n"
     << "set xtics 0,1 out nomirror scale 0.5\n"
     << "set ytics 0,1 out nomirror scale 0.5\n"
     << "set size ratio -1\n"
     << "set xlabel 'Keys'\n"
     << "set multiplot layout 1,heads margins 0.05,0.91,0.14,0.84 spacing 0.015,0 \\\n"
     << "  title 'Masked multi-head self-attention weights (valid length " << valid_len << ", input P[:" << num_queries
     << "])' font ',12'\n"
     << "do for [h = 0:heads - 1] {\n"
     << "  set title sprintf('Head %d', h)\n"
     << "  if (h == 0) { set ylabel 'Queries'; set format y '%g' } else { unset ylabel; set format y '' }\n"
     << "  if (h == heads - 1) { set colorbox user origin 0.935,0.2 size 0.012,0.56 } else { unset colorbox }\n"
     << "  plot 'attention_heatmap.csv' every ::(h * per_head)::((h + 1) * per_head - 1) \\\n"
     << "       using 3:2:4 with image notitle\n"
     << "}\n"
     << "unset multiplot\n";
  return gp.str();
}

}  // namespace

int main(int argc, char** argv) try {
  const ex::fs::path dir = ex::output_directory(argc, argv);

  const Index batch_size = 1, num_steps = 10, num_hiddens = 32, num_heads = 4, valid_len = 7;
  attend::manual_seed(2024);  // the same weights, hence the same picture, at every run

  // key_size, query_size, value_size, num_hiddens, num_heads, dropout; eval(): no dropout
  attend::MultiHeadAttention<double> attention(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, 0.5);
  attention.eval();

  // P: (max_len, num_hiddens) = (1000, 32)
  attend::PositionalEncoding<double> pos_encoding(num_hiddens, 0.0);
  pos_encoding.eval();

  // X = 0 + P[:10]: (1, 10, 32)
  attend::Tensor3<double> zeros(batch_size, num_steps, num_hiddens);
  zeros.setZero();
  const attend::Tensor3<double> X = pos_encoding(zeros);

  // Y: (1, 10, 32); weights: (batch * num_heads, queries, keys) = (4, 10, 10)
  const attend::Tensor3<double> Y = attention(X, X, X, attend::ValidLens{valid_len});
  const attend::Tensor3<double>& weights = attention.attention_weights();
  std::cout << "output: (" << Y.dimension(0) << ", " << Y.dimension(1) << ", " << Y.dimension(2) << ")\n"
            << "attention weights per head: (" << weights.dimension(0) << ", " << weights.dimension(1) << ", "
            << weights.dimension(2) << ") = (batch * num_heads, queries, keys)\n";

  // One CSV line per weight of batch row b, whose head h is weights row b * num_heads + h: (4 * 10 * 10, 4)
  const Index b = 0;
  ex::Table table{{"head", "query", "key", "weight"}, {}};
  double masked_max = 0.0, kept_min = 1.0, kept_max = 0.0;
  for (Index h = 0; h < num_heads; ++h)
    for (Index q = 0; q < num_steps; ++q)
      for (Index k = 0; k < num_steps; ++k) {
        const double w = weights(b * num_heads + h, q, k);
        table.rows.push_back({double(h), double(q), double(k), w});
        if (k < valid_len) {
          kept_min = std::min(kept_min, w);
          kept_max = std::max(kept_max, w);
        } else {
          masked_max = std::max(masked_max, w);
        }
      }
  std::cout << "kept keys 0-" << valid_len - 1 << ": weights from " << kept_min << " to " << kept_max
            << " (uniform would be " << 1.0 / valid_len << "); masked keys " << valid_len << '-' << num_steps - 1
            << ": largest weight " << masked_max << "\n\n";

  ex::write_csv(dir / "attention_heatmap.csv", table);
  ex::draw(dir, "attention_heatmap", heads_script(num_heads, num_steps, num_steps, valid_len));
  return 0;
} catch (const std::exception& error) {
  std::cerr << "attention_heatmap: " << error.what() << '\n';
  return 1;
}
