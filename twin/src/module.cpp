// npu_ops_transformer_ext._twin: runs the Ascend C kernel source on the CPU twin with the very
// host code the NPU launcher uses (shared validator, prepare_call, compute_tiling, matmul tiling).
// Python entry: npu_ops_transformer_ext.twin (run, tiling, TwinError).
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "kernel_tiling/kernel_tiling.h"
#include "op_host/rope_matrix_host.h"
#include "op_host/rope_matrix_tiling.h"
#include "op_kernel/rope_matrix_kernel_entries.h"
#include "op_kernel/rope_matrix_perm_kernel_entries.h"
#include "tiling/platform/platform_ascendc.h"
#include "tiling/tiling_api.h"
#include "twin/core.h"
#include "twin/kernel_wrapper.h"
#include "twin/timing.h"
#include "validation/rope_matrix_validate.h"

namespace py = pybind11;

using KernelFn = void (*)(uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*);

#define TEST_ONLY(name) extern "C" void name(uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*, uint8_t*);
TEST_ONLY(test_only_vector_op_on_cube)
TEST_ONLY(test_only_datacopy_unaligned_length)
TEST_ONLY(test_only_ub_unaligned_address)
TEST_ONLY(test_only_cast_none_to_bf16)
TEST_ONLY(test_only_shift_out_of_range)
TEST_ONLY(test_only_deque_empty)
TEST_ONLY(test_only_alloc_past_depth)
TEST_ONLY(test_only_use_after_free)
TEST_ONLY(test_only_flag_overflow)
TEST_ONLY(test_only_deadlock)
TEST_ONLY(test_only_flag_unbalanced)
TEST_ONLY(test_only_mode2_one_vector_sets_twice)
TEST_ONLY(test_only_flag_15_reserved)
TEST_ONLY(test_only_wait_syncall_flag)
TEST_ONLY(test_only_event_id_reserved)
TEST_ONLY(test_only_gather_alias)
TEST_ONLY(test_only_crosscore_in_aiv_only)
TEST_ONLY(test_only_matmul_regist_after_init_buffer)
TEST_ONLY(test_only_matmul_transposed_a_undeclared)
TEST_ONLY(test_only_matmul_used_cores_over_soc)
TEST_ONLY(test_only_gm_unaligned)
TEST_ONLY(test_only_default_local_tensor)
TEST_ONLY(test_only_alloc_without_tpipe)
TEST_ONLY(test_only_event_double_set)
TEST_ONLY(test_only_event_wait_unset)
TEST_ONLY(test_only_pipe_barrier_s)
TEST_ONLY(test_only_crosscore_set_on_pipe_s)
TEST_ONLY(test_only_event_v_m_on_vector)
TEST_ONLY(test_only_event_mte1_v_on_cube)
TEST_ONLY(test_only_pipe_barrier_m_on_vector)
TEST_ONLY(test_only_crosscore_set_on_fix_from_vector)
TEST_ONLY(test_only_core_events_pass)
TEST_ONLY(test_only_two_tpipes)
TEST_ONLY(test_only_alloc_before_init)
TEST_ONLY(test_only_free_into_other_queue)
TEST_ONLY(test_only_vector_count_negative)
TEST_ONLY(test_only_vector_partial_overlap)
TEST_ONLY(test_only_ub_on_cube)
TEST_ONLY(test_only_datacopy_block_count)
TEST_ONLY(test_only_datacopy_into_vecalc)
TEST_ONLY(test_only_uninitialized_workspace_read)
TEST_ONLY(test_only_flag_pipe_mismatch)
TEST_ONLY(test_only_ub_uninitialized_reaches_gm)
TEST_ONLY(test_only_pipe_race_tbuf_read)
TEST_ONLY(test_only_pipe_race_overwrite_after_copy_out)
TEST_ONLY(test_only_synced_tbuf_read)
TEST_ONLY(test_only_synced_overwrite_after_copy_out)
TEST_ONLY(test_only_mte2_overlapping_dst)
TEST_ONLY(test_only_mte3_overlapping_dst)
TEST_ONLY(test_only_synced_mte2_overlapping_dst)
TEST_ONLY(test_only_synced_mte3_overlapping_dst)
TEST_ONLY(test_only_datacopy_params_block_count)
TEST_ONLY(test_only_datacopy_ext_block_len)
TEST_ONLY(test_only_datacopy_pad_too_wide)
TEST_ONLY(test_only_workspace_offset_twice)
TEST_ONLY(test_only_probe_workspace_argument)
TEST_ONLY(test_only_matmul_without_mte2_mte1_wait)
TEST_ONLY(test_only_matmul_without_mte1_m_wait)
TEST_ONLY(test_only_matmul_without_m_fix_wait)
TEST_ONLY(test_only_original_schedule)
#undef TEST_ONLY

