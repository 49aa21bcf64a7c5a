// CUDA GEMMs on cuBLASLt (kernels/gemm.cuh): f32 / bf16 products with fp32 accumulation, strided
// batched products for attention, and the exact int8 product with its TN packing and k chunking.
//
// Row-major to column-major: a row-major (r, c) matrix with row stride ld is, byte for byte, the
// column-major (c, r) matrix with leading dimension ld. So the row-major C (m, n) = op(A) op(B) is
// computed as the column-major C^T (n, m) = op(B)^T op(A)^T: cuBLASLt's "A" is our B, its "B" is
// our A, its m is our n, and each transpose flag keeps its meaning for its own buffer.
// clang-format off
#include "launch.cuh"
#include "cuda_check.h"
#include "device_util.cuh"
// clang-format on

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "cublas_check.h"
#include "gemm.cuh"
#include "quant/int8_gemm.h"

namespace echo::cuda {

static_assert(kInt8ChunkK % 16 == 0 && kInt8ChunkK <= quant::kInt8GemmMaxK,
              "an int8 k chunk must be a multiple of 16 (the padded k's granularity) that cannot overflow int32");

namespace gemm_internal {

// Shape, dtypes, transposes, leading dimensions, batch strides and alignments: everything the
// heuristic's choice depends on (pointers only through their alignment).
using PlanKey = std::array<int64_t, 16>;

// One cached matmul: descriptors in cuBLASLt's (column-major, swapped) terms and the algorithm.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr;  // our B
  cublasLtMatrixLayout_t lt_b = nullptr;  // our A
  cublasLtMatrixLayout_t lt_c = nullptr;  // our C (also D: in place)
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
  bool fallback = false;  // cuBLASLt offered no algorithm: the fallback kernel runs it

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (lt_c) cublasLtMatrixLayoutDestroy(lt_c);
    if (lt_b) cublasLtMatrixLayoutDestroy(lt_b);
    if (lt_a) cublasLtMatrixLayoutDestroy(lt_a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

}  // namespace gemm_internal

struct GemmContext::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* scratch = nullptr;  // int8 packing buffers, grown on demand
  size_t scratch_bytes = 0;
  std::map<gemm_internal::PlanKey, std::unique_ptr<gemm_internal::Plan>> plans;
  bool fallback_only = false;  // tests: plan every float product onto the fallback kernel
  std::function<void(const std::string&)> note_fallback;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    plans.clear();
    // NOTE: cudaFree of pool memory (the scratch) does not wait for the kernels that still read it,
    // and the plain workspace's cudaFree, which would, is absent with a zero-byte workspace: wait here.
    cudaDeviceSynchronize();
    if (workspace) cudaFree(workspace);
    if (scratch) cudaFree(scratch);
    if (handle) cublasLtDestroy(handle);
  }

  // At least `bytes` of device scratch, valid for work issued on `stream` until the next call.
  void* get_scratch(size_t bytes, cudaStream_t stream) {
    if (bytes <= scratch_bytes) return scratch;
    // NOTE: work already issued on the stream may still read the old buffer; wait for it before
    // freeing. Growth by half again keeps this to a few times per run.
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const size_t grown = std::max(bytes, gemm_scratch_held_bytes(scratch_bytes));
    if (scratch) {
      CUDA_CHECK(cudaFreeAsync(scratch, stream));
      scratch = nullptr;
      scratch_bytes = 0;
    }
    // NOTE: from the stream-ordered pool, so the memory plan's reservation covers it (§2.1).
    CUDA_CHECK(cudaMallocAsync(&scratch, grown, stream));
    scratch_bytes = grown;
    return scratch;
  }
};

GemmContext::GemmContext(size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  if (workspace_bytes > 0) CUDA_CHECK(cudaMalloc(&impl_->workspace, workspace_bytes));
  impl_->workspace_bytes = workspace_bytes;
}

GemmContext::~GemmContext() = default;

size_t GemmContext::plan_count() const { return impl_->plans.size(); }

size_t GemmContext::fallback_plan_count() const {
  return static_cast<size_t>(std::count_if(impl_->plans.begin(), impl_->plans.end(),
                                           [](const auto& entry) { return entry.second->fallback; }));
}

void GemmContext::on_fallback(std::function<void(const std::string& problem)> note) {
  impl_->note_fallback = std::move(note);
}

void GemmContext::use_fallback_only(bool on) {
  impl_->fallback_only = on;
  impl_->plans.clear();  // plans made before chose by the other rule
}

