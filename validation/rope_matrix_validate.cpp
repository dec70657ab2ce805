#include "rope_matrix_validate.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace npu_ops_transformer_ext {

bool is_supported_x_dtype(at::ScalarType t) {
  return t == at::kBFloat16 || t == at::kHalf || t == at::kFloat || t == at::kDouble;
}

std::string shape_str(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    os << (i ? ", " : "") << sizes[i];
  }
  os << "]";
  return os.str();
}

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return "torch.bfloat16";
    case at::kHalf: return "torch.float16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kByte: return "torch.uint8";
    case at::kChar: return "torch.int8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: {
      std::string n = c10::toString(t);
      std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
      return "torch." + n;
    }
  }
}

namespace {

// A 0-dim tensor's value as the user wrote it: integers in full, floating values with the digits
// that tell any two doubles apart (the default 6 would print 1.0000001 as "1").
std::string exact_value_str(const at::Tensor& v) {
  std::ostringstream os;
  if (at::isIntegralType(v.scalar_type(), /*includeBool=*/false)) {
    if (v.scalar_type() == at::kUInt64) {
      os << v.item().toUInt64();
    } else {
      os << v.item().toLong();
    }
  } else {
    os << std::setprecision(std::numeric_limits<double>::max_digits10) << v.item<double>();
  }
  return os.str();
}

// "torch.bfloat16 (x.dtype) or torch.float32", or "torch.float32 (x.dtype)" for a float32 x.
std::string x_dtype_or_float(at::ScalarType x_dtype, const char* x_name) {
  std::string s = dtype_name(x_dtype) + " (" + x_name + ".dtype)";
  return x_dtype == at::kFloat ? s : s + " or torch.float32";
}

// What to pass for a [D, D] mat: a builder where one exists (they take an even D > 0).
std::string mat_for_d_hint(int64_t D) {
  if (D > 0 && D % 2 == 0) return "build it for D, e.g. get_half_matrix(" + std::to_string(D) + ")";
  return "pass a [" + std::to_string(D) + ", " + std::to_string(D) + "] mat (the mode builders need an even D > 0)";
}

// Packed dtypes (Float4_e2m1fn_x2: two values per element, named so because older torch releases
// have no such enumerator) count as floating but have no conversion to float32.
void check_not_packed(const char* op, const char* name, at::ScalarType t, const char* x_name) {
  TORCH_CHECK_TYPE(std::strcmp(c10::toString(t), "Float4_e2m1fn_x2") != 0, op, ": ", name,
                   " has the packed dtype ", dtype_name(t),
                   " (two values per element), which does not convert to float32; unpack it to a "
                   "floating dtype (e.g. ", x_name, ".dtype) first");
}

void check_table(const char* op, const char* name, const at::Tensor& t, const at::Tensor& x,
                 const char* x_name) {
  const int64_t D = x.size(-1);
  // Any floating dtype: x.dtype and float32 are used as given, any other is converted to float32
  // once (kernel_table), exactly from every dtype narrower than float32.
  TORCH_CHECK_TYPE(at::isFloatingType(t.scalar_type()), op, ": ", name,
                   " must have a floating dtype (e.g. torch.float32 or ", x_name, ".dtype), got ",
                   dtype_name(t.scalar_type()), "; pass ", name, ".float()");
  check_not_packed(op, name, t.scalar_type(), x_name);
  TORCH_CHECK_VALUE(t.dim() >= 1 && t.dim() <= x.dim(), op, ": ", name,
                    " must have rank 1..", x.dim(), " (", x_name, " has rank ", x.dim(),
                    ") and broadcast to ", x_name, " ", shape_str(x.sizes()), ", got ",
                    shape_str(t.sizes()));
  TORCH_CHECK_VALUE(t.size(-1) == D, op, ": ", name, " must have last dim D = ", x_name,
                    ".size(-1) = ", D, ", got ", shape_str(t.sizes()));
  const int64_t off = x.dim() - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) {
    TORCH_CHECK_VALUE(t.size(i) == 1 || t.size(i) == x.size(off + i), op, ": ", name, " ",
                      shape_str(t.sizes()), " does not broadcast to ", x_name, " ",
                      shape_str(x.sizes()), ": dim ", i, " is ", t.size(i), ", expected ",
                      x.size(off + i) == 1 ? std::string("1") : "1 or " + std::to_string(x.size(off + i)), " (dims align from the right; for_layout(", name,
                      ", layout) views an [S, D] table for a BNSD, BSND or SBND ", x_name, ")");
  }
  TORCH_CHECK_VALUE(t.device() == x.device(), op, ": ", name, " must be on ", x_name,
                    "'s device ", x.device(), ", got ", t.device(), "; pass ", name, ".to(",
                    x_name, ".device)");
}

}  // namespace

