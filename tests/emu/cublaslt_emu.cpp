// The part of cuBLASLt kernels/gemm.cu uses, on the host, for the kernel emulator (docs/design.md
// §15b): descriptors hold what was set on them, the heuristic checks the problem the way the
// library does where the rule is documented, and cublasLtMatmul computes D = alpha op(A) op(B) +
// beta C in column-major order, batch by batch. What it checks: the shapes of A, B, C and D agree
// with the operations (CUBLAS_STATUS_INVALID_VALUE otherwise); int8 inputs need the "TN" layout
// (A transposed, B not: the IMMA rule of cublasLtMatmul) with int32 compute, scale and output, and
// leading dimensions that are multiples of 4 (CUBLAS_STATUS_NOT_SUPPORTED otherwise); every element
// an operand's layout reaches lies inside one device allocation (CUBLAS_STATUS_INVALID_VALUE and a
// line naming the operand otherwise). Float products are summed in double and rounded once, int8
// products in wrapping int32, as the hardware does.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "cuda_emu_runtime.h"

namespace {

struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;
};

struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};

// The alignments (bytes) the caller promised for A, B, C and D: 256 unless set, as the library's
// defaults. The heuristic's algorithm carries them (in cublasLtMatmulAlgo_t's opaque words) to
// cublasLtMatmul, which refuses operands less aligned than promised: the real library's kernel for
// such a promise may fault or read wrong data.
struct Preference {
  uint64_t max_workspace = 0;
  uint32_t alignment[4] = {256, 256, 256, 256};
};

// A handle the emulator gives out points to one of the structs above (the caller never reads
// through it): made by create<>, read by ours<>, freed by destroy<>.
template <class Ours, class Handle>
Handle create(const Ours& value) {
  return reinterpret_cast<Handle>(new Ours(value));
}
template <class Ours, class Handle>
Ours& ours(Handle handle) {
  return *reinterpret_cast<Ours*>(handle);
}
template <class Ours, class Handle>
void destroy(Handle handle) {
  delete reinterpret_cast<Ours*>(handle);
}

size_t type_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
    case CUDA_R_32I:
      return 4;
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_8I:
      return 1;
    default:
      return 0;
  }
}

