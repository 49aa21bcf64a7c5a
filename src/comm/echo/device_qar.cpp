// Echo's per-site flow on a CUDA device (device_qar.h): the compensator kernels of
// kernels/compensator.cu around the two-phase quantized all-reduce, whose encode and decode run
// on the device (kernels/quantize.cu) while NCCL moves the packed bytes between distinct GPUs, or
// MPI moves host copies of them (ranks sharing a GPU, or a build without NCCL).
// Built only with the CUDA backend. NOTE: never run on a GPU when written; the CUDA test
// echo_device_qar_cuda_mpi_test (tests/comm/echo_device_qar_gpu_mpi.cpp) checks it bitwise against the CPU
// EchoAllReduce.
#include "comm/echo/device_qar.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "comm/echo/quantize.h"
#include "comm/echo/rescale.h"
#include "comm/exact_all_reduce.h"
#include "comm/p2p/cuda_ipc_reduce.h"
#include "comm/two_phase_layout.h"
#include "compensator.cuh"
#include "core/error.h"
#include "core/log.h"
#include "cuda_check.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"
#include "pool_tensor.cuh"
#include "quantize.cuh"
#ifdef ECHO_NCCL
#include "comm/nccl_all_reduce.h"  // ranks_have_distinct_gpus
#include "comm/nccl_group.h"
#endif

namespace echo::comm {

class NcclGroup;  // comm/nccl_group.h, in builds with NCCL

namespace {

// The legacy default stream: it orders with the CUDA backend's blocking stream and with the
// synchronous copies of Tensor, so values produced there are ready here and vice versa.
const cudaStream_t kStream = cudaStreamLegacy;

// The two byte exchanges over NCCL, on kStream (no host wait); only called with a group, which
// exists only in builds with NCCL.
void nccl_all_to_all(NcclGroup& group, const uint8_t* send, const ByteExchange& send_layout, uint8_t* recv,
                     const ByteExchange& recv_layout) {
#ifdef ECHO_NCCL
  group.all_to_all_bytes(send, send_layout, recv, recv_layout, kStream);
#else
  (void)group, (void)send, (void)send_layout, (void)recv, (void)recv_layout;
  ECHO_FAIL("this build has no NCCL");
#endif
}

// The max of one u32 over the group, as an i32 max: exact for the bits of non-negative floats
// (below 2^31, +inf included), whatever NCCL's float max does with NaN or denormals.
void nccl_max_bits(NcclGroup& group, uint32_t* bits) {
#ifdef ECHO_NCCL
  group.all_reduce(bits, 1, DType::i32, backend::ReduceOp::max, kStream);
#else
  (void)group, (void)bits;
  ECHO_FAIL("this build has no NCCL");
#endif
}

void nccl_all_gather(NcclGroup& group, const uint8_t* own, uint8_t* recv, const ByteExchange& gather) {
#ifdef ECHO_NCCL
  group.all_gather_bytes(own, recv, gather, kStream);
#else
  (void)group, (void)own, (void)recv, (void)gather;
  ECHO_FAIL("this build has no NCCL");
#endif
}

// Device memory that grows to the largest call and is then reused: no allocation in steady state.
class DeviceBytes {
 public:
  uint8_t* get(size_t bytes) {
    if (capacity_ == 0 || bytes > capacity_) {
      capacity_ = std::max<size_t>(bytes, 1);
      // From the pool, which the start-up reservation fills (the memory plan's all-reduce state,
      // comm/echo/device_state_bytes.h, counts these buffers).
      buffer_ = cuda::pool_tensor({static_cast<int64_t>(capacity_)}, DType::u8, kStream);
    }
    return static_cast<uint8_t*>(buffer_.raw());
  }
  float* floats(size_t n) { return reinterpret_cast<float*>(get(n * sizeof(float))); }

 private:
  Tensor buffer_;
  size_t capacity_ = 0;
};

void to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, kStream));
  CUDA_CHECK(cudaStreamSynchronize(kStream));
}

// NOTE: from pageable host memory the call returns once the source has been staged, so the host
// buffer may be reused at once; the kernels that read dst follow on the same stream.
void to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, kStream));
}

