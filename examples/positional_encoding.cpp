// examples/positional_encoding.cpp — the chapter's pictures of the sinusoidal positional encoding.
//
// Self-attention treats its input as a set: permute the tokens and the outputs are permuted the same way. To give
// it the order, the input X (steps, d) becomes X + P, where row i of P encodes position i:
//   P[i, 2j] = sin(i / 10000^(2j/d))      P[i, 2j+1] = cos(i / 10000^(2j/d))
// Along a column the values oscillate; the higher the column, the lower the frequency — like the bits of i in
// binary, where the last bit flips at every step and the higher bits ever more slowly (printed below).
// And for any offset δ, P[i + δ] is a fixed rotation of P[i] within each (2j, 2j+1) pair, which lets a model
// attend by relative position.
//
// usage: positional_encoding [output_directory]   (default: the current directory) — writes there
//   positional_encoding_columns.csv   position,col6,col7,col8,col9: columns 6 to 9 of P, positions 0..59
//   positional_encoding_heatmap.csv   position,column,value: all of P[:60], one line per entry, position-major
// each with its gnuplot script (.gp) and, when gnuplot is installed, its picture (.png).
#include <attend/attend.hpp>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>

#include "plot.hpp"

namespace ex = attend_examples;
using attend::Index;

namespace {

// d2l.plot(torch.arange(num_steps), P[0, :, 6:10].T, xlabel='Row (position)', figsize=(6, 2.5), legend=...):
// four lines in d2l's styles ('-', 'm--', 'g-.', 'r:').
std::string columns_script(Index encoding_dim, Index num_steps) {
  std::ostringstream gp;
  gp << ex::png_preamble(800, 320, "positional_encoding_columns.png")
     << "set title 'Columns 6 to 9 of the positional encoding P (encoding dimension " << encoding_dim << ")'\n"
     << "set xlabel 'Row (position)'\n"
     << "set xrange [0:" << num_steps - 1 << "]\n"
     << "set yrange [-1.1:1.1]\n"
     << "set grid\n"
     << "set key outside right center box\n"
     << "plot 'positional_encoding_columns.csv' using 1:2 with lines lw 2 lc rgb '#1f77b4' dt 1 title 'Col 6', \\\n"
     << "     '' using 1:3 with lines lw 2 lc rgb '#bf00bf' dt 2 title 'Col 7', \\\n"
     << "     '' using 1:4 with lines lw 2 lc rgb '#008000' dt 4 title 'Col 8', \\\n"
     << "     '' using 1:5 with lines lw 2 lc rgb '#ff0000' dt 3 title 'Col 9'\n";
  return gp.str();
}

// d2l.show_heatmaps(P, xlabel='Column (encoding dimension)', ylabel='Row (position)', cmap='Blues'):
// position 0 on top, as matplotlib draws a matrix.
std::string heatmap_script(Index encoding_dim, Index num_steps) {
  std::ostringstream gp;
  gp << ex::png_preamble(560, 620, "positional_encoding_heatmap.png") << ex::palette_blues()
     << "set title 'Positional encoding P, positions 0 to " << num_steps - 1 << "'\n"
     << "set xlabel 'Column (encoding dimension)'\n"
     << "set ylabel 'Row (position)'\n"
     << "set xrange [-0.5:" << encoding_dim - 0.5 << "]\n"
     << "set yrange [" << num_steps - 0.5 << ":-0.5]\n"
     << "set xtics 0,4 out nomirror\n"
     << "set ytics 0,10 out nomirror\n"
     << "set cbrange [-1:1]\n"
     << "set cbtics 0.5 scale 0\n"
     << "plot 'positional_encoding_heatmap.csv' using 2:1:3 with image notitle\n";
  return gp.str();
}

}  // namespace

int main(int argc, char** argv) try {
  const ex::fs::path dir = ex::output_directory(argc, argv);

  const Index encoding_dim = 32, num_steps = 60;
  attend::PositionalEncoding<double> pos_encoding(encoding_dim, 0.0);  // P: (max_len, encoding_dim) = (1000, 32)
  pos_encoding.eval();

  // As the chapter does: encode an all-zero input, so that what comes out is P itself.
  attend::Tensor3<double> zeros(1, num_steps, encoding_dim);  // (1, 60, 32)
  zeros.setZero();
  const attend::Tensor3<double> X = pos_encoding(zeros);  // (1, 60, 32) = 0 + P[:60]
  std::cout << "P: (" << pos_encoding.P().rows() << ", " << pos_encoding.P().cols() << "); its first " << num_steps
            << " rows, encoded onto zeros: (" << X.dimension(0) << ", " << X.dimension(1) << ", " << X.dimension(2)
            << ")\n\n";

  ex::Table columns{{"position", "col6", "col7", "col8", "col9"}, {}};  // (60, 5)
  for (Index i = 0; i < num_steps; ++i)
    columns.rows.push_back({double(i), X(0, i, 6), X(0, i, 7), X(0, i, 8), X(0, i, 9)});
  ex::write_csv(dir / "positional_encoding_columns.csv", columns);
  ex::draw(dir, "positional_encoding_columns", columns_script(encoding_dim, num_steps));

  ex::Table heatmap{{"position", "column", "value"}, {}};  // (60 * 32, 3)
  for (Index i = 0; i < num_steps; ++i)
    for (Index j = 0; j < encoding_dim; ++j) heatmap.rows.push_back({double(i), double(j), X(0, i, j)});
  ex::write_csv(dir / "positional_encoding_heatmap.csv", heatmap);
  ex::draw(dir, "positional_encoding_heatmap", heatmap_script(encoding_dim, num_steps));

  // The chapter's analogy: for i in range(8): print(f'{i} in binary is {i:>03b}')
  std::cout << "\nAbsolute positions in binary: the last bit alternates fastest, like P's low columns.\n";
  for (int i = 0; i < 8; ++i) {
    std::cout << i << " in binary is " << ((i >> 2) & 1) << ((i >> 1) & 1) << (i & 1) << (i % 4 == 3 ? "\n" : "    ");
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "positional_encoding: " << error.what() << '\n';
  return 1;
}