at::Tensor kernel_table(const at::Tensor& t, at::ScalarType x_dtype) {
  if (t.scalar_type() == x_dtype || t.scalar_type() == at::kFloat) return t;
  // Convert only the distinct elements of an expanded table, then expand again.
  std::vector<int64_t> sizes = t.sizes().vec();
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.stride(i) == 0) sizes[i] = 1;
  }
  return t.as_strided(sizes, t.strides()).to(at::kFloat).expand(t.sizes());
}

void check_defined(const char* op, std::initializer_list<std::pair<const char*, const at::Tensor*>> named) {
  for (const auto& [name, t] : named) TORCH_CHECK_VALUE(t->defined(), op, ": ", name, " must be a tensor, got None");
}

RopeOperands check_rope_matrix_inputs(const char* op, const at::Tensor& x, const at::Tensor& mat,
                                      const at::Tensor& sin, const at::Tensor& cos, const char* x_name) {
  check_defined(op, {{x_name, &x}, {"mat", &mat}, {"sin", &sin}, {"cos", &cos}});
  TORCH_CHECK_VALUE(x.dim() >= kMinXRank, op, ": ", x_name, " must have rank >= ", kMinXRank,
                    " ([..., S, D]), got ", shape_str(x.sizes()));
  TORCH_CHECK_TYPE(is_supported_x_dtype(x.scalar_type()), op, ": ", x_name,
                   " must have dtype torch.bfloat16, torch.float16, torch.float32 or torch.float64, "
                   "got ", dtype_name(x.scalar_type()), "; pass ", x_name, ".float()");
  const int64_t D = x.size(-1);
  TORCH_CHECK_VALUE(mat.dim() == 2 && mat.size(0) == D && mat.size(1) == D, op,
                    ": mat must be [D, D] with D = ", x_name, ".size(-1) = ", D, ", got ",
                    shape_str(mat.sizes()), "; ", mat_for_d_hint(D));
  const at::ScalarType mt = mat.scalar_type();
  TORCH_CHECK_TYPE(mt == x.scalar_type() || mt == at::kFloat || at::isFloatingType(mt) ||
                       at::isIntegralType(mt, /*includeBool=*/false),
                   op, ": mat must have dtype ", x_dtype_or_float(x.scalar_type(), x_name),
                   " (or another floating or integer dtype whose entries ", x_name,
                   ".dtype holds exactly), got ", dtype_name(mt), "; pass mat.to(", x_name, ".dtype)");
  check_not_packed(op, "mat", mt, x_name);
  TORCH_CHECK_VALUE(mat.device() == x.device(), op, ": mat must be on ", x_name, "'s device ",
                    x.device(), ", got ", mat.device(), "; pass mat.to(", x_name, ".device)");
  check_table(op, "sin", sin, x, x_name);
  check_table(op, "cos", cos, x, x_name);
  RopeOperands r{mat, kernel_table(sin, x.scalar_type()), kernel_table(cos, x.scalar_type())};
  if (mt != x.scalar_type() && mt != at::kFloat) {
    // Any other dtype: taken when x.dtype holds every entry exactly (a signed permutation in any
    // dtype), converted to x.dtype; otherwise the caller chooses the rounding.
    r.mat = mat.to(x.scalar_type());
    at::Tensor differs = r.mat.to(mt).ne(mat);
    if (at::isFloatingType(mt)) {
      differs = differs.logical_and(mat.isnan().logical_not());
    } else {
      // An integer beyond x.dtype's range rounds to Inf, and Inf converted back to an integer type
      // is undefined (INT_MIN on x86, which would pass the round trip for mat = INT_MIN).
      differs = differs.logical_or(r.mat.isinf());
    }
    const at::Tensor bad = differs.nonzero();
    if (bad.size(0) > 0) {
      const int64_t i = bad[0][0].item<int64_t>(), j = bad[0][1].item<int64_t>();
      TORCH_CHECK_VALUE(false, op, ": mat has dtype ", dtype_name(mt), " and entries that ",
                        dtype_name(x.scalar_type()), " (", x_name, ".dtype) cannot hold exactly, e.g. mat[",
                        i, ", ", j, "] = ", exact_value_str(mat.select(0, i).select(0, j)), " (",
                        exact_value_str(r.mat.select(0, i).select(0, j)), " in ", dtype_name(x.scalar_type()),
                        "); pass mat.to(", x_name, ".dtype) to round them once, or (on the CPU only: the NPU ",
                        "multiplies in ", x_name, ".dtype) mat.float() to keep them");
    }
  }
  return r;
}