template <class T>
cublasStatus_t set_value(T& field, const void* buf, size_t bytes) {
  if (buf == nullptr || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

double read_float(const void* base, cudaDataType_t type, int64_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[index];
  uint16_t bits;
  std::memcpy(&bits, static_cast<const char*>(base) + index * 2, 2);
  return echo::bf16_bits_to_float(bits);
}

// The problem's dimensions from the layouts; false when they disagree.
bool dimensions(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl, uint64_t& m,
                uint64_t& n, uint64_t& k) {
  m = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  n = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  const auto ld_ok = [](const Layout& l) { return l.ld >= 1 && static_cast<uint64_t>(l.ld) >= l.rows; };
  return kb == k && c.rows == m && c.cols == n && dl.rows == m && dl.cols == n && ld_ok(a) && ld_ok(b) && ld_ok(c) &&
         ld_ok(dl) && a.batch_count == c.batch_count && b.batch_count == c.batch_count &&
         dl.batch_count == c.batch_count && c.batch_count >= 1;
}

bool int8_problem(const Layout& a) { return a.type == CUDA_R_8I; }

cublasStatus_t check_problem(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl) {
  uint64_t m, n, k;
  if (!dimensions(d, a, b, c, dl, m, n, k)) return CUBLAS_STATUS_INVALID_VALUE;
  if (type_bytes(a.type) == 0 || type_bytes(c.type) == 0 || a.type != b.type || c.type != dl.type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (int8_problem(a)) {
    if (d.compute != CUBLAS_COMPUTE_32I || d.scale != CUDA_R_32I || c.type != CUDA_R_32I)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d.trans_a != CUBLAS_OP_T || d.trans_b != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a.ld % 4 != 0 || b.ld % 4 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (a.type == CUDA_R_32F && c.type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

// The operand's start, each column's start and (batched) each batch entry's start keep `alignment`.
bool aligned(const void* p, const Layout& l, uint32_t alignment) {
  const uint64_t elem = type_bytes(l.type);
  const bool batched = l.batch_count > 1;
  return reinterpret_cast<uintptr_t>(p) % alignment == 0 && (l.cols <= 1 || l.ld * elem % alignment == 0) &&
         (!batched || static_cast<uint64_t>(l.batch_stride) * elem % alignment == 0);
}

// Every element the layout reaches lies in one device allocation.
bool reachable(const void* p, const Layout& l) {
  if (p == nullptr) return false;
  const int64_t last = static_cast<int64_t>(l.rows - 1) + static_cast<int64_t>(l.cols - 1) * l.ld +
                       static_cast<int64_t>(l.batch_count - 1) * l.batch_stride;
  return echo::emu::is_device_range(p, static_cast<size_t>(last + 1) * type_bytes(l.type));
}

// The library's kernels write their workspace: its two ends here, in stream order (ASan names a
// workspace freed, or given to another allocation, while the GEMM was queued).
void write_workspace(void* workspace, size_t bytes) {
  if (bytes == 0) return;
  const size_t edge = std::min<size_t>(bytes, 4096);
  std::memset(workspace, 0xa5, edge);
  std::memset(static_cast<char*>(workspace) + bytes - edge, 0xa5, edge);
}

// D = alpha op(A) op(B) + beta C, batch by batch: the work cublasLtMatmul issues on its stream.
// alpha and beta are the 4 bytes read at the call (an int32 or a float, per the problem).
void multiply(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl, const void* a_ptr,
              const void* b_ptr, const void* c_ptr, void* d_ptr, uint32_t alpha_bits, uint32_t beta_bits) {
  const void* alpha = &alpha_bits;
  const void* beta = &beta_bits;
  uint64_t m, n, k;
  dimensions(d, a, b, c, dl, m, n, k);
  const auto at = [](const Layout& l, bool trans, uint64_t row, uint64_t col, int32_t batch) {
    const uint64_t r = trans ? col : row, cc = trans ? row : col;
    return static_cast<int64_t>(r) + static_cast<int64_t>(cc) * l.ld + batch * l.batch_stride;
  };
  const bool ta = d.trans_a == CUBLAS_OP_T, tb = d.trans_b == CUBLAS_OP_T;
  const bool integer = int8_problem(a);
  // op(A) row by row (m x k) and op(B) column by column (n x k), so each dot product reads two
  // contiguous rows.
  std::vector<double> fa, fb;
  std::vector<int32_t> ia, ib;
  for (int32_t batch = 0; batch < c.batch_count; ++batch) {
    if (integer) {
      ia.resize(m * k);
      ib.resize(n * k);
      for (uint64_t i = 0; i < m; ++i)
        for (uint64_t p = 0; p < k; ++p) ia[i * k + p] = static_cast<const int8_t*>(a_ptr)[at(a, ta, i, p, batch)];
      for (uint64_t j = 0; j < n; ++j)
        for (uint64_t p = 0; p < k; ++p) ib[j * k + p] = static_cast<const int8_t*>(b_ptr)[at(b, tb, p, j, batch)];
    } else {
      fa.resize(m * k);
      fb.resize(n * k);
      for (uint64_t i = 0; i < m; ++i)
        for (uint64_t p = 0; p < k; ++p) fa[i * k + p] = read_float(a_ptr, a.type, at(a, ta, i, p, batch));
      for (uint64_t j = 0; j < n; ++j)
        for (uint64_t p = 0; p < k; ++p) fb[j * k + p] = read_float(b_ptr, b.type, at(b, tb, p, j, batch));
    }
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        const int64_t ci = at(c, false, i, j, batch), di = at(dl, false, i, j, batch);
        if (integer) {
          uint32_t acc = 0;  // wraps like the hardware's int32 accumulator
          for (uint64_t p = 0; p < k; ++p) acc += static_cast<uint32_t>(ia[i * k + p] * ib[j * k + p]);
          const uint32_t al = static_cast<uint32_t>(*static_cast<const int32_t*>(alpha));
          const uint32_t be = static_cast<uint32_t>(*static_cast<const int32_t*>(beta));
          uint32_t out = al * acc;
          if (be != 0) out += be * static_cast<uint32_t>(static_cast<const int32_t*>(c_ptr)[ci]);
          static_cast<int32_t*>(d_ptr)[di] = static_cast<int32_t>(out);
          continue;
        }
        double acc = 0.0;
        for (uint64_t p = 0; p < k; ++p) acc += fa[i * k + p] * fb[j * k + p];
        const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
        // NOTE: beta == 0 does not read C, as in BLAS: a NaN there does not reach D.
        const float out =
            al * static_cast<float>(acc) + (be != 0.0f ? be * static_cast<float>(read_float(c_ptr, c.type, ci)) : 0.0f);
        if (dl.type == CUDA_R_32F) {
          static_cast<float*>(d_ptr)[di] = out;
        } else {
          const uint16_t bits = echo::float_to_bf16_bits(out);
          std::memcpy(static_cast<char*>(d_ptr) + di * 2, &bits, 2);
        }
      }
    }
  }
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new char);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<char*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS (emulated)";
  }
}
const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasLtGetStatusName(status); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = create<Desc, cublasLtMatmulDesc_t>(Desc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  destroy<Desc>(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Desc& d = ours<Desc>(desc);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA) return set_value(d.trans_a, buf, bytes);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSB) return set_value(d.trans_b, buf, bytes);
  return CUBLAS_STATUS_NOT_SUPPORTED;  // NOTE: an attribute the emulator does not model fails loudly
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = create<Layout, cublasLtMatrixLayout_t>(Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  destroy<Layout>(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Layout& l = ours<Layout>(layout);
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) return set_value(l.batch_count, buf, bytes);
  if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) return set_value(l.batch_stride, buf, bytes);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = create<Preference, cublasLtMatmulPreference_t>(Preference{});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  destroy<Preference>(pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Preference& p = ours<Preference>(pref);
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return set_value(p.max_workspace, buf, bytes);
  int which = -1;
  if (attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES) which = 0;
  if (attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES) which = 1;
  if (attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES) which = 2;
  if (attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) which = 3;
  if (which < 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  uint32_t alignment = 0;
  const cublasStatus_t s = set_value(alignment, buf, bytes);
  if (s != CUBLAS_STATUS_SUCCESS || alignment == 0 || (alignment & (alignment - 1)) != 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  p.alignment[which] = alignment;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (handle == nullptr || desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr ||
      pref == nullptr || requested < 1 || results == nullptr || returned == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t s =
      check_problem(ours<Desc>(desc), ours<Layout>(a), ours<Layout>(b), ours<Layout>(c), ours<Layout>(d));
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  static_assert(sizeof(Preference::alignment) <= sizeof(results[0].algo.data));
  std::memcpy(results[0].algo.data, ours<Preference>(pref).alignment, sizeof(Preference::alignment));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].workspaceSize = 0;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a_ptr,
                              cublasLtMatrixLayout_t a_desc, const void* b_ptr, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* c_ptr, cublasLtMatrixLayout_t c_desc, void* d_ptr,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (handle == nullptr || desc == nullptr || alpha == nullptr || beta == nullptr || algo == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  // Copies: the descriptors may be destroyed before the stream reaches the product.
  const Desc d = ours<Desc>(desc);
  const Layout a = ours<Layout>(a_desc), b = ours<Layout>(b_desc), c = ours<Layout>(c_desc), dl = ours<Layout>(d_desc);
  if (!echo::emu::stream_exists(stream)) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t s = check_problem(d, a, b, c, dl);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  uint32_t promised[4];
  std::memcpy(promised, algo->data, sizeof promised);
  const struct {
    const char* name;
    const void* p;
    const Layout& l;
    uint32_t alignment;
  } operands[] = {{"A", a_ptr, a, promised[0]},
                  {"B", b_ptr, b, promised[1]},
                  {"C", c_ptr, c, promised[2]},
                  {"D", d_ptr, dl, promised[3]}};
  for (const auto& o : operands) {
    if (!aligned(o.p, o.l, o.alignment)) {
      std::fprintf(stderr,
                   "echo kernel emulator: cublasLtMatmul's %s (%p, ld %lld, batch stride %lld) is not aligned to the "
                   "%u bytes its algorithm was chosen for\n",
                   o.name, o.p, static_cast<long long>(o.l.ld), static_cast<long long>(o.l.batch_stride), o.alignment);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!reachable(o.p, o.l)) {
      std::fprintf(stderr,
                   "echo kernel emulator: cublasLtMatmul's %s (%llu x %llu, ld %lld, batch %d) is not inside "
                   "one device allocation\n",
                   o.name, static_cast<unsigned long long>(o.l.rows), static_cast<unsigned long long>(o.l.cols),
                   static_cast<long long>(o.l.ld), o.l.batch_count);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (workspace_bytes > 0 && !echo::emu::is_device_range(workspace, workspace_bytes)) {
    std::fprintf(stderr, "echo kernel emulator: cublasLtMatmul's workspace (%p, %zu bytes) is not device memory\n",
                 workspace, workspace_bytes);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  uint32_t alpha_bits, beta_bits;  // host pointer mode: read at the call, as the library does
  std::memcpy(&alpha_bits, alpha, 4);
  std::memcpy(&beta_bits, beta, 4);
  const auto product = [=] {
    write_workspace(workspace, workspace_bytes);
    multiply(d, a, b, c, dl, a_ptr, b_ptr, c_ptr, d_ptr, alpha_bits, beta_bits);
  };
  echo::emu::issue(stream, product);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
