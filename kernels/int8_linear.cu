// CUDA INT8 S3R-EC linear layer (kernels/int8_linear.cuh): the steps of the CPU reference
// src/backend/cpu/int8_linear.cpp (int8_quantize.cpp, error_correction.cpp) as kernels around
// cuda::gemm_s8s32, with the element math of quant/s3r_math.h and core/hd.h shared with the CPU
// so scales, codes and the fp32 epilogues are bit-identical. Host-side: checks, the TP reductions
// through ctx.tp (host doubles), and the order of the launches on the caller's stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <span>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "device_util.cuh"
#include "int8_linear.cuh"
#include "launch.cuh"
#include "pool_tensor.cuh"
#include "quant/s3r_math.h"

namespace echo::cuda {

namespace {

using namespace detail;
using config::EcMode;
using config::LinearMode;
using quant::ThresholdSharing;

// No row is bad: the flags hold the smallest bad row index (atomicMin, so the report is the same
// whatever the block order) and start here.
constexpr unsigned long long kNoBadRow = ~0ull;

// Finite test on the bits (no dependence on which isfinite overload nvcc picks).
__device__ __forceinline__ bool finite(float v) { return (float_bits(v) & 0x7f800000u) != 0x7f800000u; }

// ---- Forward: scales, RTNE codes, rescaling ------------------------------------------------------

// Where a kernel notes its smallest non-finite row: a per-call flag read back at once (the bare
// row), or the DeferredFaults word (key | row, the row clamped to the key's 30 bits).
struct FaultSink {
  unsigned long long* word = nullptr;
  unsigned long long key = 0;
  bool deferred = false;
  __device__ void note(int64_t row) const {
    const auto r = static_cast<unsigned long long>(row);
    atomicMin(word, deferred ? key | (r < DeferredFaults::kRowMask ? r : DeferredFaults::kRowMask) : r);
  }
};

// amax[r] = max |x[r, :]| (a max is exact in any order); the smallest row holding a NaN or an
// infinity goes to `bad`. One block per row (grid-stride over rows).
template <class T>
__global__ void row_absmax_kernel(const T* x, int64_t rows, int64_t cols, float* amax, FaultSink bad) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    float m = 0.0f;
    bool nonfinite = false;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = load(xr + c);
      nonfinite |= !finite(v);
      const float a = fabsf(v);
      m = a > m ? a : m;
    }
    m = block_reduce(m, Max{}, 0.0f);
    if (nonfinite) bad.note(r);
    if (threadIdx.x == 0) amax[r] = m;
  }
}

// q[r, :] = quantize_rtne(x[r, :], int8_inv_scale(amax[r])), scale[r] = int8_scale(amax[r])
// (quant::quantize_rows_rtne).
template <class T>
__global__ void quantize_rows_kernel(const T* x, int64_t rows, int64_t cols, const float* amax, int8_t* q,
                                     float* scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float a = amax[r];
    const float inv = quant::int8_inv_scale(a);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      q[r * cols + c] = quant::quantize_rtne(load(x + r * cols + c), inv);
    if (threadIdx.x == 0) scale[r] = quant::int8_scale(a);
  }
}

// y[t, h] = (float(acc[t, h]) * s_x[t]) * s_w[h], each product rounded once, as the CPU.
template <class T>
__global__ void forward_epilogue_kernel(const int32_t* acc, int64_t rows, int64_t out, const float* s_x,
                                        const float* s_w, T* y) {
  const int64_t n = rows * out, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t t = i / out, h = i - t * out;
    store(y + i, mul_rn(mul_rn(static_cast<float>(acc[i]), s_x[t]), s_w[h]));
  }
}

// ---- Backward: G', Δ and the codes Q ---------------------------------------------------------------

// G'[t, h] = (g[t, h] * s_x[t]) * s_w[h] (quant::scale_gradient's element), recomputed wherever
// it is needed instead of being stored: the same two roundings give the same bits every time.
template <class T>
__device__ __forceinline__ float scaled_gradient(const T* dy, int64_t i, float sx, float sw) {
  return mul_rn(mul_rn(load(dy + i), sx), sw);
}

// row_amax[t] = max_h |G'[t, h]|; the smallest row with a non-finite G' goes to `bad`.
template <class T>
__global__ void gradient_amax_kernel(const T* dy, int64_t rows, int64_t out, const float* s_x, const float* s_w,
                                     float* row_amax, FaultSink bad) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float sx = s_x[t];
    float m = 0.0f;
    bool nonfinite = false;
    for (int64_t h = threadIdx.x; h < out; h += blockDim.x) {
      const float g = scaled_gradient(dy, t * out + h, sx, s_w[h]);
      nonfinite |= !finite(g);
      const float a = fabsf(g);
      m = a > m ? a : m;
    }
    m = block_reduce(m, Max{}, 0.0f);
    if (nonfinite) bad.note(t);
    if (threadIdx.x == 0) row_amax[t] = m;
  }
}

// *result = max(0, v[0..n)) in one block.
__global__ void max_kernel(const float* v, int64_t n, float* result) {
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = v[i] > m ? v[i] : m;
  m = block_reduce(m, Max{}, 0.0f);
  if (threadIdx.x == 0) *result = m;
}

