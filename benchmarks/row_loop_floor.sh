#!/usr/bin/env bash
# Builds benchmarks/row_loop_floor.cpp (g++ with OpenMP, for this CPU) into a temporary folder and
# runs it at x [1, 24, S, 128] bf16 for S = 256, 512, 1024 on 1 and 2 threads, BNSD with 2 and 4
# heads a batch. See the .cpp for what it measures. Extra arguments replace the S list.
set -euo pipefail
cd "$(dirname "$0")"
bin="$(mktemp -d)/row_loop_floor"
g++ -O3 -march=native -fopenmp -o "$bin" row_loop_floor.cpp
sizes=("${@:-256 512 1024}")
for s in ${sizes[*]}; do
  for t in 1 2; do
    for hb in 2 4; do
      "$bin" "$s" "$t" "$hb"
    done
  done
done
rm -rf "$(dirname "$bin")"