namespace {

// The PlatformAscendC the host tiling receives, built from op_host's SoC table (on the NPU it comes
// from PlatformAscendCManager::GetInstance()).
struct TwinPlatform {
  explicit TwinPlatform(const rope_matrix::Platform& p) {
    info.aicNum = p.aicNum;
    info.aivNum = p.aivNum;
    info.ubBytes = p.ubBytes;
  }
  TwinPlatform(const TwinPlatform&) = delete;
  TwinPlatform& operator=(const TwinPlatform&) = delete;
  fe::PlatFormInfos info;
  platform_ascendc::PlatformAscendC ascendc{&info};
};

const std::map<std::string, KernelFn>& kernels() {
  static const std::map<std::string, KernelFn> k = {
      {"rope_matrix_bf16_bf16", rope_matrix_bf16_bf16},
      {"rope_matrix_bf16_fp32", rope_matrix_bf16_fp32},
      {"rope_matrix_fp16_fp16", rope_matrix_fp16_fp16},
      {"rope_matrix_fp16_fp32", rope_matrix_fp16_fp32},
      {"rope_matrix_fp32_fp32", rope_matrix_fp32_fp32},
      {"rope_matrix_perm_bf16_bf16", rope_matrix_perm_bf16_bf16},
      {"rope_matrix_perm_bf16_fp32", rope_matrix_perm_bf16_fp32},
      {"rope_matrix_perm_fp16_fp16", rope_matrix_perm_fp16_fp16},
      {"rope_matrix_perm_fp16_fp32", rope_matrix_perm_fp16_fp32},
      {"rope_matrix_perm_fp32_fp32", rope_matrix_perm_fp32_fp32},
  };
  return k;
}

// TEST-ONLY broken kernels (twin/test_kernels/broken_kernels.cpp).
const std::map<std::string, KernelFn>& test_only_kernels() {
  static const std::map<std::string, KernelFn> k = {
      {"test_only_vector_op_on_cube", test_only_vector_op_on_cube},
      {"test_only_datacopy_unaligned_length", test_only_datacopy_unaligned_length},
      {"test_only_ub_unaligned_address", test_only_ub_unaligned_address},
      {"test_only_cast_none_to_bf16", test_only_cast_none_to_bf16},
      {"test_only_shift_out_of_range", test_only_shift_out_of_range},
      {"test_only_deque_empty", test_only_deque_empty},
      {"test_only_alloc_past_depth", test_only_alloc_past_depth},
      {"test_only_use_after_free", test_only_use_after_free},
      {"test_only_flag_overflow", test_only_flag_overflow},
      {"test_only_deadlock", test_only_deadlock},
      {"test_only_flag_unbalanced", test_only_flag_unbalanced},
      {"test_only_mode2_one_vector_sets_twice", test_only_mode2_one_vector_sets_twice},
      {"test_only_flag_15_reserved", test_only_flag_15_reserved},
      {"test_only_wait_syncall_flag", test_only_wait_syncall_flag},
      {"test_only_event_id_reserved", test_only_event_id_reserved},
      {"test_only_gather_alias", test_only_gather_alias},
      {"test_only_crosscore_in_aiv_only", test_only_crosscore_in_aiv_only},
      {"test_only_matmul_regist_after_init_buffer", test_only_matmul_regist_after_init_buffer},
      {"test_only_matmul_transposed_a_undeclared", test_only_matmul_transposed_a_undeclared},
      {"test_only_matmul_used_cores_over_soc", test_only_matmul_used_cores_over_soc},
      {"test_only_gm_unaligned", test_only_gm_unaligned},
      {"test_only_default_local_tensor", test_only_default_local_tensor},
      {"test_only_alloc_without_tpipe", test_only_alloc_without_tpipe},
      {"test_only_event_double_set", test_only_event_double_set},
      {"test_only_event_wait_unset", test_only_event_wait_unset},
      {"test_only_pipe_barrier_s", test_only_pipe_barrier_s},
      {"test_only_crosscore_set_on_pipe_s", test_only_crosscore_set_on_pipe_s},
      {"test_only_event_v_m_on_vector", test_only_event_v_m_on_vector},
      {"test_only_event_mte1_v_on_cube", test_only_event_mte1_v_on_cube},
      {"test_only_pipe_barrier_m_on_vector", test_only_pipe_barrier_m_on_vector},
      {"test_only_crosscore_set_on_fix_from_vector", test_only_crosscore_set_on_fix_from_vector},
      {"test_only_core_events_pass", test_only_core_events_pass},
      {"test_only_two_tpipes", test_only_two_tpipes},
      {"test_only_alloc_before_init", test_only_alloc_before_init},
      {"test_only_free_into_other_queue", test_only_free_into_other_queue},
      {"test_only_vector_count_negative", test_only_vector_count_negative},
      {"test_only_vector_partial_overlap", test_only_vector_partial_overlap},
      {"test_only_ub_on_cube", test_only_ub_on_cube},
      {"test_only_datacopy_block_count", test_only_datacopy_block_count},
      {"test_only_datacopy_into_vecalc", test_only_datacopy_into_vecalc},
      {"test_only_uninitialized_workspace_read", test_only_uninitialized_workspace_read},
      {"test_only_flag_pipe_mismatch", test_only_flag_pipe_mismatch},
      {"test_only_ub_uninitialized_reaches_gm", test_only_ub_uninitialized_reaches_gm},
      {"test_only_pipe_race_tbuf_read", test_only_pipe_race_tbuf_read},
      {"test_only_pipe_race_overwrite_after_copy_out", test_only_pipe_race_overwrite_after_copy_out},
      {"test_only_synced_tbuf_read", test_only_synced_tbuf_read},
      {"test_only_synced_overwrite_after_copy_out", test_only_synced_overwrite_after_copy_out},
      {"test_only_mte2_overlapping_dst", test_only_mte2_overlapping_dst},
      {"test_only_mte3_overlapping_dst", test_only_mte3_overlapping_dst},
      {"test_only_synced_mte2_overlapping_dst", test_only_synced_mte2_overlapping_dst},
      {"test_only_synced_mte3_overlapping_dst", test_only_synced_mte3_overlapping_dst},
      {"test_only_datacopy_params_block_count", test_only_datacopy_params_block_count},
      {"test_only_datacopy_ext_block_len", test_only_datacopy_ext_block_len},
      {"test_only_datacopy_pad_too_wide", test_only_datacopy_pad_too_wide},
      {"test_only_workspace_offset_twice", test_only_workspace_offset_twice},
      {"test_only_probe_workspace_argument", test_only_probe_workspace_argument},
      {"test_only_matmul_without_mte2_mte1_wait", test_only_matmul_without_mte2_mte1_wait},
      {"test_only_matmul_without_mte1_m_wait", test_only_matmul_without_mte1_m_wait},
      {"test_only_matmul_without_m_fix_wait", test_only_matmul_without_m_fix_wait},
      {"test_only_original_schedule", test_only_original_schedule},
  };
  return k;
}

// The X-macro bodies of the field lists below (the tilings', the timing parameters'): FIELD_TO_DICT
// puts field f of `t` into the dict `d`; FIELD_SET sets field f of `t` to `v` when the key `k` names
// it, and `found`.
#define FIELD_TO_DICT(f) d[#f] = t.f;
#define FIELD_SET(f)                     \
  if (k == #f) {                         \
    t.f = static_cast<decltype(t.f)>(v); \
    found = true;                        \
  }

#define TILING_FIELDS(X)                                                                                   \
  X(blockDim) X(d) X(dPad) X(chunkRows) X(xBytes) X(tableBytes) X(ubBytes) X(ubBudget) X(outer) X(s) X(inner) \
      X(sBase) X(sRem) X(outerChunk) X(innerChunk) X(stepRows) X(headStride) X(slotElems) X(userWorkspace)         \
          X(sCores) X(oGroups) X(oBase) X(oRem)

#define PERM_TILING_FIELDS(X)                                                                                 \
  X(blockDim) X(d) X(dPad) X(chunkRows) X(xBytes) X(tableBytes) X(ubBytes) X(ubBudget) X(sCores) X(oGroups) \
      X(partnerPath) X(outer) X(s) X(inner) X(sBase) X(sRem) X(oBase) X(oRem) X(constOffset)

py::dict perm_tiling_dict(const rope_matrix::RopePermTiling& t) {
  py::dict d;
  PERM_TILING_FIELDS(FIELD_TO_DICT)
  return d;
}

py::dict tiling_dict(const rope_matrix::RopeMatrixTiling& t) {
  py::dict d;
  TILING_FIELDS(FIELD_TO_DICT)
  return d;
}

// TEST-ONLY: overwrite tiling fields by name (to build the broken tilings of the violation tests).
void patch_tiling(rope_matrix::RopeMatrixTiling& t, const py::dict& patch) {
  for (auto item : patch) {
    const std::string k = py::cast<std::string>(item.first);
    if (k.rfind("cube.", 0) == 0) continue;  // the Matmul tiling's fields: patch_cube_tiling
    const uint64_t v = py::cast<uint64_t>(item.second);
    bool found = false;
    TILING_FIELDS(FIELD_SET)
    if (!found) throw py::key_error("unknown tiling field '" + k + "'");
  }
}

// TEST-ONLY: overwrite fields of the packed Matmul tiling (keys "cube.<field>"), after the host
// computed it, to run the Matmul model on tilings the host does not choose.
void patch_cube_tiling(std::vector<uint8_t>& packed, const py::dict& patch) {
  static const std::map<std::string, size_t> fields = {{"cube.depthB1", offsetof(TCubeTiling, depthB1)}};
  for (auto item : patch) {
    const std::string k = py::cast<std::string>(item.first);
    if (k.rfind("cube.", 0) != 0) continue;
    auto it = fields.find(k);
    if (it == fields.end()) throw py::key_error("unknown Matmul tiling field '" + k + "' (patchable: cube.depthB1)");
    const int32_t v = py::cast<int32_t>(item.second);
    std::memcpy(packed.data() + sizeof(rope_matrix::RopeMatrixTiling) + it->second, &v, sizeof(v));
  }
}

rope_matrix::Problem problem_from(uint64_t outer, uint64_t s, uint64_t inner, uint64_t d, const std::string& x_dtype,
                                  const std::string& table_dtype) {
  rope_matrix::Problem p;
  p.outer = outer;
  p.s = s;
  p.inner = inner;
  p.d = d;
  if (x_dtype == "bfloat16") p.xType = rope_matrix::DType::BF16;
  else if (x_dtype == "float16") p.xType = rope_matrix::DType::FP16;
  else if (x_dtype == "float32") p.xType = rope_matrix::DType::FP32;
  else throw py::value_error("x_dtype must be bfloat16, float16 or float32, got " + x_dtype);
  p.xBytes = p.xType == rope_matrix::DType::FP32 ? 4 : 2;
  p.tableBytes = table_dtype == "float32" ? 4 : p.xBytes;
  return p;
}

template <typename F>
auto host_call(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const rope_matrix::TilingError& e) {
    throw py::value_error(e.what());
  }
}