namespace {

using detail::from_float;
using detail::to_float;

using gemm_internal::Plan;
using gemm_internal::PlanKey;

constexpr int kThreads = 256;
constexpr int64_t kGridCap = 65535;  // grid-stride loops cover the rest

unsigned grid_for(int64_t items, int64_t per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kGridCap));
}

int64_t round_up(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

// ---- Small kernels -------------------------------------------------------------------------------

// C_i = beta * C_i on a strided batch of (rows, cols) matrices (the k == 0 product); beta == 0
// writes zeros without reading.
template <class T>
__global__ void scale_matrix_kernel(T* c, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                                    float beta) {
  const int64_t total = batch * rows * cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t col = idx % cols;
    const int64_t t = idx / cols;
    T* p = c + (t / rows) * stride + (t % rows) * ld + col;
    *p = beta == 0.0f ? from_float<T>(0.0f) : from_float<T>(beta * to_float(*p));
  }
}

__global__ void zero_i32_kernel(int32_t* c, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t total = rows * cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    c[(idx / cols) * ld + idx % cols] = 0;
  }
}

// The product of last resort, for a float problem cuBLASLt's heuristic offers no algorithm for
// (an operand aligned to 2 bytes only, such as a bf16 view starting at an odd column): C_i =
// alpha op(A_i) op(B_i) + beta C_i, row-major as this file's callers see it, in 16 x 16 output
// tiles with the operands staged through shared memory and fp32 accumulation in k order. beta == 0
// does not read C (it may hold NaN). Slow next to cuBLASLt, and only for such shapes.
constexpr int kFallbackTile = 16;

template <class TIn, class TOut>
__global__ void fallback_gemm_kernel(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t batch,
                                     float alpha, const TIn* __restrict__ a, int64_t lda, int64_t stride_a,
                                     const TIn* __restrict__ b, int64_t ldb, int64_t stride_b, float beta, TOut* c,
                                     int64_t ldc, int64_t stride_c) {
  __shared__ float a_tile[kFallbackTile][kFallbackTile + 1];
  __shared__ float b_tile[kFallbackTile][kFallbackTile + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t tiles_m = (m + kFallbackTile - 1) / kFallbackTile, tiles_n = (n + kFallbackTile - 1) / kFallbackTile;
  const int64_t tiles = batch * tiles_m * tiles_n;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t entry = t / (tiles_m * tiles_n), in_entry = t % (tiles_m * tiles_n);
    const int64_t row0 = (in_entry / tiles_n) * kFallbackTile, col0 = (in_entry % tiles_n) * kFallbackTile;
    const TIn* ae = a + entry * stride_a;
    const TIn* be = b + entry * stride_b;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < k; k0 += kFallbackTile) {
      // op(A)(i, j) is A[j][i] when transposed; op(B) likewise.
      const int64_t ai = row0 + ty, aj = k0 + tx;
      a_tile[ty][tx] = ai < m && aj < k ? to_float(trans_a ? ae[aj * lda + ai] : ae[ai * lda + aj]) : 0.0f;
      const int64_t bi = k0 + ty, bj = col0 + tx;
      b_tile[ty][tx] = bi < k && bj < n ? to_float(trans_b ? be[bj * ldb + bi] : be[bi * ldb + bj]) : 0.0f;
      __syncthreads();
      for (int kk = 0; kk < kFallbackTile; ++kk) acc = fmaf(a_tile[ty][kk], b_tile[kk][tx], acc);
      __syncthreads();  // the next k tile overwrites the shared tiles
    }
    const int64_t row = row0 + ty, col = col0 + tx;
    if (row < m && col < n) {
      TOut* out = c + entry * stride_c + row * ldc + col;
      const float scaled = alpha * acc;
      *out = from_float<TOut>(beta == 0.0f ? scaled : fmaf(beta, to_float(*out), scaled));
    }
  }
}

// dst (dst_rows, dst_cols), row-major and packed, = the logical (rows, cols) matrix L zero padded,
// L(r, c) = transposed ? src[c * ld + r] : src[r * ld + c]. 32 x 32 tiles through shared memory,
// so both the reads and the writes are coalesced whichever way the source runs.
constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;

