// Flag kernels of the cuda_ipc transport (p2p_flags.cuh). One thread per flag: a wait occupies a
// single block, so on a GPU shared by several ranks it leaves the SMs to the peers' kernels.
// NOTE: never run on a GPU when written; cuda_ipc_reduce_gpu_mpi_test checks the transport.
// clang-format off
#include "launch.cuh"
#include "cuda_check.h"
// clang-format on

#include "p2p_flags.cuh"

#include "comm/p2p/p2p_geometry.h"

namespace echo::cuda {

namespace {

#ifdef ECHO_KERNEL_EMU
// The kernel emulator (tests/emu) has no PTX: the same orderings through the compiler's atomics,
// which order the host's memory as the PTX does the GPU's.
__device__ uint64_t load_acquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
__device__ uint64_t load_relaxed(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
__device__ void store_release(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
__device__ void store_relaxed(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
__device__ uint64_t now_ns() { return ::echo::emu::now_ns(); }
#else
// System-scope acquire load and release store (PTX ISA memory consistency model, sm_70+): the
// flag orders the peer's slot writes before it with this rank's slot reads after it, across
// processes and GPUs.
__device__ uint64_t load_acquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ uint64_t load_relaxed(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ void store_release(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ void store_relaxed(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#endif

using comm::p2p::kHeaderMaxSeq;
using comm::p2p::kHeaderMaxValue;
using comm::p2p::kHeaderN;
using comm::p2p::kHeaderSeq;
using comm::p2p::kHeaderWire;

__global__ void write_header_kernel(uint64_t* header, P2pCallHeader h) {
  store_relaxed(&header[kHeaderSeq], 0);  // "being written": never a valid call number
  __threadfence_system();
  store_relaxed(&header[kHeaderN], h.n);
  store_relaxed(&header[kHeaderWire], h.wire);
  store_release(&header[kHeaderSeq], h.seq);
}

__global__ void publish_kernel(P2pFlagList flags, uint64_t value, const P2pFaultRecord* record) {
  const int i = static_cast<int>(threadIdx.x);
  if (i >= flags.count) return;
  const bool faulted = *static_cast<const volatile uint32_t*>(&record->fault) != kP2pNoFault;
  __threadfence_system();  // the earlier kernels' and copies' writes first, then the flag
  store_release(flags.flag[i], faulted ? kP2pPoison : value);
}

__device__ void record_fault(P2pFaultRecord* record, uint32_t fault, int stage, int peer, int tile, uint64_t observed,
                             uint64_t expected, uint64_t waited_ns) {
  if (atomicCAS(&record->fault, kP2pNoFault, fault) != kP2pNoFault) return;  // the first fault wins
  record->stage = stage;
  record->peer = peer;
  record->tile = tile;
  record->observed = observed;
  record->expected = expected;
  record->waited_ns = waited_ns;
}

// Seqlock read of a peer's header; false when it is being written or is another call's.
__device__ bool same_call_differs(const uint64_t* header, const P2pCallHeader& mine, uint64_t& n, uint64_t& wire) {
  const uint64_t s1 = load_acquire(&header[kHeaderSeq]);
  n = load_relaxed(&header[kHeaderN]);
  wire = load_relaxed(&header[kHeaderWire]);
  __threadfence_system();
  const uint64_t s2 = load_relaxed(&header[kHeaderSeq]);
  return s1 != 0 && s1 == s2 && s1 == mine.seq && (n != mine.n || wire != mine.wire);
}

// The checks a wait makes every 64 polls besides its own: the peer's header shows this call with
// another length or codec (mismatch), the wait has passed its timeout, or another wait of the call
// has already failed. True when the wait must end (its fault recorded, or another's).
__device__ bool wait_must_end(const uint64_t* peer_header, const P2pCallHeader& mine, int stage, int peer, int tile,
                              uint64_t observed, uint64_t expected, uint64_t start, uint64_t timeout_ns,
                              P2pFaultRecord* record) {
  uint64_t n = 0, wire = 0;
  if (peer_header != nullptr && same_call_differs(peer_header, mine, n, wire)) {
    record_fault(record, kP2pMismatch, stage, peer, tile, n, wire, 0);
    return true;
  }
  const uint64_t waited = now_ns() - start;
  if (timeout_ns != 0 && waited > timeout_ns) {
    record_fault(record, kP2pTimeout, stage, peer, tile, observed, expected, waited);
    return true;
  }
  return *static_cast<volatile uint32_t*>(&record->fault) != kP2pNoFault;
}

__global__ void wait_kernel(P2pFlagList flags, uint64_t expected, P2pCallHeader mine, int stage, int tile,
                            uint64_t timeout_ns, P2pFaultRecord* record) {
  const int i = static_cast<int>(threadIdx.x);
  if (i >= flags.count) return;
  volatile uint32_t* fault = &record->fault;
  if (*fault != kP2pNoFault) return;  // an earlier wait of this call failed: the call is lost anyway
  const uint64_t start = now_ns();
  for (uint32_t polls = 0;; ++polls) {
    const uint64_t v = load_acquire(flags.flag[i]);
    if (v == expected) {
      // The peer wrote its header before this flag and cannot start another call before this one
      // ends, so a header of this call with another length or codec is caught here at the latest.
      uint64_t n = 0, wire = 0;
      if (flags.peer_header[i] != nullptr && same_call_differs(flags.peer_header[i], mine, n, wire))
        record_fault(record, kP2pMismatch, stage, flags.peer[i], tile, n, wire, 0);
      return;
    }
    if (v > expected) return record_fault(record, kP2pOutOfStep, stage, flags.peer[i], tile, v, expected, 0);
    if (polls % 64 == 63 &&
        wait_must_end(flags.peer_header[i], mine, stage, flags.peer[i], tile, v, expected, start, timeout_ns, record))
      return;
    __nanosleep(200);
  }
}

// One block: thread 0 publishes this rank's max, then thread i waits for peer i's and raises the
// block's max; thread 0 writes it back. The value word is written before the release of the
// number, and read after its acquire, so a peer's value is the one of this max.
__global__ void group_max_kernel(uint64_t* my_header, P2pFlagList peers, P2pCallHeader mine, uint64_t max_seq,
                                 uint32_t* bits, uint64_t timeout_ns, P2pFaultRecord* record) {
  __shared__ uint32_t block_max;
  const int i = static_cast<int>(threadIdx.x);
  const int slot = 2 * static_cast<int>(max_seq % 2);
  if (i == 0) {
    block_max = *bits;
    store_relaxed(&my_header[kHeaderMaxValue + slot], block_max);
    store_release(&my_header[kHeaderMaxSeq + slot], max_seq);
  }
  __syncthreads();
  if (i < peers.count) {
    const uint64_t* theirs = peers.peer_header[i];
    const uint64_t start = now_ns();
    for (uint32_t polls = 0;; ++polls) {
      const uint64_t v = load_acquire(&theirs[kHeaderMaxSeq + slot]);
      if (v == max_seq) {
        atomicMax(&block_max, static_cast<uint32_t>(load_relaxed(&theirs[kHeaderMaxValue + slot])));
        break;
      }
      // A peer cannot start max number max_seq + 2 (this slot again) before it has read this
      // rank's max_seq + 1, which this rank writes only after this wait: past max_seq is a
      // different sequence of calls.
      if (v > max_seq) {
        record_fault(record, kP2pOutOfStep, kP2pStageGroupMax, peers.peer[i], 0, v, max_seq, 0);
        break;
      }
      if (polls % 64 == 63) {
        // Besides wait_kernel's checks: a peer already in a later call fails at once (it never
        // sends this max), instead of after the timeout.
        const uint64_t their_call = load_acquire(&theirs[kHeaderSeq]);
        if (their_call > mine.seq) {
          record_fault(record, kP2pOutOfStep, kP2pStageGroupMax, peers.peer[i], 0, their_call, mine.seq, 0);
          break;
        }
        if (wait_must_end(theirs, mine, kP2pStageGroupMax, peers.peer[i], 0, v, max_seq, start, timeout_ns, record))
          break;
      }
      __nanosleep(200);
    }
  }
  __syncthreads();
  // After a fault the call throws; 0 (a finite max) keeps the site's exponent kernel from noting
  // a non-finite max that no one would raise.
  if (i == 0) *bits = *static_cast<volatile uint32_t*>(&record->fault) == kP2pNoFault ? block_max : 0u;
}

}  // namespace

void p2p_write_header(uint64_t* header, P2pCallHeader h, cudaStream_t stream) {
  ECHO_LAUNCH(1, 1, 0, stream, write_header_kernel)(header, h);
  CUDA_CHECK(cudaGetLastError());
}

void p2p_publish(const P2pFlagList& flags, uint64_t value, const P2pFaultRecord* record, cudaStream_t stream) {
  if (flags.count == 0) return;
  ECHO_LAUNCH(1, kMaxP2pPeers, 0, stream, publish_kernel)(flags, value, record);
  CUDA_CHECK(cudaGetLastError());
}

void p2p_wait(const P2pFlagList& flags, uint64_t expected, P2pCallHeader mine, int stage, int tile,
              uint64_t timeout_ns, P2pFaultRecord* record, cudaStream_t stream) {
  if (flags.count == 0) return;
  ECHO_LAUNCH(1, kMaxP2pPeers, 0, stream, wait_kernel)(flags, expected, mine, stage, tile, timeout_ns, record);
  CUDA_CHECK(cudaGetLastError());
}

void p2p_group_max_bits(uint64_t* my_header, const P2pFlagList& peers, P2pCallHeader mine, uint64_t max_seq,
                        uint32_t* bits, uint64_t timeout_ns, P2pFaultRecord* record, cudaStream_t stream) {
  ECHO_CHECK(max_seq > 0, "p2p_group_max_bits: max numbers start at 1 (0 is an unwritten header)");
  ECHO_LAUNCH(1, kMaxP2pPeers, 0, stream, group_max_kernel)(my_header, peers, mine, max_seq, bits, timeout_ns, record);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