// Δ = int8_scale(max |G'|) for the kernels after the max: a launch argument when the host has
// read the max back (TP, traces), else read on the device from where max_kernel wrote it, so the
// backward does not wait for the stream.
struct GradientScale {
  float g_amax = 0.0f;                 // the host's max |G'|, when it has read it back
  const float* device_amax = nullptr;  // else where max_kernel wrote it
  __device__ float amax() const { return device_amax != nullptr ? *device_amax : g_amax; }
  __device__ float value() const { return quant::int8_scale(amax()); }
  __device__ float inverse() const { return quant::int8_inv_scale(amax()); }
};

// What quantize_gradient_kernel needs of quant::GradientRounding, plus Δ.
struct RoundingArgs {
  bool stochastic = false;
  quant::ThresholdStream stream;
  int64_t token_offset = 0, channel_offset = 0, seq_len = 1;
  GradientScale scale;
};

// q = codes of G' by the rule (quant::quantize_gradient), e = Δ·q − G' when e is not null. One
// block per row; each thread takes whole groups of 16 GLOBAL channels, so an independent-sharing
// thread makes the one Philox call its 16 thresholds come from (a shard may start mid-group).
template <class T>
__global__ void quantize_gradient_kernel(const T* dy, int64_t rows, int64_t out, const float* s_x, const float* s_w,
                                         RoundingArgs a, int8_t* q, float* e) {
  const float inv = a.scale.inverse(), delta = a.scale.value();
  const int64_t ch0 = a.channel_offset;
  const int64_t first_group = ch0 >> 4, groups = ((ch0 + out - 1) >> 4) - first_group + 1;
  const bool independent = a.stochastic && a.stream.sharing == ThresholdSharing::independent;
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float sx = s_x[t];
    const uint64_t token = static_cast<uint64_t>(a.token_offset + t);
    uint32_t row_code = 0;  // the whole row's code (per_token, per_example)
    if (a.stochastic && a.stream.sharing == ThresholdSharing::per_token)
      row_code = quant::threshold_code_per_token(a.stream, token);
    else if (a.stochastic && a.stream.sharing == ThresholdSharing::per_example)
      row_code = quant::threshold_code_per_example(a.stream, token / static_cast<uint64_t>(a.seq_len));
    for (int64_t gi = threadIdx.x; gi < groups; gi += blockDim.x) {
      const int64_t group = first_group + gi;
      const int64_t lo = group * 16 - ch0, hi = group * 16 + 16 - ch0;
      const int64_t h_begin = lo > 0 ? lo : 0, h_end = hi < out ? hi : out;
      PhiloxOutput call{};
      if (independent) call = quant::independent_call(a.stream, token, static_cast<uint64_t>(group));
      for (int64_t h = h_begin; h < h_end; ++h) {
        const int64_t i = t * out + h;
        const float g = scaled_gradient(dy, i, sx, s_w[h]);
        int8_t code;
        if (!a.stochastic) {
          code = quant::quantize_rtne(g, inv);
        } else {
          const uint32_t k =
              independent ? quant::threshold_code_of_call(call, static_cast<uint64_t>(ch0 + h)) : row_code;
          code = quant::round_stochastic(mul_rn(g, inv), quant::threshold_from_code(k));
        }
        q[i] = code;
        if (e != nullptr) e[i] = sub_rn(mul_rn(delta, static_cast<float>(code)), g);
      }
    }
  }
}

// ---- S3R-EC: the structured error's means (quant::structured_error, same double order) -------------

// sums[t] = Σ_h e[t, h] as the CPU adds it: eight partial sums, lane j over h = j, j + 8, ...,
// the tail (cols % 8 elements) into lane 0, combined ((0+1)+(2+3))+((4+5)+(6+7)) — which the
// width-8 xor butterfly below is. Eight threads per row.
__global__ void ec_row_sums_kernel(const float* e, int64_t rows, int64_t cols, double* sums) {
  const int lane = static_cast<int>(threadIdx.x) & 7;
  const int64_t rows_per_block = blockDim.x / 8;
  const int64_t full = cols / 8 * 8;
  // NOTE: the loop bound is uniform over the block, so every lane reaches the shuffles.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * rows_per_block; base < rows;
       base += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const int64_t t = base + threadIdx.x / 8;
    double acc = 0.0;
    if (t < rows) {
      const float* et = e + t * cols;
      for (int64_t h = 0; h < full; h += 8) acc += static_cast<double>(et[h + lane]);
      if (lane == 0)
        for (int64_t h = full; h < cols; ++h) acc += static_cast<double>(et[h]);
    }
    acc += __shfl_xor_sync(kFullMask, acc, 1, 8);
    acc += __shfl_xor_sync(kFullMask, acc, 2, 8);
    acc += __shfl_xor_sync(kFullMask, acc, 4, 8);
    if (t < rows && lane == 0) sums[t] = acc;
  }
}