__global__ void pack_s8_kernel(const int8_t* __restrict__ src, int64_t ld, bool transposed, int64_t rows, int64_t cols,
                               int8_t* __restrict__ dst, int64_t dst_rows, int64_t dst_cols) {
  __shared__ int8_t tile[kTile][kTile + 1];
  const int64_t tiles_c = (dst_cols + kTile - 1) / kTile;
  const int64_t num_tiles = ((dst_rows + kTile - 1) / kTile) * tiles_c;
  const int tx = static_cast<int>(threadIdx.x);
  for (int64_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kTile;
    const int64_t c0 = (t % tiles_c) * kTile;
    for (int yy = static_cast<int>(threadIdx.y); yy < kTile; yy += kTileRowsPerPass) {
      if (transposed) {
        // tile[c offset][r offset]: consecutive threads read consecutive r, contiguous in src.
        const int64_t r = r0 + tx;
        const int64_t c = c0 + yy;
        tile[yy][tx] = (r < rows && c < cols) ? src[c * ld + r] : int8_t{0};
      } else {
        const int64_t r = r0 + yy;
        const int64_t c = c0 + tx;
        tile[yy][tx] = (r < rows && c < cols) ? src[r * ld + c] : int8_t{0};
      }
    }
    __syncthreads();
    for (int yy = static_cast<int>(threadIdx.y); yy < kTile; yy += kTileRowsPerPass) {
      const int64_t r = r0 + yy;
      const int64_t c = c0 + tx;
      if (r < dst_rows && c < dst_cols) dst[r * dst_cols + c] = transposed ? tile[tx][yy] : tile[yy][tx];
    }
    __syncthreads();  // the next tile overwrites the shared buffer
  }
}

// dst (rows, cols) with row stride ld_dst <- the packed src with row stride ld_src.
__global__ void copy_i32_kernel(const int32_t* __restrict__ src, int64_t ld_src, int32_t* __restrict__ dst,
                                int64_t ld_dst, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t r = idx / cols;
    const int64_t c = idx % cols;
    dst[r * ld_dst + c] = src[r * ld_src + c];
  }
}

// dst (rows, cols) with row stride ld_dst += the packed src with row stride ld_src, in int32 with
// two's-complement wrap-around (unsigned arithmetic: no signed-overflow UB; exact whenever the
// true sum fits).
__global__ void add_i32_kernel(const int32_t* __restrict__ src, int64_t ld_src, int32_t* __restrict__ dst,
                               int64_t ld_dst, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t r = idx / cols;
    const int64_t c = idx % cols;
    int32_t* p = dst + r * ld_dst + c;
    *p = static_cast<int32_t>(static_cast<uint32_t>(*p) + static_cast<uint32_t>(src[r * ld_src + c]));
  }
}

// ---- cuBLASLt plumbing -------------------------------------------------------------------------------

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::i8:
      return CUDA_R_8I;
    case DType::i32:
      return CUDA_R_32I;
    default:
      break;
  }
  ECHO_FAIL("gemm: no cuBLASLt type for {}", d);
}

