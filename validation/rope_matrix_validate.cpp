#include "rope_matrix_validate.h"

#include <algorithm>
#include <sstream>
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

namespace {

void check_table(const char* op, const char* name, const at::Tensor& t, const at::Tensor& x,
                 const char* x_name) {
  const int64_t D = x.size(-1);
  TORCH_CHECK_TYPE(t.scalar_type() == x.scalar_type() || t.scalar_type() == at::kFloat, op, ": ",
                   name, " must have dtype ", x.scalar_type(), " (", x_name,
                   ".dtype) or Float, got ", t.scalar_type());
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
                      shape_str(x.sizes()), ": dim ", i, " is ", t.size(i), ", expected 1 or ",
                      x.size(off + i));
  }
  TORCH_CHECK_VALUE(t.device() == x.device(), op, ": ", name, " must be on ", x_name,
                    "'s device ", x.device(), ", got ", t.device());
}

}  // namespace

void check_rope_matrix_inputs(const char* op, const at::Tensor& x, const at::Tensor& y,
                              const at::Tensor& sin, const at::Tensor& cos, const char* x_name) {
  TORCH_CHECK_VALUE(x.defined() && y.defined() && sin.defined() && cos.defined(), op,
                    ": every argument must be a defined tensor");
  TORCH_CHECK_VALUE(x.dim() >= kMinXRank, op, ": ", x_name, " must have rank >= ", kMinXRank,
                    " ([..., S, D]), got ", shape_str(x.sizes()));
  TORCH_CHECK_TYPE(is_supported_x_dtype(x.scalar_type()), op, ": ", x_name,
                   " must have dtype BFloat16, Half, Float or Double, got ", x.scalar_type());
  const int64_t D = x.size(-1);
  TORCH_CHECK_VALUE(y.dim() == 2 && y.size(0) == D && y.size(1) == D, op,
                    ": y must be [D, D] with D = ", x_name, ".size(-1) = ", D, ", got ",
                    shape_str(y.sizes()));
  TORCH_CHECK_TYPE(y.scalar_type() == x.scalar_type() || y.scalar_type() == at::kFloat, op,
                   ": y must have dtype ", x.scalar_type(), " (", x_name,
                   ".dtype) or Float, got ", y.scalar_type());
  TORCH_CHECK_VALUE(y.device() == x.device(), op, ": y must be on ", x_name, "'s device ",
                    x.device(), ", got ", y.device());
  check_table(op, "sin", sin, x, x_name);
  check_table(op, "cos", cos, x, x_name);
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
  // Elements overlap when their byte ranges do: list the offsets of what is left, sorted.
  const Layout& elems = l;
  int64_t count = 1;
  for (const auto& d : elems.dims) {
    if (count > kMaxEnumerated / d.first) return InternalOverlap::kTooMany;
    count *= d.first;
  }
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
  if (!x.storage().is_alias_of(t.storage())) return SharedMemory::kNo;
  const Layout lx = layout_of(x, true), lt = layout_of(t, true);
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
                      " (they are views of one storage and some of their elements are the same "
                      "bytes), so updating x in place would change ", name,
                      " while it is read; pass ", name, ".clone(), or use the out-of-place rope_matrix");
    TORCH_CHECK_VALUE(s != SharedMemory::kTooMany, op, ": cannot decide whether x shares memory with ",
                      name, " (views of one storage with interleaved byte ranges, more than ",
                      kMaxEnumerated, " runs to compare); pass ", name, ".clone()");
  }
}

}  // namespace npu_ops_transformer_ext