py::dict tiling_py(uint64_t outer, uint64_t s, uint64_t inner, uint64_t d, const std::string& x_dtype,
                   const std::string& table_dtype, const std::string& soc, uint32_t max_block_dim,
                   uint64_t slot_bytes) {
  return host_call([&] {
    const auto p = problem_from(outer, s, inner, d, x_dtype, table_dtype);
    const auto plat = rope_matrix::platform_for_soc(soc);
    const auto t = rope_matrix::compute_tiling(p, plat, max_block_dim, slot_bytes);
    TwinPlatform tp(plat);
    const auto cube = rope_matrix::compute_matmul_tiling(t, p.xType, tp.ascendc);
    py::dict r = tiling_dict(t);
    r["aicNum"] = plat.aicNum;
    r["aivNum"] = plat.aivNum;
    r["workspaceBytes"] = rope_matrix::workspace_bytes(t);
    TCubeTiling ct;
    std::memcpy(&ct, cube.data(), std::min(sizeof(ct), cube.size()));
    py::dict c;
    c["M"] = ct.M; c["N"] = ct.N; c["Ka"] = ct.Ka; c["singleCoreM"] = ct.singleCoreM;
    c["baseM"] = ct.baseM; c["baseN"] = ct.baseN; c["baseK"] = ct.baseK;
    c["dbL0A"] = ct.dbL0A; c["dbL0B"] = ct.dbL0B; c["dbL0C"] = ct.dbL0C;
    c["depthA1"] = ct.depthA1; c["depthB1"] = ct.depthB1;
    c["aType"] = matmul_tiling::twin_data_type_name(matmul_tiling::twin_last_a_type());
    r["cube"] = c;
    return r;
  });
}