// The alignment (a power of two, at most 256 bytes) every batch entry's every row of an operand
// keeps: the lowest set bit of its address, its row stride and its batch stride in bytes. The
// heuristic must be told it (its default assumes 256) or it may pick a kernel that needs more.
uint32_t operand_alignment(const MatrixRef& x, int64_t batch) {
  const uint64_t elem = dtype_size(x.dtype);
  uint64_t bits = reinterpret_cast<uintptr_t>(x.data) | 256u;
  bits |= static_cast<uint64_t>(x.ld) * elem;
  if (batch > 1) bits |= static_cast<uint64_t>(x.batch_stride) * elem;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

void set_batch(cublasLtMatrixLayout_t layout, int64_t batch, int64_t stride) {
  const int32_t count = static_cast<int32_t>(batch);
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
  CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
}

struct PreferenceGuard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceGuard() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

struct Problem {
  bool trans_a, trans_b;
  int64_t m, n, k, batch;
  MatrixRef a, b, c;
};

std::string describe_problem(const Problem& p) {
  return fmt::format(
      "m {} n {} k {} batch {}, trans_a {} trans_b {}, a {} ld {} stride {}, b {} ld {} stride {}, c {} ld {} stride "
      "{}",
      p.m, p.n, p.k, p.batch, p.trans_a, p.trans_b, p.a.dtype, p.a.ld, p.a.batch_stride, p.b.dtype, p.b.ld,
      p.b.batch_stride, p.c.dtype, p.c.ld, p.c.batch_stride);
}

std::unique_ptr<Plan> make_plan(GemmContext::Impl& ctx, const char* op, const Problem& p, uint32_t align_a,
                                uint32_t align_b, uint32_t align_c) {
  auto plan = std::make_unique<Plan>();
  const bool integer = p.a.dtype == DType::i8;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, integer ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                                        integer ? CUDA_R_32I : CUDA_R_32F));
  // cuBLASLt's A is our B and its B our A (see the top of the file); each keeps its own flag.
  const cublasOperation_t op_lt_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_lt_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a, sizeof op_lt_a));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b, sizeof op_lt_b));
  // Stored shapes, column-major: row-major B is (k, n), or (n, k) when trans_b, so column-major
  // (n, k), or (k, n); likewise A. Our C (m, n) is the column-major (n, m).
  const uint64_t m = static_cast<uint64_t>(p.m), n = static_cast<uint64_t>(p.n), k = static_cast<uint64_t>(p.k);
  CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan->lt_a, cuda_type(p.b.dtype), p.trans_b ? k : n, p.trans_b ? n : k, p.b.ld));
  CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan->lt_b, cuda_type(p.a.dtype), p.trans_a ? m : k, p.trans_a ? k : m, p.a.ld));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->lt_c, cuda_type(p.c.dtype), n, m, p.c.ld));
  if (p.batch > 1) {
    set_batch(plan->lt_a, p.batch, p.b.batch_stride);
    set_batch(plan->lt_b, p.batch, p.a.batch_stride);
    set_batch(plan->lt_c, p.batch, p.c.batch_stride);
  }
  PreferenceGuard guard;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&guard.pref));
  const uint64_t max_workspace = ctx.workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(guard.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &max_workspace, sizeof max_workspace));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(guard.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b,
                                                    sizeof align_b));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(guard.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a,
                                                    sizeof align_a));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(guard.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                    sizeof align_c));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(guard.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                    sizeof align_c));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status =
      integer || !ctx.fallback_only
          ? cublasLtMatmulAlgoGetHeuristic(ctx.handle, plan->desc, plan->lt_a, plan->lt_b, plan->lt_c, plan->lt_c,
                                           guard.pref, 1, &result, &returned)
          : CUBLAS_STATUS_NOT_SUPPORTED;
  const bool found = status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  // Only "no algorithm for this problem" falls back; any other failure (a bad value, a library
  // not initialised) is an error below.
  const bool declined =
      status == CUBLAS_STATUS_NOT_SUPPORTED ||
      (status == CUBLAS_STATUS_SUCCESS && (returned == 0 || result.state == CUBLAS_STATUS_NOT_SUPPORTED));
  const auto no_algorithm = [&] {
    return fmt::format("{}: cuBLASLt has no algorithm for {} (alignments a {} b {} c {} bytes", op, describe_problem(p),
                       align_a, align_b, align_c);
  };
  if (!found && declined && !integer) {
    // NOTE: the int8 path packs its operands into aligned buffers first (run_s8_tn below), so only
    // a float problem, whose operands are the caller's views, can land here.
    plan->fallback = true;
    if (!ctx.fallback_only && ctx.note_fallback)
      ctx.note_fallback(no_algorithm() + "); it runs on the slower fallback kernel");
    return plan;
  }
  ECHO_CHECK(found, "{}; {})", no_algorithm(),
             cublasLtGetStatusName(status != CUBLAS_STATUS_SUCCESS ? status : result.state));
  plan->algo = result.algo;
  plan->workspace_bytes = result.workspaceSize;
  return plan;
}

void run_fallback(const Problem& p, float alpha, float beta, cudaStream_t stream) {
  const int64_t tiles =
      p.batch * ((p.m + kFallbackTile - 1) / kFallbackTile) * ((p.n + kFallbackTile - 1) / kFallbackTile);
  const dim3 block(kFallbackTile, kFallbackTile);
  const unsigned grid = static_cast<unsigned>(std::clamp<int64_t>(tiles, 1, kGridCap));
  const int64_t sa = p.batch > 1 ? p.a.batch_stride : 0, sb = p.batch > 1 ? p.b.batch_stride : 0,
                sc = p.batch > 1 ? p.c.batch_stride : 0;
  const auto launch = [&](auto in_tag, auto out_tag) {
    using TIn = decltype(in_tag);
    using TOut = decltype(out_tag);
    ECHO_LAUNCH(grid, block, 0, stream, fallback_gemm_kernel<TIn, TOut>)
    (p.trans_a, p.trans_b, p.m, p.n, p.k, p.batch, alpha, static_cast<const TIn*>(p.a.data), p.a.ld, sa,
     static_cast<const TIn*>(p.b.data), p.b.ld, sb, beta, static_cast<TOut*>(const_cast<void*>(p.c.data)), p.c.ld, sc);
  };
  if (p.a.dtype == DType::f32)
    launch(float{}, float{});
  else if (p.c.dtype == DType::f32)
    launch(__nv_bfloat16{}, float{});
  else
    launch(__nv_bfloat16{}, __nv_bfloat16{});
  CUDA_CHECK(cudaGetLastError());
}

