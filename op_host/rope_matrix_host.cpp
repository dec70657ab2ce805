#include "op_host/rope_matrix_host.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "validation/rope_matrix_validate.h"

namespace rope_matrix {

namespace {

using npu_ops_transformer_ext::shape_str;

// The x dim a table varies along (aligned from the right), -1 if it is constant over every row.
int64_t table_s_dim(const char* op, const char* name, const at::Tensor& t, const at::Tensor& x, const char* x_name) {
  const int64_t off = x.dim() - t.dim();
  std::vector<int64_t> dims;
  for (int64_t i = 0; i + 1 < t.dim(); ++i) {
    if (t.size(i) != 1) dims.push_back(off + i);
  }
  TORCH_CHECK_VALUE(dims.size() <= 1, op, " (NPU): ", name, " ", shape_str(t.sizes()), " varies along ", dims.size(),
                    " dims of ", x_name, " ", shape_str(x.sizes()),
                    "; the NPU kernel takes tables that vary along one dim (S) only: [S, D] or [1, 1, S, D] "
                    "for BNSD, [S, 1, D] or [1, S, 1, D] for BSND");
  return dims.empty() ? -1 : dims[0];
}

}  // namespace

PreparedCall prepare_call(const char* op, const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin,
                          const at::Tensor& cos, const char* x_name) {
  PreparedCall c;
  const auto xt = x.scalar_type();
  TORCH_CHECK_TYPE(xt == at::kBFloat16 || xt == at::kHalf || xt == at::kFloat, op, " (NPU): ", x_name,
                   " must have dtype torch.bfloat16, torch.float16 or torch.float32 on the NPU, got ",
                   npu_ops_transformer_ext::dtype_name(xt), "; pass ", x_name, ".float() (or compute on the CPU)");
  // An empty x has an empty result whatever D is, as on the CPU: nothing to check or launch.
  if (x.numel() == 0) {
    c.x = x.contiguous();
    c.empty = true;
    return c;
  }
  const int64_t D = x.size(-1);
  TORCH_CHECK_VALUE(D >= kMinD, op, " (NPU): D = ", x_name, ".size(-1) must be >= ", kMinD, ", got ", D);

  // y: the cube multiplies in x's dtype. A float y is accepted when it converts exactly (every
  // signed permutation does); otherwise the caller must choose the rounding.
  at::Tensor yk = y;
  if (y.scalar_type() != xt) {
    yk = y.to(xt);
    // NaN converts to NaN (not equal to itself): the shared validator's rule, which exempts it.
    const bool exact = yk.to(y.scalar_type()).eq(y).logical_or(y.isnan()).all().item<bool>();
    TORCH_CHECK_VALUE(exact, op, " (NPU): mat has dtype ",
                      npu_ops_transformer_ext::dtype_name(y.scalar_type()),
                      " with values not exactly representable in ", npu_ops_transformer_ext::dtype_name(xt),
                      " (", x_name, ".dtype; the cube multiplies in ", x_name, "'s dtype); pass mat.to(", x_name,
                      ".dtype) to round them");
  }
  c.y = yk.contiguous();

  const int64_t ks = table_s_dim(op, "sin", sin, x, x_name);
  const int64_t kc = table_s_dim(op, "cos", cos, x, x_name);
  auto along = [](int64_t k) { return k < 0 ? std::string("no dim") : "dim " + std::to_string(k); };
  // A table constant over every row goes with the other's dim (expanded to [S, D] below).
  TORCH_CHECK_VALUE(ks == kc || ks < 0 || kc < 0, op, " (NPU): sin ", shape_str(sin.sizes()), " varies along ",
                    along(ks), " and cos ", shape_str(cos.sizes()), " along ", along(kc), " of ", x_name, " ",
                    shape_str(x.sizes()), "; the NPU kernels need both along the same dim of ", x_name,
                    ": give both the same shape");
  const int64_t k_s = ks < 0 ? kc : ks;
  Problem& p = c.problem;
  p.d = static_cast<uint64_t>(D);
  if (k_s < 0) {  // one table row for every x row
    p.s = 1;
    p.inner = 1;
    p.outer = static_cast<uint64_t>(x.numel() / std::max<int64_t>(D, 1));
  } else {
    p.s = static_cast<uint64_t>(x.size(k_s));
    uint64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < k_s; ++i) outer *= static_cast<uint64_t>(x.size(i));
    for (int64_t i = k_s + 1; i + 1 < x.dim(); ++i) inner *= static_cast<uint64_t>(x.size(i));
    p.outer = outer;
    p.inner = inner;
  }
  p.xType = xt == at::kFloat ? DType::FP32 : xt == at::kHalf ? DType::FP16 : DType::BF16;
  p.xBytes = xt == at::kFloat ? 4 : 2;