// Small device-side counters, one allocation: the poisoned-group count of the decodes (the
// count the CPU engine returns), a scratch count for the encodes (the CPU discards it too), the
// bits of the local max |x'|, the rescale exponent and the deferred fault word (below).
struct Counters {
  cuda::DeviceQuantReport decoded;
  cuda::DeviceQuantReport encoded;
  uint32_t max_bits;
  int exponent;
  unsigned long long fault;
};

// A fault noted on the device when NCCL moves the bytes (nothing else waits for the stream): the
// smallest key wins, so forward before backward, then the earliest site, then the rescale before
// the poisoned output of the same site. raise_deferred_faults names it.
enum class FaultKind : unsigned long long { nonfinite_rescale = 0, poisoned_output = 1 };
constexpr unsigned long long kNoFault = ~0ull;

unsigned long long fault_key(Site site, FaultKind kind) {
  return (site.direction == Direction::backward ? 1ull << 40 : 0ull) |
         (static_cast<unsigned long long>(static_cast<uint32_t>(site.index)) << 8) |
         static_cast<unsigned long long>(kind);
}

// The fused site on the device (FusedEchoSite on CPU): load forms x' = compensate(x)·2^e of a
// tile into the pipeline's tile buffer; finish unscales the decoded tile, updates m1, m2 from x'
// recomputed from x and the not yet updated state, and writes the output into x. The pipeline
// finishes a tile only after every load of it (docs/design.md §7), so x still holds the input.
// A rescaling site's e is computed on the device in begin(), from the group max the pipeline has
// just reduced through its headers; a non-finite max is noted in the deferred fault word.
class FusedDeviceSite final : public p2p::DeviceTileHooks {
 public:
  FusedDeviceSite(void* x, bool bf16, float* m1, float* m2, const CompensatorCoeffs* coeffs, float num_ranks)
      : x_(x), bf16_(bf16), m1_(m1), m2_(m2), coeffs_(coeffs), num_ranks_(num_ranks) {}

  // Rescale by the e that begin() derives from *group_max_bits into *exponent.
  void rescale_on_device(const uint32_t* group_max_bits, int* exponent, unsigned long long fault_key,
                         unsigned long long* fault_word) {
    group_max_bits_ = group_max_bits;
    exponent_ = exponent;
    fault_key_ = fault_key;
    fault_word_ = fault_word;
  }

  void begin(cudaStream_t stream) override {
    if (group_max_bits_ != nullptr)
      cuda::echo_rescale_exponent(group_max_bits_, exponent_, fault_key_, fault_word_, stream);
  }
  void load(size_t begin, size_t n, float* out, cudaStream_t stream) override {
    cuda::echo_compensate(at(begin), bf16_, n, m1_ ? m1_ + begin : nullptr, m2_ ? m2_ + begin : nullptr, coeffs_,
                          out, nullptr, nullptr, stream);
    // The unfused path sends scale_pow2(x', e) for every e, 0 included: so does this.
    cuda::echo_scale_pow2(out, n, 0, out, stream, exponent_);
  }
  void finish(size_t begin, size_t n, const float* sum, cudaStream_t stream) override {
    cuda::echo_finish_recompute(sum, n, 0, at(begin), bf16_, num_ranks_, m1_ ? m1_ + begin : nullptr,
                                m2_ ? m2_ + begin : nullptr, coeffs_, stream, exponent_);
  }

 private:
  void* at(size_t begin) const {
    return static_cast<uint8_t*>(x_) + begin * (bf16_ ? sizeof(uint16_t) : sizeof(float));
  }
  void* x_;
  bool bf16_;
  float* m1_;
  float* m2_;
  const CompensatorCoeffs* coeffs_;
  float num_ranks_;
  // Rescaling only (else e = 0):
  const uint32_t* group_max_bits_ = nullptr;
  int* exponent_ = nullptr;  // device
  unsigned long long fault_key_ = 0;
  unsigned long long* fault_word_ = nullptr;
};

class CudaDeviceEcho final : public DeviceEcho {
 public:
  CudaDeviceEcho(const dist::Communicator& comm, const TransportOptions& transport)
      : comm_(comm), transport_(transport) {}

