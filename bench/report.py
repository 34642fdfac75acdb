#!/usr/bin/env python3
"""Tables and a picture from the JSON that bench_vs_libtorch and bench_vs_torch2 write (--json=FILE).

    python3 bench/report.py build/vs_torch2.json                      Markdown tables on stdout
    python3 bench/report.py build/vs_torch2.json --plot ratios.png    and a bar chart of libtorch's best / attend

For each part (attention, training, kernel, rnn, conv1d) and thread count: one row per shape with attend's median
time, each libtorch contender's, and libtorch's best float contender over attend's (above 1: attend is faster);
then the geometric mean of that ratio over the part's shapes. The picture (gnuplot, which must be installed) has one
bar per shape and thread count for each part asked for. Only the standard library: no third-party package.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def best_torch(impl):
    times = [m["median_s"] for name, m in impl.items() if name.startswith("torch") and "bf16" not in name]
    return min(times) if times else float("nan")


def rows_of(results, part, threads):
    return [r for r in results if r["part"] == part and r["threads"] == threads]


def milliseconds(seconds):
    return "%.3f" % (seconds * 1e3) if seconds == seconds else "-"


def table(results, part, threads):
    rows = rows_of(results, part, threads)
    names = []
    for r in rows:
        for name in r["impl"]:
            if name not in names:
                names.append(name)
    lines = ["| shape | " + " | ".join("%s ms" % n for n in names) + " | best libtorch / attend |",
             "|" + "---|" * (len(names) + 2)]
    ratios = []
    for r in rows:
        impl = r["impl"]
        ratio = best_torch(impl) / impl["attend"]["median_s"]
        ratios.append(ratio)
        cells = [milliseconds(impl[n]["median_s"]) if n in impl else "-" for n in names]
        lines.append("| %s | %s | %.2f |" % (r["shape"], " | ".join(cells), ratio))
    finite = [x for x in ratios if x > 0 and math.isfinite(x)]
    mean = math.exp(sum(math.log(x) for x in finite) / len(finite)) if finite else float("nan")
    return lines, ratios, mean


def plot(results, parts, picture):
    """One bar per shape and thread count (blue: 1 thread, orange: 2), on a log scale, for the parts asked for."""
    data = tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False)
    labels = []
    for part in parts:
        for threads in sorted({r["threads"] for r in results}):
            for r in rows_of(results, part, threads):
                ratio = best_torch(r["impl"]) / r["impl"]["attend"]["median_s"]
                labels.append(("%s %s, %dt" % (part, r["shape"], threads)).replace('"', "'"))
                data.write("%d %.4f %d\n" % (len(labels) - 1, ratio, 0x1f77b4 if threads == 1 else 0xff7f0e))
    data.close()
    width = max(800, 16 * len(labels))
    xtics = ", ".join('"%s" %d' % (label, i) for i, label in enumerate(labels))
    script = """
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) { set terminal pngcairo size %d,560 font "Sans,9" } else { set terminal png size %d,560 }
set output '%s'
set title "libtorch's fastest float contender's time over attend's, log scale (above 1: attend is faster; blue 1 thread, orange 2)"
set style fill solid 0.8
set boxwidth 0.7
set xtics rotate by -60 (%s) font ",7"
set logscale y 2
set yrange [0.25:64]
set grid ytics
set key off
plot '%s' using 1:2:3 with boxes lc rgb variable, 1 with lines dt 2 lc rgb '#c00000'
""" % (width, width, picture, xtics, data.name)
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.unlink(data.name)
    print("wrote %s" % picture, file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", help="the benchmark's --json output")
    parser.add_argument("--plot", help="write a bar chart of the ratios to this PNG (needs gnuplot)")
    parser.add_argument("--parts", default="attention,training,kernel,rnn,conv1d")
    args = parser.parse_args()
    with open(args.json) as f:
        run = json.load(f)
    config, results = run["configuration"], run["results"]
    print("PyTorch %s (%s kernels), attend on %s; %d alternating rounds, medians\n"
          % (config.get("torch"), config.get("torch_cpu_capability"), config.get("attend_isa"), run["rounds"]))
    parts = [p for p in args.parts.split(",") if any(r["part"] == p for r in results)]
    for part in parts:
        for threads in sorted({r["threads"] for r in results if r["part"] == part}):
            lines, _, mean = table(results, part, threads)
            print("**%s, %d thread%s** (geometric mean of best libtorch / attend: %.2f)\n"
                  % (part, threads, "s" if threads > 1 else "", mean))
            print("\n".join(lines) + "\n")
    if args.plot:
        plot(results, parts, args.plot)


if __name__ == "__main__":
    main()