py::dict perm_tiling_py(uint64_t outer, uint64_t s, uint64_t inner, uint64_t d, const std::string& x_dtype,
                        const std::string& table_dtype, const std::string& soc, uint32_t max_block_dim) {
  return host_call([&] {
    const auto p = problem_from(outer, s, inner, d, x_dtype, table_dtype);
    const auto plat = rope_matrix::platform_for_soc(soc);
    py::dict r = perm_tiling_dict(rope_matrix::compute_perm_tiling(p, plat, max_block_dim));
    r["aicNum"] = plat.aicNum;
    r["aivNum"] = plat.aivNum;
    return r;
  });
}

#define HW_PARAMS(X)                                                                                           \
  X(clock_ghz) X(launch_us) X(hbm_gbps) X(l2_bytes) X(l2_gbps) X(l2_line) X(mte_latency_cycles)               \
      X(mte_core_bytes_per_cycle) X(vec_bytes_per_cycle) X(gather_elems_per_cycle) X(vec_fixed_cycles)          \
      X(scalar_cycles) X(cube_macs_half) X(cube_macs_float) X(l0a_bytes_per_cycle) X(l0b_bytes_per_cycle)       \
      X(fix_bytes_per_cycle) X(matmul_fixed_cycles) X(flag_latency_cycles)