  void begin_pass(Direction direction) override { state(direction).sized = false; }
  void all_reduce(Tensor& x, Site site, const DeviceEchoCall& call) override;
  std::vector<float> m1(Direction direction) const override { return host_copy(state(direction), false); }
  std::vector<float> m2(Direction direction) const override { return host_copy(state(direction), true); }
  void raise_deferred_faults() override;
  const char* transport() const override {
    if (ipc_) return "cuda_ipc";
    if (!ipc_tried_) return "unset";
    return nccl_ != nullptr ? "nccl" : "mpi (host-staged)";
  }

 private:
  // Like Compensator: the buffers keep their last values after a reset, as m1()/m2() show.
  struct State {
    mutable DeviceBytes m1, m2;  // mutable: get() of an allocated buffer only returns its pointer
    size_t n = 0;
    bool sized = false;
    bool allocated = false;
  };
  State& state(Direction d) { return d == Direction::forward ? forward_ : backward_; }
  const State& state(Direction d) const { return d == Direction::forward ? forward_ : backward_; }
  static std::vector<float> host_copy(const State& st, bool second);
  Counters* counters() { return reinterpret_cast<Counters*>(counters_.get(sizeof(Counters))); }
  int group_rescale_exponent(Site site);
  // Whether this call's faults are noted on the device rather than checked now: the bytes go
  // by NCCL (the two-collective path between distinct GPUs), where nothing else waits.
  bool defers_faults(size_t n, const QuantSpec& spec);
  unsigned long long* fault_word();
  // The pipelined transport when it serves a call of n values with this spec, else null (qar then
  // takes the two-collective path).
  p2p::CudaIpcReduce* pipeline_for(size_t n, const QuantSpec& spec);
  size_t qar(float* y, size_t n, const QuantSpec& spec, Site site);
  size_t two_collective_qar(float* y, size_t n, const QuantSpec& spec, Site site);
  p2p::CudaIpcReduce* ipc();

  const dist::Communicator& comm_;
  TransportOptions transport_;
  std::unique_ptr<p2p::CudaIpcReduce> ipc_;
  bool ipc_tried_ = false;
  // NCCL for the two-collective path's byte exchanges when every rank has its own GPU (decided at
  // the first two-collective call, on every rank at once); null: host-staged MPI.
  NcclGroup* nccl();
  std::shared_ptr<NcclGroup> nccl_;  // shared_ptr: its deleter is bound where NcclGroup is complete
  bool nccl_tried_ = false;
  bool fault_armed_ = false;  // counters()->fault holds kNoFault or a noted fault
  State forward_, backward_;
  DeviceBytes x_comp_, work_, counters_;
  DeviceBytes send_, recv_, own_code_, gathered_;
  std::vector<uint8_t> host_send_, host_recv_, host_own_, host_gathered_;
};

std::vector<float> CudaDeviceEcho::host_copy(const State& st, bool second) {
  std::vector<float> out(st.allocated ? st.n : 0);
  if (!out.empty()) to_host(out.data(), (second ? st.m2 : st.m1).floats(st.n), out.size() * sizeof(float));
  return out;
}

int CudaDeviceEcho::group_rescale_exponent(Site site) {
  uint32_t bits = 0;
  to_host(&bits, &counters()->max_bits, sizeof bits);
  const float local = bits_float(bits);  // non-finite entries entered as +inf (compensator.cuh)
  float gmax = 0.0f;
  const dist::CollectiveScope watched("the device Echo's backward rescale max over MPI", comm_);
  MPI_CHECK(MPI_Allreduce(&local, &gmax, 1, MPI_FLOAT, MPI_MAX, comm_.get()));
  check_rescale_max(gmax, site);
  return rescale_exponent(gmax);
}