  // Tables: one dtype for both (float when they differ: exact), [S, D] contiguous.
  at::ScalarType tt = sin.scalar_type() == cos.scalar_type() ? sin.scalar_type() : at::kFloat;
  const int64_t S = static_cast<int64_t>(p.s);
  c.sin = sin.to(tt).reshape({-1, D}).expand({S, D}).contiguous();
  c.cos = cos.to(tt).reshape({-1, D}).expand({S, D}).contiguous();
  p.tableBytes = tt == at::kFloat ? 4 : 2;

  // x: contiguous ([outer, S, inner, D] row-major). A strided view is copied once here.
  c.x = x.contiguous();
  c.empty = x.numel() == 0;
  const char* xs = xt == at::kFloat ? "fp32" : xt == at::kHalf ? "fp16" : "bf16";
  const std::string suffix = std::string(xs) + (tt == at::kFloat ? "_fp32" : (std::string("_") + xs));
  c.kernel = "rope_matrix_" + suffix;
  c.permKernel = "rope_matrix_perm_" + suffix;

  // A signed (partial) permutation y goes to the vector-only kernel (exact moves, no matmul).
  // The check reads y on the host ([D, D], small).
  const at::Tensor yh = y.detach().to(at::kCPU, at::kDouble).contiguous();
  c.isPerm = find_signed_permutation(yh.data_ptr<double>(), p.d, c.partner, c.sign);
  return c;
}

std::string requested_kernel_from_env() {
  const char* v = std::getenv("NPU_OPS_NPU_KERNEL");
  if (v == nullptr || *v == 0) return "auto";
  const std::string s(v);
  TORCH_CHECK_VALUE(s == "auto" || s == "mix" || s == "perm", "NPU_OPS_NPU_KERNEL='", s,
                    "' is not a valid NPU kernel choice; valid values are auto, mix, perm (or leave it unset for auto)");
  return s;
}

LaunchPlan plan_launch(const PreparedCall& c, const Platform& plat, const platform_ascendc::PlatformAscendC& ascendc,
                       const std::string& requested, uint32_t maxBlockDim,
                       uint64_t slotBytes, const std::function<void(RopeMatrixTiling&)>& patch, const char* op) {
  LaunchPlan l;
  try {
    RopePermTiling pt{};
    bool served = false;
    std::string why;
    if (c.isPerm) {
      try {
        pt = compute_perm_tiling(c.problem, plat, maxBlockDim);
        served = true;
      } catch (const TilingError& e) {
        why = e.what();
      }
    }
    l.kind = choose_kernel(requested, c.isPerm, served, why);
    if (l.kind == NpuKernel::PERM) {
      const std::vector<uint32_t> runs = partner_runs(c.partner);
      pt.partnerPath = perm_partner_path(c.partner, pt.xBytes, runs);
      l.perm = pt;
      l.kernel = c.permKernel;
      l.blockDim = pt.blockDim;
      l.tiling = pack_perm_tiling(pt, c.partner, c.sign, runs);
      l.workspaceBytes = kSysWorkspace;  // no user workspace; the generated code still takes the system part
    } else {
      l.mix = compute_tiling(c.problem, plat, maxBlockDim, slotBytes);
      if (patch) patch(l.mix);
      l.kernel = c.kernel;
      l.blockDim = l.mix.blockDim;
      l.tiling = pack_tiling(l.mix, compute_matmul_tiling(l.mix, c.problem.xType, ascendc));
      l.workspaceBytes = workspace_bytes(l.mix);
    }
  } catch (const TilingError& e) {
    TORCH_CHECK_VALUE(false, op, " (NPU): ", e.what());
  }
  return l;
}

}  // namespace rope_matrix