py::dict params_dict(const twin::timing::HwParams& t) {
  py::dict d;
  HW_PARAMS(FIELD_TO_DICT)
  return d;
}

// Overrides timing parameters by name (sensitivity studies and the scheduler's tests).
void set_params(twin::timing::HwParams& t, const py::dict& patch) {
  for (auto item : patch) {
    const std::string k = py::cast<std::string>(item.first);
    const double v = py::cast<double>(item.second);
    bool found = false;
    HW_PARAMS(FIELD_SET)
    if (!found) throw py::key_error("unknown timing parameter '" + k + "'");
  }
}

py::dict timeline_dict(const twin::timing::Result& r, const twin::timing::HwParams& hw) {
  py::list cores;
  uint64_t tot[4] = {};
  for (const auto& c : r.cores) {
    py::dict d, busy, bytes;
    d["name"] = c.name;
    for (int p = 0; p < twin::kPipes; ++p) {
      if (c.busy_ns[p] > 0) busy[py::str(twin::pipe_name(p))] = c.busy_ns[p] / 1000.0;
    }
    d["busy_us"] = busy;
    d["end_us"] = c.end_ns / 1000.0;
    bytes["hbm_read"] = c.hbm_read;
    bytes["hbm_write"] = c.hbm_write;
    bytes["l2_read"] = c.l2_read;
    bytes["l2_write"] = c.l2_write;
    d["bytes"] = bytes;
    tot[0] += c.hbm_read;
    tot[1] += c.hbm_write;
    tot[2] += c.l2_read;
    tot[3] += c.l2_write;
    cores.append(d);
  }
  py::dict t, bytes;
  bytes["hbm_read"] = tot[0];
  bytes["hbm_write"] = tot[1];
  bytes["l2_read"] = tot[2];
  bytes["l2_write"] = tot[3];
  t["predicted_us"] = r.predicted_us;
  t["makespan_us"] = r.makespan_ns / 1000.0;
  t["launch_us"] = hw.launch_us;
  t["bytes"] = bytes;
  t["cores"] = cores;
  t["params"] = params_dict(hw);
  return t;
}

// The scheduler on a hand-made record (tests): `cores` is a list of dicts {name, aic, ins, sets,
// waits}; an instruction is {pipe, kind ("vector", "scalar", "mte"), ub_bytes, cycles, cap,
// gm: [(region, write, off, bytes)], deps: {pipe: count}}, gated by the waits before it (`gate`);
// a set is (pipe, after, gate), a wait (slot, flag, nth); `increments` lists (slot, flag,
// [(core, set)]). Slot i belongs to core i.
py::dict schedule_py(const py::list& cores, const py::list& increments, const py::dict& timing_params,
                     const std::string& trace_path) {
  twin::timing::Recorder rec;
  set_params(rec.params, timing_params);
  const size_t n = cores.size();
  rec.cores.resize(n);
  rec.slot_core.resize(n);
  rec.by_slot_flag.assign(n, std::vector<std::vector<int>>(twin::kFlagIds));
  for (size_t i = 0; i < n; ++i) {
    const py::dict c = cores[i].cast<py::dict>();
    twin::timing::CoreTrace& t = rec.cores[i];
    t.name = c["name"].cast<std::string>();
    t.aic = c.contains("aic") && c["aic"].cast<bool>();
    rec.slot_core[i] = static_cast<int>(i);
    for (auto h : c["ins"].cast<py::list>()) {
      const py::dict d = h.cast<py::dict>();
      twin::timing::Instr in;
      in.pipe = static_cast<uint8_t>(d["pipe"].cast<int>());
      const std::string kind = d["kind"].cast<std::string>();
      in.kind = kind == "mte" ? twin::timing::Kind::Mte : kind == "scalar" ? twin::timing::Kind::Scalar
                                                                            : twin::timing::Kind::Vector;
      in.api = kind == "mte" ? "mte" : kind == "scalar" ? "scalar" : "vector";
      if (d.contains("ub_bytes")) in.ub_bytes = d["ub_bytes"].cast<uint64_t>();
      if (d.contains("cycles")) in.cycles = d["cycles"].cast<double>();
      in.cap = d.contains("cap") ? d["cap"].cast<double>() : rec.params.mte_core_bytes_per_cycle;
      if (d.contains("gate")) in.gate = d["gate"].cast<uint32_t>();
      if (d.contains("gm")) {
        for (auto g : d["gm"].cast<py::list>()) {
          auto tpl = g.cast<py::tuple>();
          in.gm.push_back({tpl[0].cast<uint32_t>(), tpl[1].cast<bool>(), tpl[2].cast<uint64_t>(), tpl[3].cast<uint64_t>()});
        }
      }
      if (d.contains("deps")) {
        for (auto kv : d["deps"].cast<py::dict>()) in.deps[kv.first.cast<int>()] = kv.second.cast<uint32_t>();
      }
      in.deps[in.pipe] = t.issued[in.pipe]++;
      t.ins.push_back(std::move(in));
    }
    if (c.contains("sets")) {
      for (auto s : c["sets"].cast<py::list>()) {
        auto tpl = s.cast<py::tuple>();
        t.sets.push_back({tpl[0].cast<int>(), tpl[1].cast<uint32_t>(), tpl[2].cast<uint32_t>()});
      }
    }
    if (c.contains("waits")) {
      for (auto w : c["waits"].cast<py::list>()) {
        auto tpl = w.cast<py::tuple>();
        t.waits.push_back({tpl[0].cast<int>(), tpl[1].cast<int>(), tpl[2].cast<uint32_t>()});
      }
    }
  }
  for (auto h : increments) {
    auto tpl = h.cast<py::tuple>();
    twin::timing::Recorder::Increment inc;
    inc.slot = tpl[0].cast<int>();
    inc.flag = tpl[1].cast<int>();
    for (auto k : tpl[2].cast<py::list>()) {
      auto kt = k.cast<py::tuple>();
      inc.causes.push_back({kt[0].cast<int>(), kt[1].cast<int>()});
    }
    rec.by_slot_flag[inc.slot][inc.flag].push_back(static_cast<int>(rec.increments.size()));
    rec.increments.push_back(std::move(inc));
  }
  twin::timing::Result r = host_call([&] { return twin::timing::schedule(rec, true); });
  if (!trace_path.empty()) twin::timing::write_chrome_trace(rec, r, trace_path);
  py::dict d = timeline_dict(r, rec.params);
  py::list starts;
  for (const auto& sp : r.spans) starts.append(py::make_tuple(sp.core, sp.pipe, sp.start, sp.end));
  d["spans_ns"] = starts;
  return d;
}