// col_mean[b, h] = (Σ_{s < seq} e[b·seq + s, h], in token order from 0.0) / seq.
__global__ void ec_col_means_kernel(const float* e, int64_t num_b, int64_t seq, int64_t cols, double* col_mean) {
  const int64_t n = num_b * cols, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t b = i / cols, h = i - b * cols;
    double acc = 0.0;
    for (int64_t s = 0; s < seq; ++s) acc += static_cast<double>(e[(b * seq + s) * cols + h]);
    col_mean[i] = acc / static_cast<double>(seq);
  }
}

// row_mean[t] = sums[t] / global_cols; grand_mean[b] = (Σ_s row_mean[b·seq + s]) / seq.
__global__ void ec_means_kernel(const double* sums, int64_t num_b, int64_t seq, double global_cols, double* row_mean,
                                double* grand_mean) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < num_b; b += stride) {
    double m = 0.0;
    for (int64_t s = 0; s < seq; ++s) {
      const double r = sums[b * seq + s] / global_cols;
      row_mean[b * seq + s] = r;
      m += r;
    }
    grand_mean[b] = m / static_cast<double>(seq);
  }
}

// ---- S3R-EC: the correction factors (the CPU's fp32 GEMM operands, accumulated in double) ----------

// r (num_b + 1, in): row b < num_b = float(Σ_h float(c_b[h])·Ŵ[h, :]) (the channel terms), row
// num_b = Σ_h Ŵ[h, :] (the column sums, exact). correct_dx's R.
__global__ void ec_dx_factor_kernel(const double* col_mean, const int8_t* w_q, int64_t num_b, int64_t out, int64_t in,
                                    float* r) {
  const int64_t n = (num_b + 1) * in, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t p = i / in, c = i - p * in;
    double acc = 0.0;
    if (p < num_b) {
      for (int64_t h = 0; h < out; ++h)
        acc += static_cast<double>(static_cast<float>(col_mean[p * out + h])) * static_cast<double>(w_q[h * in + c]);
    } else {
      for (int64_t h = 0; h < out; ++h) acc += static_cast<double>(w_q[h * in + c]);
    }
    r[i] = static_cast<float>(acc);
  }
}

// Per example b: n[b, :] = Σ_{t in b} X̂[t, :] (exact) and upart[b, :] = Σ_{t in b} float(r_t − m_b)·X̂[t, :]
// (correct_dw's N, rows b < num_b, and the per-example parts of its row num_b).
__global__ void ec_dw_partials_kernel(const int8_t* x_q, const double* row_mean, const double* grand_mean,
                                      int64_t num_b, int64_t seq, int64_t in, float* n, double* upart) {
  const int64_t total = num_b * in, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t b = i / in, c = i - b * in;
    int32_t xs = 0;
    double u = 0.0;
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t t = b * seq + s;
      const int32_t xq = x_q[t * in + c];
      xs += xq;
      u += static_cast<double>(static_cast<float>(row_mean[t] - grand_mean[b])) * static_cast<double>(xq);
    }
    n[i] = static_cast<float>(xs);
    upart[i] = u;
  }
}

// n[num_b, :] = float(Σ_b upart[b, :]) in example order (correct_dw's u).
__global__ void ec_dw_token_row_kernel(const double* upart, int64_t num_b, int64_t in, float* n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < in; c += stride) {
    double u = 0.0;
    for (int64_t b = 0; b < num_b; ++b) u += upart[b * in + c];
    n[num_b * in + c] = static_cast<float>(u);
  }
}

// ---- Backward epilogues ---------------------------------------------------------------------------

// EC inputs of the dx epilogue; r == nullptr: no correction.
struct EcDx {
  const double* row_mean = nullptr;
  const double* grand_mean = nullptr;
  const float* r = nullptr;  // (num_b + 1, in)
  int64_t num_b = 0, seq = 1;
};

// dx[t, i] (+)= (Δ · float(acc[t, i])) / s_x[t] in the CPU's fp32 operations; with EC, then
// + L[t, b]·R[b, i] + L[t, B]·R[B, i] with L[t, b] = float(−1/s_x[t]) and
// L[t, B] = float(−(r_t − m_b)/s_x[t]) (correct_dx's L), added in double and rounded once.
template <class T>
__global__ void dx_epilogue_kernel(const int32_t* acc, int64_t rows, int64_t in, const float* s_x, GradientScale scale,
                                   bool accumulate, EcDx ec, T* dx) {
  const float delta = scale.value();
  const int64_t n = rows * in, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    const int64_t t = k / in, i = k - t * in;
    const float sx = s_x[t];
    const float v = div_rn(mul_rn(delta, static_cast<float>(acc[k])), sx);
    float result = accumulate ? add_rn(load(dx + k), v) : v;
    if (ec.r != nullptr) {
      const int64_t b = t / ec.seq;
      const double inv_sx = 1.0 / static_cast<double>(sx);
      const float l_channel = static_cast<float>(-inv_sx);
      const float l_token = static_cast<float>(-(ec.row_mean[t] - ec.grand_mean[b]) * inv_sx);
      const double corr = static_cast<double>(l_channel) * static_cast<double>(ec.r[b * in + i]) +
                          static_cast<double>(l_token) * static_cast<double>(ec.r[ec.num_b * in + i]);
      result = static_cast<float>(static_cast<double>(result) + corr);
    }
    store(dx + k, result);
  }
}