void CudaDeviceEcho::all_reduce(Tensor& x, Site site, const DeviceEchoCall& call) {
  ECHO_CHECK(x.is_cuda() && x.is_contiguous() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16),
             "the device Echo all-reduce at {} needs a contiguous f32 or bf16 cuda tensor, got {}", to_string(site),
             x.describe());
  const size_t n = static_cast<size_t>(x.numel());
  const bool bf16 = x.dtype() == DType::bf16;
  State& st = state(site.direction);
  const CompensatorCoeffs* coeffs = nullptr;
  float* m1 = nullptr;
  float* m2 = nullptr;
  if (call.compensate) {
    if (!st.sized) {  // as Compensator::apply: the pass's first site sizes the state, from zero
      st.n = n;
      m1 = st.m1.floats(n);
      m2 = st.m2.floats(n);
      CUDA_CHECK(cudaMemsetAsync(m1, 0, n * sizeof(float), kStream));
      CUDA_CHECK(cudaMemsetAsync(m2, 0, n * sizeof(float), kStream));
      st.sized = st.allocated = true;
    }
    ECHO_CHECK(n == st.n,
               "the compensator at {} got {} elements but this pass started with {}: every site of a pass must "
               "all-reduce tensors of one size",
               to_string(site), n, st.n);
    m1 = st.m1.floats(n);
    m2 = st.m2.floats(n);
    coeffs = &call.coeffs;
  }

  Counters* c = counters();
  p2p::CudaIpcReduce* pipelined = pipeline_for(n, call.spec);
  if (call.fuse && pipelined != nullptr) {
    FusedDeviceSite hooks(x.raw(), bf16, m1, m2, coeffs, static_cast<float>(comm_.size()));
    uint32_t* max_bits = nullptr;
    if (call.rescale) {  // a pass for max |x'| only: x' itself is formed tile by tile in the pipeline
      max_bits = &c->max_bits;
      CUDA_CHECK(cudaMemsetAsync(max_bits, 0, sizeof *max_bits, kStream));
      cuda::echo_compensate(x.raw(), bf16, n, m1, m2, coeffs, nullptr, nullptr, max_bits, kStream);
      hooks.rescale_on_device(max_bits, &c->exponent, fault_key(site, FaultKind::nonfinite_rescale), fault_word());
    }
    const size_t bad = pipelined->run_fused(n, call.spec, site, hooks, max_bits);
    // The call has ended on the host: a non-finite max is raised now, before the poisoned output
    // it causes, as the CPU raises it (there before the exchange, here after: the ranks learnt the
    // max on the device, and the compensator state of this pass is then not used again).
    if (call.rescale) raise_deferred_faults();
    // As the CPU's fused site: the compensator has taken the update in when a poisoned output throws.
    check_output(bad, site, "Echo quantized");
    return;
  }

  // x' = x + c in f32; y = x'·2^e is what QAR reduces. An f32 tensor is reduced in place, as the
  // CPU reduces its span; a bf16 one through an f32 work buffer.
  float* x_comp = x_comp_.floats(n);
  float* y = bf16 ? work_.floats(n) : x.data<float>();
  uint32_t* max_bits = call.rescale ? &c->max_bits : nullptr;
  if (max_bits != nullptr) CUDA_CHECK(cudaMemsetAsync(max_bits, 0, sizeof *max_bits, kStream));
  cuda::echo_compensate(x.raw(), bf16, n, m1, m2, coeffs, x_comp, call.rescale ? nullptr : y, max_bits, kStream);
  int exponent = 0;
  const int* exponent_on_device = nullptr;  // e stays on the device when the faults are deferred
  const bool deferred = defers_faults(n, call.spec);
  if (call.rescale) {
    if (deferred) {
      nccl_max_bits(*nccl(), &c->max_bits);  // bits of non-negative floats, +inf for a non-finite entry
      cuda::echo_rescale_exponent(&c->max_bits, &c->exponent, fault_key(site, FaultKind::nonfinite_rescale),
                                  fault_word(), kStream);
      exponent_on_device = &c->exponent;
    } else {
      exponent = group_rescale_exponent(site);
    }
    cuda::echo_scale_pow2(x_comp, n, exponent, y, kStream, exponent_on_device);
  }

  // As on the CPU, a poisoned output throws before the compensator takes the update in (deferred:
  // at the step's end, after it has; the step then stops, so the state is never used).
  check_output(qar(y, n, call.spec, site), site, "Echo quantized");
  cuda::echo_finish(y, n, exponent, x_comp, static_cast<float>(comm_.size()), m1, m2, coeffs, x.raw(), bf16, kStream,
                    exponent_on_device);
}

