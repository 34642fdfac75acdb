# bench/plot_vs_libtorch.gp — multi-head self-attention GFLOP/s against sequence length n, attend and libtorch, from
# the CSV that bench_vs_libtorch writes (--csv=FILE). Needs gnuplot 5.4 with the pngcairo terminal (gnuplot-nox).
#
#   gnuplot -c bench/plot_vs_libtorch.gp vs_libtorch.csv attention_vs_libtorch.png [vs_libtorch_blas.csv]
#
# One panel per thread count in the CSV (1, 2, ...), x = n on a log scale, y = GFLOP/s = (8 b n d^2 + 4 b n^2 d) /
# median time. attend is its public module (whichever path it takes); libtorch is nn::MultiheadAttention and the fused
# at::_native_multi_head_attention. Each implementation has one colour: a solid line through the shapes with d = 256 and 8 heads (n = 128
# to 8192), a dashed line through those with d = 64 and one head, and a lone point for the seed's (2, 4, 100, 5 heads)
# at n = 4. The horizontal line is the sgemm 1024^3 ceiling of the same run at that thread count (the faster of
# OpenBLAS and Eigen, measured before the shapes). A third argument, the CSV of bench_vs_libtorch_blas, adds attend's
# lines from that program (EIGEN_USE_BLAS: attend's products on OpenBLAS).

if (ARGC < 2) {
  print "usage: gnuplot -c bench/plot_vs_libtorch.gp results.csv picture.png [results_blas.csv]"
  exit status 1
}
data = ARG1
picture = ARG2
blas = ARGC >= 3 ? ARG3 : ""

# The CSV's columns: 1 threads, 2 part, 3 series, 4 batch, 5 n, 6 impl, 7 median_us, 8 gflops, 9 sgemm_gflops.
# (every ::1 skips its header line, on which $1 would not be a number.)
set datafile separator ","
stats data every ::1 using 1 nooutput
first_threads = int(STATS_min)
last_threads = int(STATS_max)

# Implementations (the CSV's impl column), their legend names and colours; the series of shapes and their styles.
# (attend_direct and attend_tiled, the module held to one path, are in the CSV and the printed table, not drawn.)
impls = "attend torch_mha torch_fused"
names = "'attend (MultiHeadAttention)' 'torch::nn::MultiheadAttention' 'at::_native_multi_head_attention'"
colours = "'#1f4e9c' '#d95f02' '#b2182b'"
blas_name = "attend, EIGEN_USE_BLAS (OpenBLAS)"
blas_colour = "#1b9e77"
series = "d256_h8 d64_h1 d100_h5"

# The rows of one (file, threads, impl, series) into the datablock $<prefix>_<threads>_<impl>_<series>: n, GFLOP/s.
# (Plotting the CSV with a filter that gives NaN would break the lines at every row left out; a datablock holds only
# the rows kept.)
select = 'eval sprintf("set table $%s_%d_%s_%s", prefix, th, impl, s); ' . \
         'plot file every ::1 using 5:8 with table if ($1 == th && strcol(2) eq "attention" && strcol(3) eq s && strcol(6) eq impl); ' . \
         'unset table'
# Adds the datablock of (prefix, th, impl, s) to the plot command, drawn with `style`, unless it is empty (a shape left
# out by --max-n): gnuplot cannot plot an empty datablock.
add = 'eval sprintf("rows = |$%s_%d_%s_%s|", prefix, th, impl, s); ' . \
      'if (rows > 0) { command = command . sprintf(", $%s_%d_%s_%s using 1:2 %s", prefix, th, impl, s, style) }'
panels = 0
do for [th = first_threads:last_threads] {
  stats data every ::1 using ($1 == th ? 1 : 0) nooutput
  if (STATS_sum > 0) {
    panels = panels + 1
    stats data every ::1 using (($1 == th && strcol(3) eq "sgemm_start") ? $8 : NaN) nooutput
    eval sprintf("ceiling_%d = %g", th, STATS_max)
    # The panel's top: the ceiling, or the fastest attention row when the machine ran faster than at the start.
    stats data every ::1 using (($1 == th && strcol(2) eq "attention") ? $8 : NaN) nooutput
    top = value(sprintf("ceiling_%d", th))
    eval sprintf("top_%d = %g", th, STATS_max > top ? STATS_max : top)
    file = data
    prefix = "plain"
    do for [impl in impls] { do for [s in series] { @select } }
    if (blas ne "") {
      file = blas
      prefix = "blas"
      impl = "attend"
      do for [s in series] { @select }
    }
  }
}
set datafile separator whitespace

set terminal pngcairo size 640 * panels, 600 font "sans,10"
set output picture
set multiplot layout 1, panels title "multi-head self-attention, float, eval mode: attend and libtorch 1.13 on the same weights and inputs"
set logscale x 2
set xrange [3:12000]
set xtics ("4" 4, "16" 16, "64" 64, "128" 128, "512" 512, "1024" 1024, "2048" 2048, "4096" 4096, "8192" 8192)
set xlabel "sequence length n (self-attention over n steps)"
set ylabel "GFLOP/s  = (8 b n d^2 + 4 b n^2 d) / time"
set yrange [0:*]
set grid
set key bmargin center horizontal maxcols 2 samplen 2 font ",9"
set bmargin 8
set style line 100 lc rgb "black" lw 1.5 dt 3

do for [th = first_threads:last_threads] {
  if (exists(sprintf("ceiling_%d", th))) {
    ceiling = value(sprintf("ceiling_%d", th))
    set title sprintf("%d thread%s", th, th > 1 ? "s" : "")
    set yrange [0:1.15 * value(sprintf("top_%d", th))]
    # The legend: one entry per implementation (its solid line), then what the dashes and lone points mean.
    command = sprintf("plot %g with lines ls 100 title 'sgemm 1024^3, run start: %.0f'", ceiling, ceiling)
    do for [k = 1:words(impls) + (blas ne "" ? 1 : 0)] {
      if (k <= words(impls)) {
        prefix = "plain"; impl = word(impls, k); colour = word(colours, k); name = word(names, k)
      } else {
        prefix = "blas"; impl = "attend"; colour = blas_colour; name = blas_name
      }
      s = "d256_h8"; style = sprintf("with linespoints lw 2 pt 7 ps 0.8 lc rgb '%s' title \"%s\" noenhanced", colour, name)
      @add
      s = "d64_h1"; style = sprintf("with linespoints lw 1.5 dt 2 pt 6 lc rgb '%s' notitle", colour)
      @add
      s = "d100_h5"; style = sprintf("with points pt 5 ps 1.2 lc rgb '%s' notitle", colour)
      @add
    }
    command = command . ", NaN with linespoints lw 2 pt 7 lc rgb 'gray40' title 'solid: d 256, 8 heads'"
    command = command . ", NaN with linespoints lw 1.5 dt 2 pt 6 lc rgb 'gray40' title 'dashed: d 64, 1 head'"
    command = command . ", NaN with points pt 5 ps 1.2 lc rgb 'gray40' title 'square: seed (2,4,100,5)'"
    eval command
  }
}
unset multiplot