// Runs one launch. Returns {"out": Tensor, "report": dict} or {"error": {...}} on a violation.
py::dict run_py(const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin, const at::Tensor& cos,
                const std::string& soc, uint32_t max_block_dim, const std::string& variant, const py::dict& patch,
                uint64_t op_limit, uint64_t slot_bytes, const std::string& kernel, bool timeline,
                const std::string& trace_path, const py::dict& timing_params) {
  const auto in = npu_ops_transformer_ext::check_rope_matrix_inputs("rope_matrix", x, y, sin, cos);
  TORCH_CHECK_VALUE(x.device().is_cpu(), "twin.run: tensors must be on the CPU, got ", x.device());
  rope_matrix::PreparedCall c = rope_matrix::prepare_call("rope_matrix", x, in.mat, in.sin, in.cos);
  at::Tensor out = at::empty(c.x.sizes(), c.x.options());
  py::dict result;
  if (c.empty) {
    result["out"] = out.view(x.sizes());
    result["report"] = py::dict();
    return result;
  }
  const auto plat = host_call([&] { return rope_matrix::platform_for_soc(soc); });
  // The test-only broken kernels and tiling patches are MIX kernels / MIX tilings.
  const std::string requested = !kernel.empty()                        ? kernel
                                : (!variant.empty() || patch.size()) ? std::string("mix")
                                                                      : rope_matrix::requested_kernel_from_env();
  TwinPlatform tp(plat);
  auto make_plan = [&](uint32_t cap) {
    return rope_matrix::plan_launch(c, plat, tp.ascendc, requested, cap, slot_bytes,
                                    patch.size() ? std::function<void(rope_matrix::RopeMatrixTiling&)>(
                                                       [&](rope_matrix::RopeMatrixTiling& t) { patch_tiling(t, patch); })
                                                 : nullptr);
  };
  rope_matrix::LaunchPlan plan = make_plan(max_block_dim);
  if (variant == "test_only_original_schedule" && plan.mix.oGroups != 1) {
    // The original split S only: as many AI Cores as S fills (sCores), all heads on each.
    plan = make_plan(plan.mix.sCores);
  }
  const bool perm = plan.kind == rope_matrix::NpuKernel::PERM;
  const rope_matrix::RopeMatrixTiling& t = plan.mix;
  std::vector<uint8_t>& packed = plan.tiling;
  if (!perm) patch_cube_tiling(packed, patch);

  KernelFn fn = nullptr;
  if (variant.empty()) {
    fn = kernels().at(plan.kernel);
  } else {
    auto it = test_only_kernels().find(variant);
    if (it == test_only_kernels().end()) throw py::value_error("unknown test-only variant '" + variant + "'");
    fn = it->second;
  }

  // Workspace: system part + user part, filled with 0xFF (bf16/fp16 NaN) so that reading a slot
  // before the cube wrote it shows up as NaN in the output.
  uint64_t ws_bytes = plan.workspaceBytes;
  if (variant == "test_only_original_schedule") {
    // The original's full-size workspace and one IterateAll per head of all of a cube core's rows.
    if (c.problem.xType != rope_matrix::DType::BF16 || c.problem.tableBytes != 2) {
      throw py::value_error("test_only_original_schedule runs bf16 x with bf16 tables only");
    }
    rope_matrix::RopeMatrixTiling whole = t;
    whole.innerChunk = t.inner;
    whole.stepRows = t.sBase + 1;
    packed = rope_matrix::pack_tiling(t, host_call([&] {
      return rope_matrix::compute_matmul_tiling(whole, c.problem.xType, tp.ascendc);
    }));
    ws_bytes = rope_matrix::kSysWorkspace + static_cast<uint64_t>(c.x.numel()) * 2;
  }
  twin::timing::HwParams hw;
  set_params(hw, timing_params);
  // 16 MiB more are reserved (never touched, never registered) so that no other allocation lies
  // where a kernel that skips the system part twice would point (rule `workspace-offset`).
  std::unique_ptr<uint8_t[]> ws(new uint8_t[ws_bytes + rope_matrix::kSysWorkspace]);
  std::memset(ws.get() + rope_matrix::kSysWorkspace, 0xff, ws_bytes - rope_matrix::kSysWorkspace);

  auto bytes = [](const at::Tensor& a) { return static_cast<uint64_t>(a.numel()) * a.element_size(); };
  auto ptr = [](const at::Tensor& a) { return static_cast<uint8_t*>(a.data_ptr()); };

  py::dict err;
  std::vector<twin::CoreStats> stats;
  std::vector<std::map<int, int>> flags_left;  // per core: flag -> counter left at kernel end (when non-zero)
  twin::timing::Result timing;
  int out_region = -1;
  std::vector<uint8_t> coverage_minmax(2, 0);
  {
    py::gil_scoped_release nogil;
    try {
      twin::Launch L(perm ? twin::KernelKind::AIV_ONLY : twin::KernelKind::MIX_AIC_1_2, static_cast<int>(plan.blockDim),
                     static_cast<int>(perm ? plat.aivNum : plat.aicNum));
      L.add_region("x", ptr(c.x), bytes(c.x));
      L.add_region("y", ptr(c.y), bytes(c.y));
      L.add_region("sin", ptr(c.sin), bytes(c.sin));
      L.add_region("cos", ptr(c.cos), bytes(c.cos));
      out_region = L.add_region("out", ptr(out), bytes(out), true);
      // The system part (the library's) and the user part; reading a user byte nothing wrote in
      // this launch is `uninitialized-read` (the NaN fill stays as a second line of defence).
      L.add_region("sys_workspace", ws.get(), rope_matrix::kSysWorkspace);
      const int wsRegion = L.add_region("workspace", ws.get() + rope_matrix::kSysWorkspace,
                                        ws_bytes - rope_matrix::kSysWorkspace, true, true);
      L.set_published(wsRegion);
      L.add_region("tiling", packed.data(), packed.size());
      L.set_workspace(ws.get(), ws_bytes);
      if (op_limit) L.set_op_limit(op_limit);
      if (timeline) L.enable_timing(hw);
      // Each core runs the code ascendc_library generates around the kernel (twin/kernel_wrapper.h): the
      // kernel receives the user workspace.
      L.run([&] {
        twin::run_generated_wrapper(!perm, ws.get(), [&](uint8_t* wsUsr) {
          fn(ptr(c.x), ptr(c.y), ptr(c.sin), ptr(c.cos), ptr(out), wsUsr, packed.data());
        });
      });
      stats = L.stats();
      for (const auto& st : stats) {
        std::map<int, int> left;
        for (int f = 0; f < static_cast<int>(twin::kFlagIds); ++f) {
          if (L.flag_counter(st.slot, f)) left[f] = L.flag_counter(st.slot, f);
        }
        flags_left.push_back(left);
      }
      if (timeline) {
        timing = twin::timing::schedule(*L.timing(), !trace_path.empty());
        if (!trace_path.empty()) twin::timing::write_chrome_trace(*L.timing(), timing, trace_path);
        timing.spans.clear();
      }
      const auto& r = L.region(out_region);
      uint8_t lo = 255, hi = 0;
      for (uint64_t i = 0; i < r.bytes; ++i) {
        const uint8_t v = r.write_count[i].load(std::memory_order_relaxed);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      coverage_minmax = {lo, hi};
    } catch (const twin::Violation& v) {
      py::gil_scoped_acquire g;
      err["rule"] = v.rule;
      err["core"] = v.core;
      err["message"] = std::string(v.what());
    }
  }
  if (err.size()) {
    result["error"] = err;
    return result;
  }
  const uint64_t row_bytes = c.problem.d * c.problem.xBytes;
  py::list cores;
  for (size_t i = 0; i < stats.size(); ++i) {
    const auto& s = stats[i];
    py::dict d;
    d["name"] = s.name;
    d["type"] = s.type == twin::CoreType::AIC ? "AIC" : "AIV";
    d["block"] = s.block;
    d["sub"] = s.sub;
    py::dict rd, wr;
    uint64_t tr = 0, tw = 0;
    for (const auto& [name, g] : s.gm) {
      if (g.read) rd[py::str(name)] = g.read;
      if (g.write) wr[py::str(name)] = g.write;
      tr += g.read;
      tw += g.write;
    }
    d["gm_read"] = rd;
    d["gm_write"] = wr;
    d["gm_read_bytes"] = tr;
    d["gm_write_bytes"] = tw;
    d["ub_peak_bytes"] = s.ub_peak;
    d["flags_set"] = s.flags_set;
    d["flags_waited"] = s.flags_waited;
    py::dict left;
    for (const auto& [f, n] : flags_left[i]) left[py::int_(f)] = n;
    d["flags_left"] = left;
    // x rows (of D elements) the core handled: multiplied (cube) or written to out (vector).
    auto it = s.gm.find(s.type == twin::CoreType::AIC ? "x" : "out");  // x rows: cube; out rows: vector
    const uint64_t b = it == s.gm.end() ? 0 : (s.type == twin::CoreType::AIC ? it->second.read : it->second.write);
    d["rows"] = b / row_bytes;
    cores.append(d);
  }
  py::dict report;
  report["soc"] = soc;
  report["block_dim"] = plan.blockDim;
  report["kernel"] = variant.empty() ? plan.kernel : variant;
  report["kernel_kind"] = perm ? "perm" : "mix";
  report["tiling"] = perm ? perm_tiling_dict(plan.perm) : tiling_dict(t);
  report["workspace_bytes"] = ws_bytes;
  report["cores"] = cores;
  report["out_write_count_min"] = coverage_minmax[0];
  report["out_write_count_max"] = coverage_minmax[1];
  if (timeline) report["timeline"] = timeline_dict(timing, hw);
  result["out"] = out.view(x.sizes());
  result["report"] = report;
  return result;
}

}  // namespace