p2p::CudaIpcReduce* CudaDeviceEcho::ipc() {
  if (!ipc_tried_) {  // the first call, on every rank at once: for_group is collective
    ipc_tried_ = true;
    if (transport_.kind == TransportKind::cuda_ipc && transport_.pipelined && comm_.size() > 1) {
      std::string why;
      auto ws = p2p::CudaIpcWorkspace::for_group(comm_, transport_.geometry, &why);
      if (ws)
        ipc_ = std::make_unique<p2p::CudaIpcReduce>(comm_, std::move(ws), transport_.peer_timeout_s);
      else if (comm_.rank() == 0)
        ECHO_INFO("comm", "comm.transport = cuda_ipc is not possible for this group ({}); Echo's device sites are "
                  "host-staged over MPI", why);
    }
  }
  return ipc_.get();
}

p2p::CudaIpcReduce* CudaDeviceEcho::pipeline_for(size_t n, const QuantSpec& spec) {
  p2p::CudaIpcReduce* pipelined = ipc();
  return pipelined != nullptr && pipelined->pipelines(n, spec) ? pipelined : nullptr;
}

size_t CudaDeviceEcho::qar(float* y, size_t n, const QuantSpec& spec, Site site) {
  if (p2p::CudaIpcReduce* pipelined = pipeline_for(n, spec)) return pipelined->run(y, n, spec, site);
  return two_collective_qar(y, n, spec, site);
}

bool CudaDeviceEcho::defers_faults(size_t n, const QuantSpec& spec) {
  return pipeline_for(n, spec) == nullptr && nccl() != nullptr;
}

unsigned long long* CudaDeviceEcho::fault_word() {
  if (!fault_armed_) {
    CUDA_CHECK(cudaMemsetAsync(&counters()->fault, 0xff, sizeof(unsigned long long), kStream));
    fault_armed_ = true;
  }
  return &counters()->fault;
}

void CudaDeviceEcho::raise_deferred_faults() {
  if (!fault_armed_) return;
  unsigned long long word = kNoFault;
  to_host(&word, &counters()->fault, sizeof word);
  if (word == kNoFault) return;
  CUDA_CHECK(cudaMemsetAsync(&counters()->fault, 0xff, sizeof word, kStream));  // the next step starts clean
  const Site site{static_cast<int>((word >> 8) & 0xffffffffull),
                  (word >> 40) & 1 ? Direction::backward : Direction::forward};
  if (static_cast<FaultKind>(word & 0xff) == FaultKind::nonfinite_rescale)
    check_rescale_max(std::numeric_limits<float>::infinity(), site);
  ECHO_RUN_FAIL(
      "non-finite values in the Echo quantized all-reduce at {}: poisoned output groups (a rank's contribution "
      "holds NaN/Inf, or a group scale overflowed fp16)",
      to_string(site));
}

NcclGroup* CudaDeviceEcho::nccl() {
  if (!nccl_tried_) {
    nccl_tried_ = true;
#ifdef ECHO_NCCL
    // comm.transport: mpi asks for the host-staged baseline; otherwise NCCL wherever it can run.
    if (transport_.kind != TransportKind::mpi && comm_.size() > 1 && ranks_have_distinct_gpus(comm_))
      nccl_ = NcclGroup::for_group(comm_);
#endif
    if (comm_.rank() == 0)
      log::get("comm")->info("Echo on the device: the packed bytes move {}",
                             nccl_ ? "by NCCL between the GPUs" : "through host copies over MPI");
  }
  return nccl_.get();
}

