#!/usr/bin/env bash
# The same program in a default-flags build and a -march=native build, run in alternation (A B A B ...), one table:
#   bench/compare_builds.sh [build dir] [alternations]
# Each run prints one median per shape (forward_time.cpp); the table gives the median over the alternations of each,
# and default / native (above 1: the default build is slower).
set -euo pipefail
build=${1:-build}
alternations=${2:-5}
default="$build/bench/forward_time"
native="$build/bench/forward_time_native"
out=$(mktemp -d)
for ((i = 0; i < alternations; ++i)); do
  "$default" 5 >>"$out/default"
  "$native" 5 >>"$out/native"
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); 1 thread; medians of $alternations alternations"
echo "default build: level $(awk '/^isa/ {print $2; exit}' "$out/default"); native build: level $(awk '/^isa/ {print $2; exit}' "$out/native")"
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
printf '%-20s %14s %14s %10s\n' "(batch,n,d,heads)" "default (us)" "native (us)" "default/native"
for shape in $(awk '/^\(/ {print $1}' "$out/default" | awk '!seen[$0]++'); do
  a=$(awk -v s="$shape" '$1 == s {print $2}' "$out/default" | median)
  b=$(awk -v s="$shape" '$1 == s {print $2}' "$out/native" | median)
  printf '%-20s %14s %14s %10.2f\n' "$shape" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {print a / b}')"
done
rm -rf "$out"