// EC inputs of the dw epilogue; n == nullptr: no correction.
struct EcDw {
  const double* col_mean = nullptr;  // (num_b, out)
  const float* n = nullptr;          // (num_b + 1, in)
  int64_t num_b = 0;
};

// dw[h, i] += (Δ · float(acc[h, i])) / s_w[h] in the CPU's fp32 operations; with EC, then
// + Σ_b M[h, b]·N[b, i] + M[h, B]·N[B, i] with M[h, b] = float(−c_b[h]/s_w[h]) and
// M[h, B] = float(−1/s_w[h]) (correct_dw's M), added in double and rounded once.
__global__ void dw_epilogue_kernel(const int32_t* acc, int64_t out, int64_t in, const float* s_w, GradientScale scale,
                                   EcDw ec, float* dw) {
  const float delta = scale.value();
  const int64_t n = out * in, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    const int64_t h = k / in, i = k - h * in;
    const float sw = s_w[h];
    float result = add_rn(dw[k], div_rn(mul_rn(delta, static_cast<float>(acc[k])), sw));
    if (ec.n != nullptr) {
      const double inv_sw = 1.0 / static_cast<double>(sw);
      double corr = 0.0;
      for (int64_t b = 0; b < ec.num_b; ++b)
        corr += static_cast<double>(static_cast<float>(-ec.col_mean[b * out + h] * inv_sw)) *
                static_cast<double>(ec.n[b * in + i]);
      corr += static_cast<double>(static_cast<float>(-inv_sw)) * static_cast<double>(ec.n[ec.num_b * in + i]);
      result = static_cast<float>(static_cast<double>(result) + corr);
    }
    dw[k] = result;
  }
}

// ---- Host side ------------------------------------------------------------------------------------

unsigned row_blocks(int64_t rows) { return blocks_for(rows, 1); }

void check_launch() { CUDA_CHECK(cudaGetLastError()); }

// The checks of the CPU reference (int8_linear.cpp check_common / check_examples).
void check_common(const quant::LinearContext& ctx, int64_t rows, int64_t in, int64_t out) {
  ECHO_CHECK(rows >= 0 && in >= 1 && out >= 1, "linear: bad shape rows={} in={} out={}", rows, in, out);
  ECHO_CHECK(ctx.site < 256 && ctx.layer < (1u << 24), "linear: site {} must be < 256 and layer {} < 2^24", ctx.site,
             ctx.layer);
  ECHO_CHECK(ctx.token_offset >= 0 && ctx.channel_offset >= 0, "linear: offsets must be >= 0, got token {} channel {}",
             ctx.token_offset, ctx.channel_offset);
  ECHO_CHECK(ctx.tp_style == quant::TpStyle::none || ctx.tp != nullptr,
             "linear: a column/row-parallel call needs a reducer");
}

void check_examples(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx, int64_t rows) {
  const bool needs_examples =
      cfg.ec != EcMode::none || (cfg.stochastic() && cfg.sharing() == ThresholdSharing::per_example);
  if (needs_examples)
    ECHO_CHECK(ctx.seq_len >= 1 && rows % ctx.seq_len == 0 && ctx.token_offset % ctx.seq_len == 0,
               "linear: EC and per_example thresholds need whole examples: {} rows at token offset {} with seq_len {}",
               rows, ctx.token_offset, ctx.seq_len);
}

template <class T>
void copy_to_host(T* dst, const T* src, int64_t n, cudaStream_t stream) {
  if (n > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(T), cudaMemcpyDeviceToHost, stream));
}

template <class T>
void copy_to_device(T* dst, const T* src, int64_t n, cudaStream_t stream) {
  if (n > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(T), cudaMemcpyHostToDevice, stream));
}

void wait(cudaStream_t stream) { CUDA_CHECK(cudaStreamSynchronize(stream)); }

// Max-reduces n device floats over TP, as the CPU's max_over_tp: on the stream by the device
// reducer when there is one, else through the reducer's host doubles (exact: floats round-trip).
// Called with n == 0 too: it is a collective.
void max_over_tp(const backend::TpReducer& tp, float* values, int64_t n, cudaStream_t stream) {
  if (tp.device) return tp.device(values, n, DType::f32, backend::ReduceOp::max, stream);
  std::vector<float> host(static_cast<size_t>(n));
  copy_to_host(host.data(), values, n, stream);
  wait(stream);
  std::vector<double> d(host.begin(), host.end());
  tp.max(std::span<double>(d));
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(d[i]);
  copy_to_device(values, host.data(), n, stream);
  wait(stream);  // NOTE: the host buffer goes out of scope here
}

// A contiguous cuda tensor of exactly this shape and dtype in `t`: kept when it already is one and
// nothing else shares its storage (the previous step's saved codes), else a new one from the pool
// on `stream`: the memory plan counts these operands in the start-up reservation, which only pool
// allocations can use, and the model drops them after each layer's backward (a cudaFree there
// waited for the whole device, 7 per layer).
void ensure_tensor(Tensor& t, std::vector<int64_t> shape, DType dtype, cudaStream_t stream) {
  if (t.defined() && t.is_cuda() && t.dtype() == dtype && t.shape() == shape && t.is_contiguous() &&
      t.storage_offset() == 0 && t.storage_use_count() == 1)
    return;
  t = pool_tensor(std::move(shape), dtype, stream);
}

