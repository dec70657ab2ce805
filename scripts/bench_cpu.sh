#!/usr/bin/env bash
# The CPU figures of the README's Benchmark section, on the installed package (scripts/install.sh
# first): three runs of the size sweep against the memory limit (benchmarks/results/
# sweep_cpu_run{1,2,3}.csv), the spread of the three with its plot (sweep_cpu.png), then the
# decode per-call figures (three repeats). Run it on a quiet machine: every figure is a ratio of
# timings taken round-robin in one process, but a core taken by another job still shows up as
# outliers (the load average is printed before and after). Extra arguments go to each sweep run,
# e.g. `bash scripts/bench_cpu.sh --sizes 1024,8192,32768` for a shorter grid.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh >/dev/null
out=benchmarks/results
echo "load before: $(uptime)"
for i in 1 2 3; do
  "$PY" -m npu_ops_transformer_ext.sweep --quiet --plot "" --csv "$out/sweep_cpu_run$i.csv" "$@"
done
"$PY" -m npu_ops_transformer_ext.sweep --summarize "$out"/sweep_cpu_run{1,2,3}.csv --plot "$out/sweep_cpu.png"
"$PY" benchmarks/bench_decode.py --repeats 3
echo "load after: $(uptime)"