PYBIND11_MODULE(_twin, m) {
  m.doc() = "CPU twin of the rope_matrix Ascend C kernel (see npu_ops_transformer_ext.twin)";
  m.def("run", &run_py, py::arg("x"), py::arg("y"), py::arg("sin"), py::arg("cos"), py::arg("soc"),
        py::arg("max_block_dim") = 0, py::arg("variant") = "", py::arg("tiling_patch") = py::dict(),
        py::arg("op_limit") = 0, py::arg("slot_bytes") = rope_matrix::kSlotBytes, py::arg("kernel") = "",
        py::arg("timeline") = false, py::arg("trace_path") = "", py::arg("timing_params") = py::dict());
  m.def("timing_params", [] { return params_dict(twin::timing::HwParams{}); });
  m.def("timing_schedule", &schedule_py, py::arg("cores"), py::arg("increments"), py::arg("timing_params") = py::dict(),
        py::arg("trace_path") = "");
  m.def("perm_tiling", &perm_tiling_py, py::arg("outer"), py::arg("s"), py::arg("inner"), py::arg("d"),
        py::arg("x_dtype") = "bfloat16", py::arg("table_dtype") = "bfloat16", py::arg("soc") = "Ascend910B3",
        py::arg("max_block_dim") = 0);
  m.def("perm_ub_bytes_per_element", &rope_matrix::perm_ub_bytes_per_element);
  m.def("perm_partner_path", [](const std::vector<int32_t>& partner, uint32_t xBytes) {
    return rope_matrix::perm_partner_path(partner, xBytes);
  }, py::arg("partner"), py::arg("x_bytes"));
  m.def("tiling", &tiling_py, py::arg("outer"), py::arg("s"), py::arg("inner"), py::arg("d"),
        py::arg("x_dtype") = "bfloat16", py::arg("table_dtype") = "bfloat16", py::arg("soc") = "Ascend910B3",
        py::arg("max_block_dim") = 0, py::arg("slot_bytes") = rope_matrix::kSlotBytes);
  m.def("ub_bytes_per_element", &rope_matrix::ub_bytes_per_element);
  m.def("test_only_variants", [] {
    py::list l;
    for (const auto& [k, v] : test_only_kernels()) l.append(k);
    return l;
  });
  m.attr("UB_USABLE_BYTES") = twin::kUbUsableBytes;
  m.attr("SYS_WORKSPACE_BYTES") = rope_matrix::kSysWorkspace;
  m.attr("SLOT_BYTES") = rope_matrix::kSlotBytes;
}
