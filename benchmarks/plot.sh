#!/bin/bash
# Draws the speedups of a tmap_bench CSV (warm and cold L2, per workload) into a PNG beside it.
#   benchmarks/plot.sh benchmarks/results/resnet18_b1_nhwc.csv
set -euo pipefail
csv=${1:?"usage: benchmarks/plot.sh RESULTS.csv"}
if ! command -v gnuplot >/dev/null; then
  echo "gnuplot is not installed (bash tools/setup.sh installs it): no chart for $csv" >&2
  exit 0
fi
png=${csv%.csv}.png
name=$(basename "${csv%.csv}")
gnuplot <<GNUPLOT
set terminal pngcairo size 1000,500 noenhanced
set output "$png"
set datafile separator ","
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8
set ylabel "speedup over the best baseline (x)"
set title "tmap vs cuDNN / cuBLAS: $name (higher is better; 1 = parity)"
set xtics rotate by -30
set grid ytics
set yrange [0:*]
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "black"
plot "$csv" every ::1 using 10:xtic(1) title "warm L2", "" every ::1 using 11 title "cold L2"
GNUPLOT
echo "wrote $png" >&2
