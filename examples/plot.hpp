// examples/plot.hpp — what the examples share: an output directory, CSV tables, and gnuplot scripts beside them.
//
// Every picture is three files with one stem, in the output directory:
//   stem.csv   the numbers, with a header line
//   stem.gp    a gnuplot script that reads stem.csv and draws stem.png; it is kept, so it can be edited and
//              re-run from that directory with `gnuplot stem.gp`
//   stem.png   drawn only when gnuplot is installed
// The scripts choose the pngcairo terminal when the gnuplot running them has it, else the plain png terminal.
// Nothing here depends on attend: the examples turn tensors into Tables, and this file does the rest.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace attend_examples {

namespace fs = std::filesystem;

// The directory the examples write into: argv[1] when given, else the current directory; created when missing.
inline fs::path output_directory(int argc, char** argv) {
  if (argc > 2) throw std::invalid_argument(std::string("usage: ") + argv[0] + " [output_directory]");
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::path(".");
  fs::create_directories(dir);  // nothing to do when it exists; throws fs::filesystem_error when it cannot
  return dir;
}

// A table of numbers under named columns: one CSV line per row.
struct Table {
  std::vector<std::string> columns;       // the header line
  std::vector<std::vector<double>> rows;  // every row has columns.size() numbers
};

// Writes `text` to `file`, replacing it; throws std::runtime_error when the file cannot be written.
inline void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + file.string());
  std::cout << "wrote " << file.string() << '\n';
}

// Writes `table` as CSV (comma-separated, header first, 12 significant digits) to `file`.
inline void write_csv(const fs::path& file, const Table& table) {
  std::ostringstream csv;
  csv << std::setprecision(12);
  for (std::size_t c = 0; c < table.columns.size(); ++c) csv << (c ? "," : "") << table.columns[c];
  csv << '\n';
  for (const auto& row : table.rows) {
    if (row.size() != table.columns.size())
      throw std::invalid_argument("write_csv: a row of " + std::to_string(row.size()) + " numbers under " +
                                  std::to_string(table.columns.size()) + " columns, for " + file.string());
    for (std::size_t c = 0; c < row.size(); ++c) csv << (c ? "," : "") << row[c];
    csv << '\n';
  }
  write_text(file, csv.str());
}

// The lines every script starts with: a width x height PNG terminal, the output file, and CSV input.
inline std::string png_preamble(int width, int height, const std::string& png_name) {
  std::ostringstream gp;
  gp << "# Draws " << png_name << "; run it from this directory: gnuplot " << fs::path(png_name).stem().string()
     << ".gp\n"
     << "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
     << "  set terminal pngcairo size " << width << ',' << height << " enhanced font \"Sans,10\"\n"
     << "} else {\n"
     << "  set terminal png size " << width << ',' << height << " enhanced\n"
     << "}\n"
     << "set output '" << png_name << "'\n"
     << "set datafile separator comma\n"
     << "set datafile columnheaders\n";
  return gp.str();
}

// Matplotlib's sequential colour maps (ColorBrewer's colours), as gnuplot palettes: d2l draws its heatmaps in them.
inline const char* palette_blues() {
  return "set palette defined (0 '#f7fbff', 1 '#deebf7', 2 '#c6dbef', 3 '#9ecae1', 4 '#6baed6', "
         "5 '#4292c6', 6 '#2171b5', 7 '#08519c', 8 '#08306b')\n";
}
inline const char* palette_reds() {
  return "set palette defined (0 '#fff5f0', 1 '#fee0d2', 2 '#fcbba1', 3 '#fc9272', 4 '#fb6a4a', "
         "5 '#ef3b2c', 6 '#cb181d', 7 '#a50f15', 8 '#67000d')\n";
}

// `text` as one word for a POSIX shell: as it is when that is safe, else inside single quotes.
inline std::string shell_word(const std::string& text) {
  const char* safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,:/@%";
  if (!text.empty() && text.find_first_not_of(safe) == std::string::npos) return text;
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

inline bool gnuplot_available() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

// Writes dir/stem.gp and, when gnuplot is installed, runs it in `dir` to draw dir/stem.png.
// Without gnuplot, says so in one line, with the command that draws the picture later. Returns true when drawn.
inline bool draw(const fs::path& dir, const std::string& stem, const std::string& script) {
  const std::string gp_name = stem + ".gp";
  write_text(dir / gp_name, script);
  const std::string in_dir = dir == fs::path(".") ? "" : "cd " + shell_word(dir.string()) + " && ";
  const std::string command = in_dir + "gnuplot " + shell_word(gp_name);
  if (!gnuplot_available()) {
    std::cout << "gnuplot not found: " << (dir / (stem + ".csv")).string() << " is written; draw it with `" << command
              << "` once gnuplot is installed"
              << " (apt-get install gnuplot-nox)\n";
    return false;
  }
  const int status = std::system(command.c_str());
  if (status != 0) {
    std::cout << "gnuplot failed (status " << status << ") on " << (dir / gp_name).string() << '\n';
    return false;
  }
  std::cout << "wrote " << (dir / (stem + ".png")).string() << '\n';
  return true;
}

}  // namespace attend_examples