// TwoPhaseReduce::run with the QuantCodec, step for step, on device values (see there). Over
// NCCL a poisoned output is noted for raise_deferred_faults and 0 returned; else the count.
size_t CudaDeviceEcho::two_collective_qar(float* y, size_t n, const QuantSpec& spec, Site site) {
  const int P = comm_.size();
  const int me = comm_.rank();
  const TwoPhaseLayout L = make_two_phase_layout(n, P, me, static_cast<size_t>(spec.group_size),
                                                 [&](size_t m) { return wire_bytes(m, spec); });
  const auto& segs = L.segments;
  const Segment mine = segs[me];
  Counters* c = counters();
  cuda::reset_report(&c->decoded, kStream);
  cuda::reset_report(&c->encoded, kStream);

  // Phase 1: encode every non-owned segment for its owner.
  const ByteExchange& send_layout = L.to_owners_send;
  const ByteExchange& recv_layout = L.to_owners_recv;
  uint8_t* send = send_.get(send_layout.buffer_bytes);
  uint8_t* recv = recv_.get(recv_layout.buffer_bytes);
  for (int j = 0; j < P; ++j)
    if (j != me && segs[j].size > 0)
      cuda::quantize(y + segs[j].begin, segs[j].size, spec, send + send_layout.displs[j], &c->encoded, kStream);
  NcclGroup* const nccl_group = nccl();
  if (nccl_group != nullptr) {
    nccl_all_to_all(*nccl_group, send, send_layout, recv, recv_layout);
  } else {
    if (host_send_.size() < send_layout.buffer_bytes) host_send_.resize(send_layout.buffer_bytes);
    if (host_recv_.size() < recv_layout.buffer_bytes) host_recv_.resize(recv_layout.buffer_bytes);
    to_host(host_send_.data(), send, send_layout.buffer_bytes);
    const dist::CollectiveScope watched("the device Echo's exchange to the owners over MPI (MPI_Alltoallv)", comm_);
    MPI_CHECK(MPI_Alltoallv(host_send_.data(), send_layout.counts.data(), send_layout.displs.data(), MPI_BYTE,
                            host_recv_.data(), recv_layout.counts.data(), recv_layout.displs.data(), MPI_BYTE,
                            comm_.get()));
    to_device(recv, host_recv_.data(), recv_layout.buffer_bytes);
  }

  // Phase 2: the owner's fp32 sum, in rank order, onto its own segment of y (kept unencoded, as
  // QuantCodec::load_own keeps it; the final decode overwrites it). One launch per copy: stream
  // order is rank order.
  for (int j = 0; j < P; ++j)
    if (j != me && mine.size > 0)
      cuda::dequantize_add(recv + recv_layout.displs[j], mine.size, spec, y + mine.begin, &c->encoded, kStream);
  uint8_t* own = own_code_.get(L.own_code_bytes);
  if (mine.size > 0) cuda::quantize(y + mine.begin, mine.size, spec, own, &c->encoded, kStream);

  // Phase 3: all-gather of the encoded sums; every rank decodes the same bytes.
  const ByteExchange& gather = L.gather;
  uint8_t* gathered = gathered_.get(gather.buffer_bytes);
  if (nccl_group != nullptr) {
    nccl_all_gather(*nccl_group, own, gathered, gather);
  } else {
    if (host_own_.size() < L.own_code_bytes) host_own_.resize(L.own_code_bytes);
    if (host_gathered_.size() < gather.buffer_bytes) host_gathered_.resize(gather.buffer_bytes);
    to_host(host_own_.data(), own, static_cast<size_t>(gather.counts[me]));
    const dist::CollectiveScope watched("the device Echo's gather of the sums over MPI (MPI_Allgatherv)", comm_);
    MPI_CHECK(MPI_Allgatherv(host_own_.data(), gather.counts[me], MPI_BYTE, host_gathered_.data(),
                             gather.counts.data(), gather.displs.data(), MPI_BYTE, comm_.get()));
    to_device(gathered, host_gathered_.data(), gather.buffer_bytes);
  }
  for (int j = 0; j < P; ++j)
    if (segs[j].size > 0)
      cuda::dequantize(gathered + gather.displs[j], segs[j].size, spec, y + segs[j].begin, &c->decoded, kStream);
  if (nccl_group != nullptr) {
    cuda::note_if_poisoned(&c->decoded, fault_key(site, FaultKind::poisoned_output), fault_word(), kStream);
    return 0;
  }
  return cuda::read_report(&c->decoded, kStream).bad_groups;
}

}  // namespace

std::unique_ptr<DeviceEcho> make_device_echo(const dist::Communicator& comm, const TransportOptions& transport) {
  return std::make_unique<CudaDeviceEcho>(comm, transport);
}

}  // namespace echo::comm