// One cuBLASLt call (or the fallback kernel's) for a validated problem with m, n, k > 0 and
// batch >= 1.
void run_matmul(GemmContext::Impl& ctx, const char* op, const Problem& p, double alpha, double beta,
                cudaStream_t stream) {
  const uint32_t align_a = operand_alignment(p.a, p.batch);
  const uint32_t align_b = operand_alignment(p.b, p.batch);
  const uint32_t align_c = operand_alignment(p.c, p.batch);
  const bool batched = p.batch > 1;
  const PlanKey key{
      p.trans_a,
      p.trans_b,
      p.m,
      p.n,
      p.k,
      p.batch,
      static_cast<int64_t>(p.a.dtype) | static_cast<int64_t>(p.b.dtype) << 8 | static_cast<int64_t>(p.c.dtype) << 16,
      p.a.ld,
      p.b.ld,
      p.c.ld,
      batched ? p.a.batch_stride : 0,
      batched ? p.b.batch_stride : 0,
      batched ? p.c.batch_stride : 0,
      align_a,
      align_b,
      align_c};
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end()) it = ctx.plans.emplace(key, make_plan(ctx, op, p, align_a, align_b, align_c)).first;
  const Plan& plan = *it->second;
  void* c = const_cast<void*>(p.c.data);
  if (plan.fallback) {
    run_fallback(p, static_cast<float>(alpha), static_cast<float>(beta), stream);
    return;
  }
  if (p.a.dtype == DType::i8) {
    const int32_t alpha_i = static_cast<int32_t>(alpha), beta_i = static_cast<int32_t>(beta);
    CUBLAS_CHECK(cublasLtMatmul(ctx.handle, plan.desc, &alpha_i, p.b.data, plan.lt_a, p.a.data, plan.lt_b, &beta_i, c,
                                plan.lt_c, c, plan.lt_c, &plan.algo, ctx.workspace, ctx.workspace_bytes, stream));
  } else {
    const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
    CUBLAS_CHECK(cublasLtMatmul(ctx.handle, plan.desc, &alpha_f, p.b.data, plan.lt_a, p.a.data, plan.lt_b, &beta_f, c,
                                plan.lt_c, c, plan.lt_c, &plan.algo, ctx.workspace, ctx.workspace_bytes, stream));
  }
}

