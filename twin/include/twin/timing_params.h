// The hardware parameters of the twin's timing model (Atlas A2 / 910B, arch 2201), one table.
//
// Each value says where it comes from. "asc-devkit" is the public Ascend C API repository (its
// Chinese docs under docs/zh and its best-practice samples under examples/); "seed" is the measured
// 910B figures the project started from (docs/kernel.md, "Timing model"). A value marked
// CALIBRATED was fitted to the named measurements; one marked ASSUMED has no measured figure behind
// it and docs/kernel.md says how much the predictions depend on it.
#pragma once

namespace twin::timing {

struct HwParams {
  // AI Core clock. asc-devkit, examples/.../matmul_high_performance/README: "Atlas A2 ... main
  // frequency of 1.85GHz" (also the Add sample's theoretical vector time uses 1.85 GHz).
  double clock_ghz = 1.85;

  // Launch ("head") overhead of a kernel using every core, added once to the schedule.
  // asc-devkit docs/zh/guide/算子实践参考/性能分析/分析性能数据.md: "Atlas A2 ... 满核头开销约为20~21微秒".
  double launch_us = 20.0;

  // HBM bandwidth shared by every core moving data at the same time, in GB/s (bytes per ns).
  // CALIBRATED: the effective bandwidth both of the seed's measured 910B figures imply at
  // [1, 24, 28800, 128] bf16 (the original operator's ~900 MB in 0.8 ms: 1.13 TB/s; npu_rotary_mul's
  // ~369 MB in 0.35 ms: 1.05 TB/s), rounded; docs/kernel.md "Calibration". For reference, asc-devkit
  // quotes 1.6-1.8 TB/s peak (L2-Cache切分.md, 分析性能数据.md) and its Add sample reaches 1.61 TB/s
  // mixed read/write on a 48-core A2 with L2 in its default mode (2.3 TB/s bypassing L2).
  double hbm_gbps = 1100.0;

  // L2: size and bandwidth of hits. asc-devkit matmul_high_performance/README (Atlas A2): "actual
  // chip L2Cache size is 192MB", "peak bandwidth of L2Cache is about 5TB/s" (L2-Cache切分.md says
  // about 7 TB/s mixed; the lower figure is used). The twin's L2 is an LRU of 512-byte lines
  // (asc-devkit: "GM地址尽量512B对齐"), write-back: writing a line already dirty in L2 costs L2
  // bandwidth only, every other write reaches HBM once.
  double l2_bytes = 192.0 * 1024 * 1024;
  double l2_gbps = 5000.0;
  double l2_line = 512.0;

  // MTE2 (GM -> UB / L1) and MTE3 (UB -> GM): fixed cycles per instruction and the most one core's
  // pipe can move per cycle. CALIBRATED on asc-devkit's Add sample on a 48-core A2
  // (examples/.../add_high_performance/README, cases 1-3): 8 KiB copies take 315.6 ns each on 48
  // cores and 32 KiB copies 1080 ns (MTE2 time / copies per core), so a copy costs 113 cycles plus
  // its share of bandwidth; one core alone moves an 8 KiB copy in 350 cycles, 237 of them beyond
  // the fixed part: 34.6 bytes per cycle per core. MTE3 is ASSUMED to be MTE2's equal.
  double mte_latency_cycles = 113.0;
  double mte_core_bytes_per_cycle = 34.6;

  // Vector unit: 256 bytes of the widest operand per cycle (asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md:
  // Add/Mul/Muls/Duplicate 64 float or 128 half elements per cycle, Cast to or from float 64
  // elements per cycle), except Gather: 5 elements per cycle (same table, 表12).
  double vec_bytes_per_cycle = 256.0;
  double gather_elems_per_cycle = 5.0;
  // Fixed cycles per vector instruction. CALIBRATED on the Add sample's case 6: 6.954 us measured
  // against 5.904 us theoretical over the 86 Add instructions of each of 48 cores: 22.6 cycles each.
  double vec_fixed_cycles = 22.6;
  // A scalar access to UB (LocalTensor::GetValue/SetValue). ASSUMED.
  double scalar_cycles = 20.0;

  // Cube: multiply-accumulates per cycle. asc-devkit docs/zh/api/附录/Cube指令理论性能汇总.md (表1,
  // arch 2201): half/bf16 16x16x16 = 4096 per cycle, float 16x16x4 = 1024 (fractal of 8 in K).
  double cube_macs_half = 4096.0;
  double cube_macs_float = 1024.0;
  // L1 -> L0A 256 and L1 -> L0B 128 bytes per cycle (same page, 表3); L0C -> out 128 bytes per
  // cycle for a bf16/half C (64 elements per cycle, 表7), used as FixPipe's per-core limit.
  double l0a_bytes_per_cycle = 256.0;
  double l0b_bytes_per_cycle = 128.0;
  double fix_bytes_per_cycle = 128.0;
  // The Matmul API's own cost per IterateAll (scalar setup, its internal event handshakes), on top
  // of the instructions it issues. ASSUMED: no measured figure isolates it; docs/kernel.md gives the
  // MIX predictions for 0 and for twice this value.
  double matmul_fixed_cycles = 2000.0;

  // Cross-core flag: from CrossCoreSetFlag's pipe completing to the waiting core's counter rising.
  // ASSUMED (no measured figure).
  double flag_latency_cycles = 500.0;
};

}  // namespace twin::timing