// A 2-D i8 / i32 Tensor view of scratch memory, for gemm_s8s32.
Tensor matrix_view(void* data, int64_t rows, int64_t cols, DType dtype) {
  return Tensor::from_blob(rows * cols > 0 ? data : nullptr, {rows, cols}, dtype, Device::cuda);
}

size_t bytes_of(int64_t n, size_t element) { return static_cast<size_t>(n > 0 ? n : 0) * element; }

}  // namespace

void int8_linear_forward(GemmContext& gemm, const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx,
                         const Tensor& x, const Tensor& w, Tensor& y, quant::Int8LinearSaved& saved,
                         cudaStream_t stream, DeferredFaults* faults) {
  const char* op = "int8_linear_forward";
  ECHO_CHECK(cfg.mode == LinearMode::int8, "cuda::{}: 'linear.mode' is bf16 (that linear is Backend::gemm)", op);
  check_tensor(op, "w", w, {DType::f32, DType::bf16});
  ECHO_CHECK(w.ndim() == 2, "cuda::{}: w must be (out, in), got {}", op, w.describe());
  const int64_t out = w.dim(0), in = w.dim(1);
  check_tensor(op, "x", x, {DType::f32, DType::bf16});
  ECHO_CHECK(in >= 1 && x.numel() % in == 0, "cuda::{}: x {} is not rows of w's {} input features", op, x.describe(),
             in);
  const int64_t rows = x.numel() / in;
  check_tensor(op, "y", y, {DType::f32, DType::bf16});
  check_numel(op, "y", y, rows * out);
  check_common(ctx, rows, in, out);

  saved.rows = rows, saved.in = in, saved.out = out;
  ensure_tensor(saved.x_q, {rows, in}, DType::i8, stream);
  ensure_tensor(saved.s_x, {rows}, DType::f32, stream);
  ensure_tensor(saved.w_q, {out, in}, DType::i8, stream);
  ensure_tensor(saved.s_w, {out}, DType::f32, stream);

  // Row maxima and the NaN/Inf flags ({x, w}): into the deferred record when there is one (no
  // wait), else into a per-call pair read back here.
  Scratch amax_x(bytes_of(rows, sizeof(float)), stream), amax_w(bytes_of(out, sizeof(float)), stream);
  Scratch flags(faults != nullptr ? 0 : 2 * sizeof(unsigned long long), stream);
  FaultSink bad_x, bad_w;
  if (faults != nullptr) {
    bad_x = {faults->slot(), DeferredFaults::key(ctx.layer, ctx.site, FaultOperand::x), true};
    bad_w = {faults->slot(), DeferredFaults::key(ctx.layer, ctx.site, FaultOperand::w), true};
  } else {
    bad_x.word = flags.as<unsigned long long>();
    bad_w.word = bad_x.word + 1;
    CUDA_CHECK(cudaMemsetAsync(bad_x.word, 0xff, 2 * sizeof(unsigned long long), stream));
  }
  if (rows > 0)
    dispatch_activation(x.dtype(), [&](auto type) {
      using T = typename decltype(type)::type;
      ECHO_LAUNCH(row_blocks(rows), kThreads, 0, stream, row_absmax_kernel<T>)
      (ptr<T>(x), rows, in, amax_x.as<float>(), bad_x);
    });
  dispatch_activation(w.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(row_blocks(out), kThreads, 0, stream, row_absmax_kernel<T>)
    (ptr<T>(w), out, in, amax_w.as<float>(), bad_w);
  });
  check_launch();
  if (faults == nullptr) {
    unsigned long long bad_host[2] = {kNoBadRow, kNoBadRow};
    copy_to_host(bad_host, bad_x.word, 2, stream);
    wait(stream);
    ECHO_RUN_CHECK(bad_host[0] == kNoBadRow, "int8 linear: row {} of an operand (x) holds a NaN or an infinity",
                   bad_host[0]);
    ECHO_RUN_CHECK(bad_host[1] == kNoBadRow, "int8 linear: row {} of an operand (w) holds a NaN or an infinity",
                   bad_host[1]);
  }
  if (ctx.tp_style == quant::TpStyle::row) {  // X's and W's columns are sharded: the whole row's max
    max_over_tp(*ctx.tp, amax_x.as<float>(), rows, stream);
    max_over_tp(*ctx.tp, amax_w.as<float>(), out, stream);
  }

  auto* x_q = ptr<int8_t>(saved.x_q);
  auto* w_q = ptr<int8_t>(saved.w_q);
  if (rows > 0)
    dispatch_activation(x.dtype(), [&](auto type) {
      using T = typename decltype(type)::type;
      ECHO_LAUNCH(row_blocks(rows), kThreads, 0, stream, quantize_rows_kernel<T>)
      (ptr<T>(x), rows, in, amax_x.as<float>(), x_q, ptr<float>(saved.s_x));
    });
  dispatch_activation(w.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(row_blocks(out), kThreads, 0, stream, quantize_rows_kernel<T>)
    (ptr<T>(w), out, in, amax_w.as<float>(), w_q, ptr<float>(saved.s_w));
  });
  check_launch();
  if (rows == 0) return;

  Scratch acc(bytes_of(rows * out, sizeof(int32_t)), stream);
  Tensor acc_t = matrix_view(acc.as<void>(), rows, out, DType::i32);
  gemm_s8s32(gemm, false, true, saved.x_q.view({rows, in}), saved.w_q.view({out, in}), acc_t, stream);
  dispatch_activation(y.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(blocks_for(rows * out, kThreads), kThreads, 0, stream, forward_epilogue_kernel<T>)
    (acc.as<int32_t>(), rows, out, ptr<float>(saved.s_x), ptr<float>(saved.s_w), ptr<T>(y));
  });
  check_launch();
}