// Checks what every floating-point entry point shares, then runs the product (or C = beta * C
// when k == 0, which cuBLASLt does not take).
void checked_matmul(GemmContext& ctx, const char* op, const Problem& p, double alpha, double beta,
                    cudaStream_t stream) {
  ECHO_CHECK(p.m >= 0 && p.n >= 0 && p.k >= 0 && p.batch >= 0, "{}: negative dimension ({})", op, describe_problem(p));
  ECHO_CHECK(p.batch <= INT32_MAX, "{}: batch {} over INT32_MAX", op, p.batch);
  const int64_t a_cols = p.trans_a ? p.m : p.k;
  const int64_t b_cols = p.trans_b ? p.k : p.n;
  ECHO_CHECK(p.a.ld >= std::max<int64_t>(1, a_cols) && p.b.ld >= std::max<int64_t>(1, b_cols) &&
                 p.c.ld >= std::max<int64_t>(1, p.n),
             "{}: a leading dimension is below its matrix's columns ({})", op, describe_problem(p));
  ECHO_CHECK(p.a.batch_stride >= 0 && p.b.batch_stride >= 0 && p.c.batch_stride >= 0, "{}: negative batch stride ({})",
             op, describe_problem(p));
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  ECHO_CHECK(p.c.data != nullptr && (p.k == 0 || (p.a.data != nullptr && p.b.data != nullptr)), "{}: null buffer ({})",
             op, describe_problem(p));
  if (p.k == 0) {
    const unsigned grid = grid_for(p.batch * p.m * p.n, kThreads);
    const float beta_f = static_cast<float>(beta);
    if (p.c.dtype == DType::f32) {
      ECHO_LAUNCH(grid, kThreads, 0, stream, scale_matrix_kernel<float>)
      (static_cast<float*>(const_cast<void*>(p.c.data)), p.m, p.n, p.c.ld, p.batch, p.c.batch_stride, beta_f);
    } else {
      ECHO_LAUNCH(grid, kThreads, 0, stream, scale_matrix_kernel<__nv_bfloat16>)
      (static_cast<__nv_bfloat16*>(const_cast<void*>(p.c.data)), p.m, p.n, p.c.ld, p.batch, p.c.batch_stride, beta_f);
    }
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  run_matmul(ctx.impl(), op, p, alpha, beta, stream);
}

bool float_dtypes_ok(DType a, DType b, DType c, bool allow_f32_out) {
  if (a == DType::f32) return b == DType::f32 && c == DType::f32;
  if (a == DType::bf16) return b == DType::bf16 && (c == DType::bf16 || (allow_f32_out && c == DType::f32));
  return false;
}

// A 2-D cuda view with unit column stride; ld is its row stride.
struct View2D {
  const void* data;
  int64_t rows, cols, ld;
};

View2D view_2d(const char* op, const char* name, const Tensor& t) {
  ECHO_CHECK(t.defined(), "{}: {} is an undefined tensor", op, name);
  ECHO_CHECK(t.is_cuda(), "{}: {} must be on the cuda device, got {}", op, name, t.describe());
  ECHO_CHECK(t.ndim() == 2, "{}: {} must be a 2-D view, got {}", op, name, t.describe());
  const int64_t rows = t.dim(0), cols = t.dim(1);
  ECHO_CHECK(cols <= 1 || t.stride(1) == 1, "{}: {} needs column stride 1, got {} with strides ({}, {})", op, name,
             t.describe(), t.stride(0), t.stride(1));
  // NOTE: the row stride of a single row or of an empty matrix addresses nothing (a contiguous
  // (r, 0) tensor has row stride 0); cuBLASLt still wants one >= the width.
  const int64_t ld = rows <= 1 || cols == 0 ? std::max<int64_t>(1, cols) : t.stride(0);
  ECHO_CHECK(ld >= std::max<int64_t>(1, cols), "{}: {} has row stride {} below its {} columns ({})", op, name, ld, cols,
             t.describe());
  return {t.raw(), rows, cols, ld};
}

// m, n, k of op(a) op(b) -> c, checked against c; names every tensor on a mismatch.
struct Dims {
  int64_t m, n, k;
};

Dims product_dims(const char* op, bool trans_a, bool trans_b, const View2D& a, const View2D& b, const View2D& c,
                  const Tensor& ta, const Tensor& tb, const Tensor& tc) {
  const int64_t m = trans_a ? a.cols : a.rows;
  const int64_t k = trans_a ? a.rows : a.cols;
  const int64_t kb = trans_b ? b.cols : b.rows;
  const int64_t n = trans_b ? b.rows : b.cols;
  ECHO_CHECK(kb == k && c.rows == m && c.cols == n,
             "{}: shapes do not match: op(a) is ({}, {}) (trans_a {}), op(b) is ({}, {}) (trans_b {}), c must be ({}, "
             "{}); a {}, b {}, c {}",
             op, m, k, trans_a, kb, n, trans_b, m, n, ta.describe(), tb.describe(), tc.describe());
  return {m, n, k};
}

bool aligned4(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; }

// Row-major C (m, n) = A (m, k) · B (n, k)^T in int8 -> int32, cuBLASLt's TN layout. Needs the
// shape of s8_padded (m, n, k multiples of 16, m >= 32), lda, ldb, ldc multiples of 4 and 4-byte
// aligned pointers. k runs in chunks of kInt8ChunkK: the
// first writes C, each later one writes `partial` ((m, n) packed, beta = 0) and a kernel adds it
// into C, so the int32 results need no beta = 1 from the IMMA epilogue. partial may be null when
// k <= kInt8ChunkK.
void run_s8_tn(GemmContext::Impl& ctx, int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
               int64_t ldb, int32_t* c, int64_t ldc, int32_t* partial, cudaStream_t stream) {
  for (int64_t k0 = 0; k0 < k; k0 += kInt8ChunkK) {
    const int64_t kc = std::min(kInt8ChunkK, k - k0);
    const bool first = k0 == 0;
    ECHO_CHECK(first || partial != nullptr, "gemm_s8s32: k {} needs a partial-sum buffer", k);
    const Problem p{false,
                    true,
                    m,
                    n,
                    kc,
                    1,
                    MatrixRef{a + k0, DType::i8, lda, 0},
                    MatrixRef{b + k0, DType::i8, ldb, 0},
                    MatrixRef{first ? c : partial, DType::i32, first ? ldc : n, 0}};
    run_matmul(ctx, "gemm_s8s32", p, 1.0, 0.0, stream);
    if (!first) {
      ECHO_LAUNCH(grid_for(m * n, kThreads), kThreads, 0, stream, add_i32_kernel)(partial, n, c, ldc, m, n);
      CUDA_CHECK(cudaGetLastError());
    }
  }
}

void launch_pack_s8(const void* src, int64_t ld, bool transposed, int64_t rows, int64_t cols, int8_t* dst,
                    int64_t dst_rows, int64_t dst_cols, cudaStream_t stream) {
  const int64_t tiles = ((dst_rows + kTile - 1) / kTile) * ((dst_cols + kTile - 1) / kTile);
  const dim3 block(kTile, kTileRowsPerPass);
  ECHO_LAUNCH(grid_for(tiles, 1), block, 0, stream, pack_s8_kernel)
  (static_cast<const int8_t*>(src), ld, transposed, rows, cols, dst, dst_rows, dst_cols);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void gemm(GemmContext& ctx, bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
          Tensor& c, cudaStream_t stream) {
  const char* op = "gemm";
  const View2D va = view_2d(op, "a", a), vb = view_2d(op, "b", b), vc = view_2d(op, "c", c);
  ECHO_CHECK(float_dtypes_ok(a.dtype(), b.dtype(), c.dtype(), false),
             "gemm: needs a, b, c all f32 or all bf16; got a {}, b {}, c {}", a.describe(), b.describe(), c.describe());
  const Dims d = product_dims(op, trans_a, trans_b, va, vb, vc, a, b, c);
  const Problem p{trans_a,
                  trans_b,
                  d.m,
                  d.n,
                  d.k,
                  1,
                  MatrixRef{va.data, a.dtype(), va.ld, 0},
                  MatrixRef{vb.data, b.dtype(), vb.ld, 0},
                  MatrixRef{vc.data, c.dtype(), vc.ld, 0}};
  checked_matmul(ctx, op, p, alpha, beta, stream);
}

void gemm_strided_batched(GemmContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t batch,
                          double alpha, const MatrixRef& a, const MatrixRef& b, double beta, const MatrixRef& c,
                          cudaStream_t stream) {
  const Problem p{trans_a, trans_b, m, n, k, batch, a, b, c};
  ECHO_CHECK(float_dtypes_ok(a.dtype, b.dtype, c.dtype, true),
             "gemm_strided_batched: needs (a, b, c) dtypes (f32, f32, f32), (bf16, bf16, bf16) or (bf16, bf16, f32); "
             "got ({}, {}, {})",
             a.dtype, b.dtype, c.dtype);
  checked_matmul(ctx, "gemm_strided_batched", p, alpha, beta, stream);
}

void gemm_batched(GemmContext& ctx, bool trans_a, bool trans_b, int64_t batch, double alpha, const Tensor& a,
                  int64_t stride_a, const Tensor& b, int64_t stride_b, double beta, Tensor& c, int64_t stride_c,
                  cudaStream_t stream) {
  const char* op = "gemm_batched";
  const View2D va = view_2d(op, "a", a), vb = view_2d(op, "b", b), vc = view_2d(op, "c", c);
  ECHO_CHECK(float_dtypes_ok(a.dtype(), b.dtype(), c.dtype(), true),
             "gemm_batched: needs a, b, c all f32, all bf16, or bf16 a, b with an f32 c; got a {}, b {}, c {}",
             a.describe(), b.describe(), c.describe());
  const Dims d = product_dims(op, trans_a, trans_b, va, vb, vc, a, b, c);
  const Problem p{trans_a,
                  trans_b,
                  d.m,
                  d.n,
                  d.k,
                  batch,
                  MatrixRef{va.data, a.dtype(), va.ld, stride_a},
                  MatrixRef{vb.data, b.dtype(), vb.ld, stride_b},
                  MatrixRef{vc.data, c.dtype(), vc.ld, stride_c}};
  checked_matmul(ctx, op, p, alpha, beta, stream);
}

namespace {
// The int8 product's shape as cuBLASLt gets it. The documented IMMA rules ask only for multiples
// of 4, but cuBLASLt has refused (CUBLAS_STATUS_NOT_SUPPORTED) odd and small shapes the rules
// allow: PyTorch's _int_mm (cuBLASLt int8 underneath) demands more than 16 rows and multiples of
// 8, and pads small row counts to 32 (pytorch/pytorch#106840). So every dimension goes to a
// multiple of 16 and the rows to at least 32; zero rows and columns add nothing, so C's (m, n)
// corner is exact. Shapes that already are so (training's: tokens x hidden) run on the caller's
// memory.
struct S8Shape {
  int64_t m, n, k;
};

S8Shape s8_padded(int64_t m, int64_t n, int64_t k) {
  return {round_up(std::max<int64_t>(m, 32), 16), round_up(n, 16), round_up(k, 16)};
}

// gemm_s8s32's scratch: packed op(A) (mp, kp) and op(B)^T (np, kp) and C's (mp, np) buffer
// unless it runs direct, and the later k chunks' partial product.
struct S8Scratch {
  size_t a = 0, b = 0, c = 0, partial = 0;
  size_t total() const { return a + b + c + partial; }
};

S8Scratch s8s32_scratch(int64_t m, int64_t n, int64_t k, bool direct) {
  const S8Shape p = direct ? S8Shape{m, n, k} : s8_padded(m, n, k);
  S8Scratch s;
  s.a = direct ? 0 : static_cast<size_t>(round_up(p.m * p.k, 256));
  s.b = direct ? 0 : static_cast<size_t>(round_up(p.n * p.k, 256));
  s.c = direct ? 0 : static_cast<size_t>(round_up(p.m * p.n * 4, 256));
  s.partial = p.k > kInt8ChunkK ? static_cast<size_t>(round_up(p.m * p.n * 4, 256)) : 0;
  return s;
}
}  // namespace

size_t gemm_s8s32_scratch_bytes(int64_t m, int64_t n, int64_t k) {
  return m > 0 && n > 0 && k > 0 ? s8s32_scratch(m, n, k, false).total() : 0;
}

size_t gemm_scratch_held_bytes(size_t largest_request) { return largest_request + largest_request / 2; }

void gemm_s8s32(GemmContext& ctx, bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, Tensor& c,
                cudaStream_t stream) {
  const char* op = "gemm_s8s32";
  const View2D va = view_2d(op, "a", a), vb = view_2d(op, "b", b), vc = view_2d(op, "c", c);
  ECHO_CHECK(a.dtype() == DType::i8 && b.dtype() == DType::i8 && c.dtype() == DType::i32,
             "gemm_s8s32: needs i8 a, b and an i32 c; got a {}, b {}, c {}", a.describe(), b.describe(), c.describe());
  const Dims d = product_dims(op, trans_a, trans_b, va, vb, vc, a, b, c);
  const int64_t m = d.m, n = d.n, k = d.k;
  if (m == 0 || n == 0) return;
  GemmContext::Impl& impl = ctx.impl();
  int32_t* c_ptr = static_cast<int32_t*>(const_cast<void*>(vc.data));
  if (k == 0) {
    ECHO_LAUNCH(grid_for(m * n, kThreads), kThreads, 0, stream, zero_i32_kernel)(c_ptr, m, n, vc.ld);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  const S8Shape p = s8_padded(m, n, k);
  const bool direct = !trans_a && trans_b && p.m == m && p.n == n && p.k == k && va.ld % 4 == 0 && vb.ld % 4 == 0 &&
                      vc.ld % 4 == 0 && aligned4(va.data) && aligned4(vb.data) && aligned4(vc.data);
  // Otherwise pack op(A) as (mp, kp) and op(B)^T as (np, kp), k-contiguous and zero padded, and
  // take C's corner out of an (mp, np) buffer. Every scratch buffer is taken in one request:
  // growing the scratch would free the earlier ones.
  const S8Scratch bytes = s8s32_scratch(m, n, k, direct);
  const size_t total = bytes.total();
  char* scratch = total > 0 ? static_cast<char*>(impl.get_scratch(total, stream)) : nullptr;
  int32_t* partial = bytes.partial > 0 ? reinterpret_cast<int32_t*>(scratch + bytes.a + bytes.b + bytes.c) : nullptr;
  if (direct) {
    run_s8_tn(impl, m, n, k, static_cast<const int8_t*>(va.data), va.ld, static_cast<const int8_t*>(vb.data), vb.ld,
              c_ptr, vc.ld, partial, stream);
    return;
  }
  int8_t* a_packed = reinterpret_cast<int8_t*>(scratch);
  int8_t* b_packed = reinterpret_cast<int8_t*>(scratch + bytes.a);
  int32_t* c_out = reinterpret_cast<int32_t*>(scratch + bytes.a + bytes.b);
  // op(A)(r, c) is A[c * lda + r] when trans_a; op(B)^T(j, kk) = op(B)(kk, j) is B[kk * ldb + j]
  // unless trans_b.
  launch_pack_s8(va.data, va.ld, trans_a, m, k, a_packed, p.m, p.k, stream);
  launch_pack_s8(vb.data, vb.ld, !trans_b, n, k, b_packed, p.n, p.k, stream);
  run_s8_tn(impl, p.m, p.n, p.k, a_packed, p.k, b_packed, p.k, c_out, p.n, partial, stream);
  ECHO_LAUNCH(grid_for(m * n, kThreads), kThreads, 0, stream, copy_i32_kernel)(c_out, p.n, c_ptr, vc.ld, m, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