RopeOperands check_rope_matrix_qk_inputs(const char* op, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& mat, const at::Tensor& sin, const at::Tensor& cos) {
  check_defined(op, {{"q", &q}, {"k", &k}, {"mat", &mat}, {"sin", &sin}, {"cos", &cos}});
  const RopeOperands r = check_rope_matrix_inputs(op, q, mat, sin, cos, "q");
  TORCH_CHECK_VALUE(k.dim() < kMinXRank || k.size(-1) == q.size(-1), op,
                    ": q and k must have the same last dim D, got q ", shape_str(q.sizes()), " and k ",
                    shape_str(k.sizes()));
  // Before k's own checks: mat's exactness is checked against k.dtype there, and a k of another
  // dtype than q would be refused for a mat that q.dtype holds (with advice that cannot help).
  TORCH_CHECK_TYPE(q.scalar_type() == k.scalar_type(), op, ": q and k must have the same dtype, got ",
                   dtype_name(q.scalar_type()), " and ", dtype_name(k.scalar_type()),
                   "; pass k.to(q.dtype)");
  check_rope_matrix_inputs(op, k, mat, sin, cos, "k");
  return r;
}

namespace {

// A tensor's addresses as dims (size > 1, stride in bytes), outermost first after coalescing, plus
// its first byte and element size. Dims of stride 0 (expanded) add no address and are dropped for
// a read-only operand; for x they are kept (they make x overlap itself).
struct Layout {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, byte stride), strides descending
  int64_t base = 0;                               // byte offset of element 0 in the storage
  int64_t elem = 1;
};

Layout layout_of(const at::Tensor& t, bool drop_zero_strides) {
  Layout l;
  l.elem = static_cast<int64_t>(t.element_size());
  l.base = t.storage_offset() * l.elem;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) <= 1) continue;
    if (t.stride(i) == 0 && drop_zero_strides) continue;
    l.dims.emplace_back(t.size(i), t.stride(i) * l.elem);
  }
  std::stable_sort(l.dims.begin(), l.dims.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return l;
}

// Byte interval [first, last] the tensor's elements touch.
std::pair<int64_t, int64_t> byte_range(const Layout& l) {
  int64_t hi = l.base + l.elem - 1;
  for (const auto& d : l.dims) hi += (d.first - 1) * d.second;
  return {l.base, hi};
}

