#!/usr/bin/env bash
# Two runs of bench/forward_time.cpp in alternation (A B A B ...), one table:
#   bench/compare_builds.sh [build dir] [alternations]          the default-flags build against the -march=native one
#   bench/compare_builds.sh [build dir] [alternations] LEVEL    the default build forced to LEVEL (ATTEND_ISA) against
#                                                               the same build on the level it chooses
#   bench/compare_builds.sh [build dir] [alternations] PROGRAM [LEVEL]
#                                                               another forward_time (a copy kept from an earlier
#                                                               build, or one built with other flags) against this
#                                                               build's, both forced to LEVEL when it is given
# Each run prints one median per shape; the table gives the median over the alternations of each, and A / B (above 1:
# A is slower).
set -euo pipefail
build=${1:-build}
alternations=${2:-5}
level=${3:-}
both=${4:-}
if [[ -z "$level" ]]; then
  run_a() { "$build/bench/forward_time" 5; }
  run_b() { "$build/bench/forward_time_native" 5; }
  name_a="default build"
  name_b="native build"
elif [[ -x "$level" && -f "$level" ]]; then
  if [[ -n "$both" ]]; then
    run_a() { ATTEND_ISA="$both" "$level" 5; }
    run_b() { ATTEND_ISA="$both" "$build/bench/forward_time" 5; }
  else
    run_a() { env -u ATTEND_ISA "$level" 5; }
    run_b() { env -u ATTEND_ISA "$build/bench/forward_time" 5; }
  fi
  name_a="$level"
  name_b="$build/bench/forward_time"
else
  run_a() { ATTEND_ISA="$level" "$build/bench/forward_time" 5; }
  run_b() { env -u ATTEND_ISA "$build/bench/forward_time" 5; }
  name_a="forced $level"
  name_b="chosen level"
fi
out=$(mktemp -d)
for ((i = 0; i < alternations; ++i)); do
  run_a >>"$out/a"
  run_b >>"$out/b"
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); 1 thread; medians of $alternations alternations"
echo "$name_a: level $(awk '/^isa/ {print $2; exit}' "$out/a"); $name_b: level $(awk '/^isa/ {print $2; exit}' "$out/b")"
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
printf '%-20s %14s %14s %10s\n' "(batch,n,d,heads)" "A (us)" "B (us)" "A / B"
for shape in $(awk '/^\(/ {print $1}' "$out/a" | awk '!seen[$0]++'); do
  a=$(awk -v s="$shape" '$1 == s {print $2}' "$out/a" | median)
  b=$(awk -v s="$shape" '$1 == s {print $2}' "$out/b" | median)
  printf '%-20s %14s %14s %10.2f\n' "$shape" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {print a / b}')"
done
rm -rf "$out"