void int8_linear_backward(GemmContext& gemm, const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx,
                          const Tensor& dy, const quant::Int8LinearSaved& saved, Tensor* dx, bool accumulate_dx,
                          Tensor* dw_accum, cudaStream_t stream, Int8LinearTrace* trace, DeferredFaults* faults) {
  const char* op = "int8_linear_backward";
  ECHO_CHECK(cfg.mode == LinearMode::int8, "cuda::{}: 'linear.mode' is bf16 (that linear is Backend::gemm)", op);
  const int64_t rows = saved.rows, in = saved.in, out = saved.out;
  check_common(ctx, rows, in, out);
  check_examples(cfg, ctx, rows);
  check_tensor(op, "saved.x_q", saved.x_q, {DType::i8});
  check_numel(op, "saved.x_q", saved.x_q, rows * in);
  check_tensor(op, "saved.s_x", saved.s_x, {DType::f32});
  check_numel(op, "saved.s_x", saved.s_x, rows);
  check_tensor(op, "saved.w_q", saved.w_q, {DType::i8});
  check_numel(op, "saved.w_q", saved.w_q, out * in);
  check_tensor(op, "saved.s_w", saved.s_w, {DType::f32});
  check_numel(op, "saved.s_w", saved.s_w, out);
  check_tensor(op, "dy", dy, {DType::f32, DType::bf16});
  check_numel(op, "dy", dy, rows * out);
  if (dx != nullptr) {
    check_tensor(op, "dx", *dx, {DType::f32, DType::bf16});
    check_numel(op, "dx", *dx, rows * in);
  }
  if (dw_accum != nullptr) {
    check_tensor(op, "dw_accum", *dw_accum, {DType::f32});
    check_numel(op, "dw_accum", *dw_accum, out * in);
  }
  const float* s_x = ptr<float>(saved.s_x);
  const float* s_w = ptr<float>(saved.s_w);

  // max |G'| and the NaN/Inf flag, read back once (Δ is a launch argument from here on).
  Scratch row_amax(bytes_of(rows, sizeof(float)), stream), flag(sizeof(unsigned long long), stream);
  Scratch g_amax_dev(sizeof(float), stream);
  // Without a trace, and with the TP max (column style) on the device reducer when there is one, Δ
  // stays on the device and a fault goes to the deferred record: nothing here waits for the stream.
  const bool tp_max = ctx.tp_style == quant::TpStyle::column;
  const bool on_device = faults != nullptr && trace == nullptr && (!tp_max || ctx.tp->device);
  FaultSink bad;
  if (on_device) {
    bad = {faults->slot(), DeferredFaults::key(ctx.layer, ctx.site, FaultOperand::gradient), true};
  } else {
    bad.word = flag.as<unsigned long long>();
    CUDA_CHECK(cudaMemsetAsync(bad.word, 0xff, sizeof(unsigned long long), stream));
  }
  if (rows > 0)
    dispatch_activation(dy.dtype(), [&](auto type) {
      using T = typename decltype(type)::type;
      ECHO_LAUNCH(row_blocks(rows), kThreads, 0, stream, gradient_amax_kernel<T>)
      (ptr<T>(dy), rows, out, s_x, s_w, row_amax.as<float>(), bad);
    });
  ECHO_LAUNCH(1, kThreads, 0, stream, max_kernel)(row_amax.as<float>(), rows, g_amax_dev.as<float>());
  check_launch();
  GradientScale scale;
  float g_amax = 0.0f;
  if (on_device) {
    // NOTE: a non-finite G' row is in the record of the rank that holds it; an infinity then makes Δ
    // infinite on every rank, which only matters until that rank raises the fault at the step's end.
    if (tp_max) ctx.tp->device(g_amax_dev.as<float>(), 1, DType::f32, backend::ReduceOp::max, stream);
    scale.device_amax = g_amax_dev.as<float>();
  } else {
    unsigned long long bad_host = kNoBadRow;
    copy_to_host(&g_amax, g_amax_dev.as<float>(), 1, stream);
    copy_to_host(&bad_host, bad.word, 1, stream);
    wait(stream);
    // A fault noted earlier (say a NaN weight shard in the forward) is the cause of this one: it
    // goes first.
    if (faults != nullptr) faults->raise_if_any(stream);
    ECHO_RUN_CHECK(bad_host == kNoBadRow,
                   "int8 linear backward: the output gradient holds a NaN or an infinity (row {} of G' = s_x·dy·s_w)",
                   bad_host);
    if (tp_max) {  // the channels are sharded: Δ of the whole layer
      double d = g_amax;
      ctx.tp->max(std::span<double>(&d, 1));
      g_amax = static_cast<float>(d);
    }
    ECHO_CHECK(g_amax >= 0.0f && g_amax <= 3.40282347e38f, "int8 linear backward: max |G'| = {} is not a finite amax",
               g_amax);
    scale.g_amax = g_amax;
    if (trace != nullptr) *trace = Int8LinearTrace{g_amax, quant::int8_scale(g_amax), {}, {}, {}, {}, {}};
  }
  if (rows == 0) return;  // no gradient rows: dx is empty and dW's product is zero

  // Q and E = ΔQ − G', once for both products.
  const bool ec = cfg.ec != EcMode::none;
  const bool want_e = ec || trace != nullptr;
  Scratch q(bytes_of(rows * out, 1), stream), e(want_e ? bytes_of(rows * out, sizeof(float)) : 0, stream);
  RoundingArgs rule;
  rule.stochastic = cfg.stochastic();
  rule.stream = quant::ThresholdStream{philox_key(cfg.seed), ctx.step, quant::layer_site_word(ctx.layer, ctx.site),
                                       cfg.sharing()};
  rule.token_offset = ctx.token_offset;
  rule.channel_offset = ctx.channel_offset;
  rule.seq_len = ctx.seq_len >= 1 ? ctx.seq_len : 1;
  rule.scale = scale;
  dispatch_activation(dy.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(row_blocks(rows), kThreads, 0, stream, quantize_gradient_kernel<T>)
    (ptr<T>(dy), rows, out, s_x, s_w, rule, q.as<int8_t>(), want_e ? e.as<float>() : nullptr);
  });
  check_launch();

  // S3R-EC: the means, then the factors of the corrections (applied in the epilogues).
  const int64_t seq = ec ? ctx.seq_len : 1, num_b = ec ? rows / seq : 0;
  const bool ec_dx = ec && dx != nullptr, ec_dw = cfg.ec == EcMode::two_way && dw_accum != nullptr;
  Scratch sums(ec ? bytes_of(rows, sizeof(double)) : 0, stream);
  Scratch row_mean(ec ? bytes_of(rows, sizeof(double)) : 0, stream);
  Scratch col_mean(ec ? bytes_of(num_b * out, sizeof(double)) : 0, stream);
  Scratch grand_mean(ec ? bytes_of(num_b, sizeof(double)) : 0, stream);
  Scratch r_factor(ec_dx ? bytes_of((num_b + 1) * in, sizeof(float)) : 0, stream);
  Scratch n_factor(ec_dw ? bytes_of((num_b + 1) * in, sizeof(float)) : 0, stream);
  Scratch upart(ec_dw ? bytes_of(num_b * in, sizeof(double)) : 0, stream);
  if (ec) {
    const int64_t rows_per_block = kThreads / 8;
    ECHO_LAUNCH(blocks_for(rows, rows_per_block), kThreads, 0, stream, ec_row_sums_kernel)
    (e.as<float>(), rows, out, sums.as<double>());
    ECHO_LAUNCH(blocks_for(num_b * out, kThreads), kThreads, 0, stream, ec_col_means_kernel)
    (e.as<float>(), num_b, seq, out, col_mean.as<double>());
    check_launch();
    double global_cols = static_cast<double>(out);
    if (ctx.tp_style == quant::TpStyle::column && ctx.tp->device) {
      // The row sums on the stream; the channel count (a shape, no data) on the host: no wait.
      ctx.tp->device(sums.as<double>(), rows, DType::f64, backend::ReduceOp::sum, stream);
      ctx.tp->sum(std::span<double>(&global_cols, 1));
    } else if (ctx.tp_style == quant::TpStyle::column) {
      // The row sums and the channel count, summed together over TP as the CPU does.
      std::vector<double> host(static_cast<size_t>(rows) + 1);
      copy_to_host(host.data(), sums.as<double>(), rows, stream);
      wait(stream);
      host[rows] = global_cols;
      ctx.tp->sum(std::span<double>(host));
      global_cols = host[rows];
      copy_to_device(sums.as<double>(), host.data(), rows, stream);
      wait(stream);  // NOTE: the host buffer goes out of scope here
    }
    ECHO_CHECK(global_cols > 0, "error correction needs at least one channel");
    ECHO_LAUNCH(blocks_for(num_b, kThreads), kThreads, 0, stream, ec_means_kernel)
    (sums.as<double>(), num_b, seq, global_cols, row_mean.as<double>(), grand_mean.as<double>());
    if (ec_dx) {
      ECHO_LAUNCH(blocks_for((num_b + 1) * in, kThreads), kThreads, 0, stream, ec_dx_factor_kernel)
      (col_mean.as<double>(), ptr<int8_t>(saved.w_q), num_b, out, in, r_factor.as<float>());
    }
    if (ec_dw) {
      ECHO_LAUNCH(blocks_for(num_b * in, kThreads), kThreads, 0, stream, ec_dw_partials_kernel)
      (ptr<int8_t>(saved.x_q), row_mean.as<double>(), grand_mean.as<double>(), num_b, seq, in, n_factor.as<float>(),
       upart.as<double>());
      ECHO_LAUNCH(blocks_for(in, kThreads), kThreads, 0, stream, ec_dw_token_row_kernel)
      (upart.as<double>(), num_b, in, n_factor.as<float>());
    }
    check_launch();
  }

  // The int8 products (exact) and their epilogues; one int32 buffer serves both in turn.
  const int64_t acc_elems = std::max(dx != nullptr ? rows * in : 0, dw_accum != nullptr ? out * in : 0);
  Scratch acc(bytes_of(acc_elems, sizeof(int32_t)), stream);
  const Tensor q_t = matrix_view(q.as<void>(), rows, out, DType::i8);
  if (dx != nullptr) {  // dX = diag(s_x)^-1 · (Δ · Q·Ŵ)
    Tensor acc_t = matrix_view(acc.as<void>(), rows, in, DType::i32);
    gemm_s8s32(gemm, false, false, q_t, saved.w_q.view({out, in}), acc_t, stream);
    EcDx ecx;
    if (ec_dx) ecx = EcDx{row_mean.as<double>(), grand_mean.as<double>(), r_factor.as<float>(), num_b, seq};
    dispatch_activation(dx->dtype(), [&](auto type) {
      using T = typename decltype(type)::type;
      ECHO_LAUNCH(blocks_for(rows * in, kThreads), kThreads, 0, stream, dx_epilogue_kernel<T>)
      (acc.as<int32_t>(), rows, in, s_x, scale, accumulate_dx, ecx, ptr<T>(*dx));
    });
    check_launch();
  }
  if (dw_accum != nullptr) {  // dW = diag(s_w)^-1 · (Δ · Q^T·X̂)
    Tensor acc_t = matrix_view(acc.as<void>(), out, in, DType::i32);
    gemm_s8s32(gemm, true, false, q_t, saved.x_q.view({rows, in}), acc_t, stream);
    EcDw ecw;
    if (ec_dw) ecw = EcDw{col_mean.as<double>(), n_factor.as<float>(), num_b};
    ECHO_LAUNCH(blocks_for(out * in, kThreads), kThreads, 0, stream, dw_epilogue_kernel)
    (acc.as<int32_t>(), out, in, s_w, scale, ecw, ptr<float>(*dw_accum));
    check_launch();
  }

  if (trace != nullptr) {
    trace->q.resize(static_cast<size_t>(rows * out));
    copy_to_host(trace->q.data(), q.as<int8_t>(), rows * out, stream);
    trace->e.resize(static_cast<size_t>(rows * out));
    copy_to_host(trace->e.data(), e.as<float>(), rows * out, stream);
    if (ec) {
      trace->row_mean.resize(static_cast<size_t>(rows));
      trace->col_mean.resize(static_cast<size_t>(num_b * out));
      trace->grand_mean.resize(static_cast<size_t>(num_b));
      copy_to_host(trace->row_mean.data(), row_mean.as<double>(), rows, stream);
      copy_to_host(trace->col_mean.data(), col_mean.as<double>(), num_b * out, stream);
      copy_to_host(trace->grand_mean.data(), grand_mean.as<double>(), num_b, stream);
    }
    wait(stream);
  }
}