// Maximal contiguous byte runs of a (self-non-overlapping) layout: the innermost dims that are
// dense merge into one run; the outer dims are enumerated. Returns false when there would be more
// than `cap` runs.
bool runs_of(const Layout& l, int64_t cap, std::vector<std::pair<int64_t, int64_t>>& runs) {
  std::vector<std::pair<int64_t, int64_t>> dims = l.dims;
  int64_t run = l.elem;  // bytes of one run
  while (!dims.empty() && dims.back().second == run) {
    run *= dims.back().first;
    dims.pop_back();
  }
  int64_t count = 1;
  for (const auto& d : dims) {
    if (count > cap / d.first) return false;
    count *= d.first;
  }
  runs.reserve(runs.size() + count);
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t off = l.base;
  for (int64_t n = 0; n < count; ++n) {
    runs.emplace_back(off, off + run);
    for (int64_t k = static_cast<int64_t>(dims.size()) - 1; k >= 0; --k) {
      off += dims[k].second;
      if (++idx[k] < dims[k].first) break;
      off -= dims[k].second * dims[k].first;
      idx[k] = 0;
    }
  }
  return true;
}

// Sorts byte runs and merges the ones that overlap or touch (a read-only operand may overlap itself).
void merge_runs(std::vector<std::pair<int64_t, int64_t>>& runs) {
  std::sort(runs.begin(), runs.end());
  size_t n = 0;
  for (const auto& r : runs) {
    if (n > 0 && r.first <= runs[n - 1].second) {
      runs[n - 1].second = std::max(runs[n - 1].second, r.second);
    } else {
      runs[n++] = r;
    }
  }
  runs.resize(n);
}

constexpr int64_t kMaxEnumerated = int64_t(1) << 24;

}  // namespace

InternalOverlap internal_overlap(const at::Tensor& x) {
  if (x.numel() == 0) return InternalOverlap::kNo;  // no elements, none shared (an expanded empty view too)
  Layout l = layout_of(x, /*drop_zero_strides=*/false);
  if (!l.dims.empty() && l.dims.back().second == 0) return InternalOverlap::kYes;
  // The largest stride that exceeds the whole span of the smaller ones separates its slices: drop
  // it. What is left (usually nothing) is decided by listing its offsets.
  while (l.dims.size() > 1) {
    int64_t rest = 0;
    for (size_t k = 1; k < l.dims.size(); ++k) rest += (l.dims[k].first - 1) * l.dims[k].second;
    if (l.dims[0].second <= rest + l.elem - 1) break;
    l.dims.erase(l.dims.begin());
  }
  if (l.dims.size() <= 1) {
    return l.dims.empty() || l.dims[0].second >= l.elem ? InternalOverlap::kNo : InternalOverlap::kYes;
  }
  // More elements than fit side by side in the span: two of them overlap.
  const Layout& elems = l;
  int64_t span = l.elem;
  for (const auto& d : elems.dims) span += (d.first - 1) * d.second;
  int64_t count = 1;
  for (const auto& d : elems.dims) {
    if (count > span / l.elem / d.first) return InternalOverlap::kYes;
    count *= d.first;
  }
  // Elements overlap when their byte ranges do: list the offsets of what is left, sorted.
  if (count > kMaxEnumerated) return InternalOverlap::kTooMany;
  std::vector<int64_t> offs;
  offs.reserve(count);
  std::vector<int64_t> idx(elems.dims.size(), 0);
  int64_t off = 0;
  for (int64_t n = 0; n < count; ++n) {
    offs.push_back(off);
    for (int64_t k = static_cast<int64_t>(elems.dims.size()) - 1; k >= 0; --k) {
      off += elems.dims[k].second;
      if (++idx[k] < elems.dims[k].first) break;
      off -= elems.dims[k].second * elems.dims[k].first;
      idx[k] = 0;
    }
  }
  std::sort(offs.begin(), offs.end());
  for (size_t i = 1; i < offs.size(); ++i) {
    if (offs[i] - offs[i - 1] < l.elem) return InternalOverlap::kYes;
  }
  return InternalOverlap::kNo;
}

