// CUDA GEMMs on cuBLASLt: the matrix products of the CUDA backend (Backend::gemm), the strided
// batched products attention is built from, and the exact int8 x int8 -> int32 product of the INT8
// linear layers (the CUDA twin of quant::gemm_s8s32). Plain C++ (no CUDA syntax), so host code and
// tests include it directly.
//
// Conventions (those of cpu::gemm_strided and Backend::gemm): row-major matrices; op(A) is (m, k):
// A is (m, k), or (k, m) when trans_a; op(B) is (k, n): B is (k, n), or (n, k) when trans_b;
// C (m, n) = alpha * op(A) * op(B) + beta * C. Each operand's row stride is its leading dimension,
// its column stride must be 1. beta == 0 overwrites C without reading it (NaN in C is not
// propagated); k == 0 gives C = beta * C. cuBLASLt is column-major, so every call computes the
// column-major C^T = op(B)^T op(A)^T on the same memory.
//
// Numerics: f32 runs CUBLAS_COMPUTE_32F (true fp32 FMA, no TF32); bf16 inputs accumulate in fp32
// (CUBLAS_COMPUTE_32F, f32 alpha / beta) and are rounded once to the output dtype. int8 runs
// CUBLAS_COMPUTE_32I and is exact.
//
// Streams: a GemmContext (its cuBLASLt workspace and int8 scratch) serves one stream at a time;
// a backend owns one context for its one stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace echo::cuda {

// Owns the cuBLASLt handle, its workspace, the int8 packing scratch and a cache of matmul plans
// (descriptors, layouts and the heuristic's algorithm) keyed by shape, dtypes, transposes, leading
// dimensions, batch strides and pointer alignments: the heuristic runs once per key. Made on the
// current CUDA device, used on it; one per backend, not copyable.
class GemmContext {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  explicit GemmContext(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  // Number of cached plans (each one distinct key seen so far); for tests.
  size_t plan_count() const;
  // How many of them run on the fallback kernel (gemm.cu) because cuBLASLt offered no algorithm.
  size_t fallback_plan_count() const;
  // For tests: every float product from now on plans onto the fallback kernel, so it is checked
  // against the CPU even where cuBLASLt never declines.
  void use_fallback_only(bool on);
  // Called once per new plan that cuBLASLt declined (not for use_fallback_only's), with the
  // problem in words: the backend logs it, since the fallback kernel is far slower.
  void on_fallback(std::function<void(const std::string& problem)> note);

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// c = alpha * op(a) * op(b) + beta * c (see the conventions above). a, b, c: 2-D cuda views,
// column stride 1 (any row stride >= columns, so a sub-matrix such as one head of a
// (tokens, heads, head_dim) tensor works). Dtypes: all f32, or all bf16 (fp32 accumulation).
// A bad dtype, device or shape is an echo::Error naming "gemm" and each tensor.
void gemm(GemmContext& ctx, bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
          Tensor& c, cudaStream_t stream);

// One matrix of a strided batch in raw form, for operands a Tensor view cannot express (one head
// of a (batch, seq, heads, d) tensor with its heads interleaved). `data` points at element (0, 0)
// of batch entry 0; entry i starts batch_stride elements after entry i - 1 (0 broadcasts one
// matrix); rows are `ld` elements apart. The C operand's data is written.
struct MatrixRef {
  const void* data = nullptr;
  DType dtype = DType::f32;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// For i in [0, batch): C_i = alpha * op(A_i) * op(B_i) + beta * C_i, one cuBLASLt strided-batched
// call, same conventions as gemm with explicit m, n, k. Batch entries may interleave (a stride
// smaller than a matrix, as with heads) but the C_i must not overlap one another. Dtypes (a, b, c):
// (f32, f32, f32), (bf16, bf16, bf16) or (bf16, bf16, f32) (fp32 accumulation, output kept in f32:
// attention's scores and its dK / dV accumulators). Pointers are trusted: bounds are the caller's.
void gemm_strided_batched(GemmContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t batch,
                          double alpha, const MatrixRef& a, const MatrixRef& b, double beta, const MatrixRef& c,
                          cudaStream_t stream);

// The same on Tensors: a, b, c are the 2-D views of batch entry 0 (shapes and dtypes checked as in
// gemm, plus the (bf16, bf16, f32) mix), stride_* are in elements.
void gemm_batched(GemmContext& ctx, bool trans_a, bool trans_b, int64_t batch, double alpha, const Tensor& a,
                  int64_t stride_a, const Tensor& b, int64_t stride_b, double beta, Tensor& c, int64_t stride_c,
                  cudaStream_t stream);

// Exact C (m, n) = op(A) · op(B): a, b i8, c i32 (2-D cuda views, column stride 1), C
// overwritten; the semantics of quant::gemm_s8s32, but any k: k is split into chunks of
// kInt8ChunkK (a multiple of 16 <= quant::kInt8GemmMaxK, so no chunk's int32 accumulation can
// overflow); each later chunk's product goes to an int32 scratch and a kernel adds it into C with
// two's-complement wrap-around, so C is exact whenever the true result fits in int32 (always for
// k <= kInt8GemmMaxK).
//
// Layout contract. cuBLASLt's int8 (IMMA) kernels take only the column-major "TN" layout with m,
// k and every leading dimension a multiple of 4 and 4-byte aligned pointers, and in practice have
// refused odd and small shapes those rules allow (PyTorch's _int_mm asks for more than 16 rows and
// multiples of 8). In row-major terms TN is trans_a == false, trans_b == true: C = A · B^T with
// A (m, k) and B (n, k) both k-contiguous (the forward X̂ · Ŵ^T). That call with m, n, k multiples
// of 16, m >= 32, lda, ldb, ldc multiples of 4 and 4-byte aligned data runs straight on the
// caller's memory. Every other call is served too, by packing: op(A) into an (mp, kp) and op(B)^T
// into an (np, kp) k-contiguous int8 copy (mp, np, kp rounded up to 16, mp at least 32; zero
// padded: zeros add nothing) in the context's scratch, and C's (m, n) corner copied out of an
// (mp, np) int32 scratch. The scratch grows to the largest call (mp*kp + np*kp + 4*mp*np bytes,
// plus 4*mp*np when kp > kInt8ChunkK); callers that want no copies write transposed int8 copies in
// the TN layout with such shapes.
constexpr int64_t kInt8ChunkK = 131056;
void gemm_s8s32(GemmContext& ctx, bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, Tensor& c,
                cudaStream_t stream);
// The most scratch gemm_s8s32 asks of the context for an (m, n, k) product (every copy made), and
// what the context may then hold: it grows by half again at least, so up to 1.5 times the largest
// request (model/memory_plan.h counts that).
size_t gemm_s8s32_scratch_bytes(int64_t m, int64_t n, int64_t k);
size_t gemm_scratch_held_bytes(size_t largest_request);

}  // namespace echo::cuda