quant::Int8LinearScratch int8_linear_scratch_bytes(const quant::Int8LinearConfig& cfg, int64_t rows, int64_t in,
                                                   int64_t out, int64_t seq_len) {
  if (cfg.mode != LinearMode::int8) return {};
  // Each Scratch is one pool allocation; 256 bytes covers its rounding.
  const auto block = [](size_t bytes) { return bytes == 0 ? size_t{0} : (bytes + 255) / 256 * 256; };
  const size_t forward =
      block(bytes_of(rows, 4)) + block(bytes_of(out, 4)) + block(16) + block(bytes_of(rows * out, 4));
  const bool ec = cfg.ec != EcMode::none, ec_dw = cfg.ec == EcMode::two_way;
  const int64_t seq = ec ? std::max<int64_t>(seq_len, 1) : 1, num_b = ec ? rows / seq : 0;
  size_t backward = block(bytes_of(rows, 4)) + block(8) + block(4) + block(bytes_of(rows * out, 1)) +
                    block(ec ? bytes_of(rows * out, 4) : 0) + block(bytes_of(std::max(rows * in, out * in), 4));
  if (ec)
    backward += 2 * block(bytes_of(rows, 8)) + block(bytes_of(num_b * out, 8)) + block(bytes_of(num_b, 8)) +
                block(bytes_of((num_b + 1) * in, 4));
  if (ec_dw) backward += block(bytes_of((num_b + 1) * in, 4)) + block(bytes_of(num_b * in, 8));
  const size_t gemm = std::max({gemm_s8s32_scratch_bytes(rows, out, in), gemm_s8s32_scratch_bytes(rows, in, out),
                                gemm_s8s32_scratch_bytes(out, in, rows)});
  return {std::max(forward, backward), gemm_scratch_held_bytes(gemm)};
}

}  // namespace echo::cuda