SharedMemory shared_memory(const at::Tensor& x, const at::Tensor& t) {
  if (x.numel() == 0 || t.numel() == 0) return SharedMemory::kNo;
  if (!x.has_storage() || !t.has_storage()) return SharedMemory::kNo;
  // t's bytes are placed relative to x's storage. Two storage objects may hold one buffer (two
  // torch.from_numpy or torch.frombuffer calls over the same memory): then by their addresses.
  int64_t shift = 0;
  if (!x.storage().is_alias_of(t.storage())) {
    const void* px = x.storage().data();
    const void* pt = t.storage().data();
    if (px == nullptr || pt == nullptr || x.device() != t.device()) return SharedMemory::kNo;
    shift = static_cast<int64_t>(reinterpret_cast<uintptr_t>(pt) - reinterpret_cast<uintptr_t>(px));
  }
  const Layout lx = layout_of(x, true);
  Layout lt = layout_of(t, true);
  lt.base += shift;
  const auto rx = byte_range(lx), rt = byte_range(lt);
  if (rx.second < rt.first || rt.second < rx.first) return SharedMemory::kNo;
  // Interleaved in one storage (e.g. two slices of a packed buffer): compare their byte runs.
  std::vector<std::pair<int64_t, int64_t>> a, b;
  if (!runs_of(lx, kMaxEnumerated, a) || !runs_of(lt, kMaxEnumerated, b)) return SharedMemory::kTooMany;
  merge_runs(a);
  merge_runs(b);
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].first < b[j].second && b[j].first < a[i].second) return SharedMemory::kYes;
    if (a[i].second <= b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return SharedMemory::kNo;
}

void check_rope_matrix_inplace(const char* op, const at::Tensor& x, const at::Tensor& mat,
                               const at::Tensor& sin, const at::Tensor& cos) {
  // torch's own in-place ops refuse this too (an inference tensor has no version counter).
  TORCH_CHECK(!x.is_inference() || c10::InferenceMode::is_enabled(), op,
              ": x is an inference tensor (made under torch.inference_mode()), which cannot be updated "
              "in place outside inference mode; call it under torch.inference_mode(), or pass x.clone()");
  const InternalOverlap self = internal_overlap(x);
  TORCH_CHECK_VALUE(self != InternalOverlap::kYes, op,
                    ": x overlaps itself (two of its elements are the same memory, e.g. an expanded "
                    "tensor, strides ", x.strides(), " for shape ", shape_str(x.sizes()),
                    "), so it cannot be updated in place; use the out-of-place rope_matrix, or "
                    "x.contiguous() first");
  TORCH_CHECK_VALUE(self != InternalOverlap::kTooMany, op, ": cannot decide whether x (shape ",
                    shape_str(x.sizes()), ", strides ", x.strides(),
                    ") overlaps itself without listing more than ", kMaxEnumerated,
                    " offsets; use the out-of-place rope_matrix, or x.contiguous() first");
  for (const auto& [t, name] : {std::pair<const at::Tensor*, const char*>{&mat, "mat"},
                                {&sin, "sin"}, {&cos, "cos"}}) {
    const SharedMemory s = shared_memory(x, *t);
    TORCH_CHECK_VALUE(s != SharedMemory::kYes, op, ": x shares memory with ", name,
                      " (some of their elements are the same bytes of memory), so updating x in "
                      "place would change ", name,
                      " while it is read; pass ", name, ".clone(), or use the out-of-place rope_matrix");
    TORCH_CHECK_VALUE(s != SharedMemory::kTooMany, op, ": cannot decide whether x shares memory with ",
                      name, " (interleaved byte ranges in one buffer, more than ",
                      kMaxEnumerated, " runs to compare); pass ", name, ".clone()");
  }
}

}  // namespace npu_ops_transformer_ext
