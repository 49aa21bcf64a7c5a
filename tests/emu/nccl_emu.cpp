// The kernel emulator's stand-in for NCCL (docs/design.md §15b): the calls src/comm/nccl_group.cpp
// makes (a communicator from a unique id, all-reduce sum / max of f32, bf16, f64 and i32, grouped
// byte sends and receives), between the processes of one machine, so the paths that need one GPU
// per rank run in CI with ECHO_EMU_DEVICES (cuda_emu_runtime.cpp). A communicator is a shared
// memory segment named by the unique id: one mailbox per ordered pair of ranks (a slot and two
// counters, one writer and one reader each). An operation runs in stream order on the emulated
// streams, as NCCL's kernels do: a send waits until its mailbox is free, a receive until the peer's
// message is there. An all-reduce sends its buffer to every peer and sums every rank's copy in rank
// order (each step rounded to the element type), so every rank gets the same bits; NCCL's ring
// order may round differently. A wait longer than ECHO_EMU_NCCL_TIMEOUT_S (default 300) aborts
// naming the rank and the call: the ranks made different sequences of NCCL calls.
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"
#include "cuda_emu_runtime.h"

namespace {

constexpr uint64_t kIdMagic = 0x6e63636c2d656d75ull;  // "nccl-emu"
constexpr size_t kSlotBytes = size_t{1} << 20;        // one mailbox's message chunk
constexpr int kMaxRanks = 64;

struct IdContents {
  uint64_t magic;
  char name[64];  // the shared memory segment's name
};
static_assert(sizeof(IdContents) <= NCCL_UNIQUE_ID_BYTES);

// One ordered pair's mailbox: `posted` chunks written by the sender, `taken` read by the receiver;
// `ready` receives the receiver has posted, `started` messages the sender has begun (as NCCL's, a
// send waits for its receive: an ungrouped send before a receive on both ranks deadlocks).
struct alignas(64) Mailbox {
  std::atomic<uint64_t> posted;
  std::atomic<uint64_t> taken;
  std::atomic<uint64_t> bytes;          // the last posted chunk's length
  std::atomic<uint64_t> message_bytes;  // the length of the message it belongs to
  std::atomic<uint64_t> ready;
  std::atomic<uint64_t> started;
};

struct Segment {
  std::atomic<int> joined;
  Mailbox mailbox[1];  // nranks * nranks, then the slots
};

size_t segment_bytes(int nranks) {
  const size_t pairs = static_cast<size_t>(nranks) * static_cast<size_t>(nranks);
  return sizeof(Segment) + pairs * sizeof(Mailbox) + pairs * kSlotBytes;
}

double timeout_s() {
  static const double s = static_cast<double>(echo::emu::env_number("ECHO_EMU_NCCL_TIMEOUT_S", 300, 1, 86400));
  return s;
}

}  // namespace

struct ncclComm {
  int nranks = 0, rank = 0;
  Segment* segment = nullptr;
  size_t bytes = 0;
  std::atomic<bool> busy{false};  // one operation at a time moves through the mailboxes
  Mailbox& box(int from, int to) const { return segment->mailbox[from * nranks + to]; }
  char* slot(int from, int to) const {
    char* slots = reinterpret_cast<char*>(&segment->mailbox[nranks * nranks]);
    return slots + static_cast<size_t>(from * nranks + to) * kSlotBytes;
  }
};

namespace {

// Spins (yielding) until ready(); aborts after the timeout naming what it waited for.
template <class Ready>
void wait_for(const ncclComm* comm, int peer, const char* what, Ready ready) {
  const uint64_t start = echo::emu::now_ns();
  for (uint64_t spins = 0; !ready(); ++spins) {
    if (spins % 1024 == 1023 && static_cast<double>(echo::emu::now_ns() - start) * 1e-9 > timeout_s()) {
      std::fprintf(stderr,
                   "echo kernel emulator: NCCL rank %d waited %.0f s for rank %d in %s (the ranks made different "
                   "sequences of NCCL calls)\n",
                   comm->rank, timeout_s(), peer, what);
      std::fflush(stderr);
      std::abort();
    }
    if (spins < 1024) {
      std::this_thread::yield();
    } else {
      usleep(50);  // a long wait leaves the CPU to the peer (CI runs the ranks on two cores)
    }
  }
}

void send_chunk(const ncclComm* comm, int peer, const char* data, size_t bytes, size_t message_bytes,
                const char* what) {
  Mailbox& b = comm->box(comm->rank, peer);
  const uint64_t n = b.posted.load(std::memory_order_relaxed);
  wait_for(comm, peer, what, [&] { return b.taken.load(std::memory_order_acquire) == n; });
  std::memcpy(comm->slot(comm->rank, peer), data, bytes);
  b.bytes.store(bytes, std::memory_order_relaxed);
  b.message_bytes.store(message_bytes, std::memory_order_relaxed);
  b.posted.store(n + 1, std::memory_order_release);
}

void receive_chunk(const ncclComm* comm, int peer, char* data, size_t bytes, size_t message_bytes, const char* what) {
  Mailbox& b = comm->box(peer, comm->rank);
  const uint64_t n = b.taken.load(std::memory_order_relaxed);
  wait_for(comm, peer, what, [&] { return b.posted.load(std::memory_order_acquire) > n; });
  const size_t got = b.bytes.load(std::memory_order_relaxed);
  const size_t got_message = b.message_bytes.load(std::memory_order_relaxed);
  if (got != bytes || got_message != message_bytes) {
    std::fprintf(stderr,
                 "echo kernel emulator: NCCL rank %d expected a message of %zu bytes from rank %d in %s and got one "
                 "of %zu (sends and receives of different sizes)\n",
                 comm->rank, message_bytes, peer, what, got_message);
    std::fflush(stderr);
    std::abort();
  }
  std::memcpy(data, comm->slot(peer, comm->rank), bytes);
  b.taken.store(n + 1, std::memory_order_release);
}

struct Transfer {
  bool send = false;
  int peer = 0;
  char* data = nullptr;  // const for a send
  size_t bytes = 0;
};

// Moves every transfer, chunk by chunk: all sends of chunk c, then all receives of chunk c. A send
// waits only for its peer to have taken chunk c - 1, which the peer does before its own chunk-c
// sends: no cycle.
void run_transfers(ncclComm* comm, const std::vector<Transfer>& transfers, const char* what) {
  if (comm->busy.exchange(true)) {
    std::fprintf(stderr,
                 "echo kernel emulator: two NCCL operations of one communicator at once (issued on two streams "
                 "without an order between them)\n");
    std::abort();
  }
  // Every receive is posted first, then each send waits for its receive to be posted (empty
  // messages move nothing and are not matched, as the product skips them on both sides).
  for (const Transfer& t : transfers)
    if (!t.send && t.bytes > 0) comm->box(t.peer, comm->rank).ready.fetch_add(1, std::memory_order_release);
  for (const Transfer& t : transfers) {
    if (!t.send || t.bytes == 0) continue;
    Mailbox& b = comm->box(comm->rank, t.peer);
    const uint64_t m = b.started.fetch_add(1, std::memory_order_relaxed);
    wait_for(comm, t.peer, what, [&] { return b.ready.load(std::memory_order_acquire) > m; });
  }
  size_t most = 0;
  for (const Transfer& t : transfers) most = std::max(most, t.bytes);
  for (size_t offset = 0; offset < most; offset += kSlotBytes) {
    for (const Transfer& t : transfers)
      if (t.send && t.bytes > offset)
        send_chunk(comm, t.peer, t.data + offset, std::min(kSlotBytes, t.bytes - offset), t.bytes, what);
    for (const Transfer& t : transfers)
      if (!t.send && t.bytes > offset)
        receive_chunk(comm, t.peer, t.data + offset, std::min(kSlotBytes, t.bytes - offset), t.bytes, what);
  }
  comm->busy.store(false);
}

size_t type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

template <class T>
T combine(T a, T b, ncclRedOp_t op) {
  if (op == ncclMax) return a > b ? a : b;
  if constexpr (std::is_same_v<T, int32_t>)
    return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));  // wraps, as the GPU's
  else
    return a + b;
}

// acc[i] (op)= in[i] for elements of type T.
template <class T>
void combine_element(char* acc, const char* in, size_t i, ncclRedOp_t op) {
  T a, b;
  std::memcpy(&a, acc + sizeof(T) * i, sizeof(T));
  std::memcpy(&b, in + sizeof(T) * i, sizeof(T));
  a = combine(a, b, op);
  std::memcpy(acc + sizeof(T) * i, &a, sizeof(T));
}

// acc (op)= in, element by element; bf16 in float, each step rounded back to bf16.
void reduce_into(char* acc, const char* in, size_t count, ncclDataType_t type, ncclRedOp_t op) {
  for (size_t i = 0; i < count; ++i) {
    switch (type) {
      case ncclFloat32:
        combine_element<float>(acc, in, i, op);
        break;
      case ncclFloat64:
        combine_element<double>(acc, in, i, op);
        break;
      case ncclInt32:
        combine_element<int32_t>(acc, in, i, op);
        break;
      case ncclBfloat16: {
        uint16_t a, b;
        std::memcpy(&a, acc + 2 * i, 2);
        std::memcpy(&b, in + 2 * i, 2);
        const uint16_t r =
            echo::float_to_bf16_bits(combine(echo::bf16_bits_to_float(a), echo::bf16_bits_to_float(b), op));
        std::memcpy(acc + 2 * i, &r, 2);
        break;
      }
      default:
        break;  // refused at the call
    }
  }
}

// The calls between ncclGroupStart and ncclGroupEnd of this host thread.
struct PendingGroup {
  int depth = 0;
  ncclComm* comm = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<Transfer> transfers;
};
thread_local PendingGroup t_group;

void issue_transfers(ncclComm* comm, cudaStream_t stream, std::vector<Transfer> transfers) {
  echo::emu::issue(stream, [comm, transfers = std::move(transfers)] { run_transfers(comm, transfers, "send/recv"); });
}

ncclResult_t add_transfer(bool send, void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                          cudaStream_t stream) {
  const size_t width = type_bytes(type);
  if (comm == nullptr || width == 0 || peer < 0 || peer >= comm->nranks || peer == comm->rank)
    return ncclInvalidArgument;
  if (!echo::emu::stream_exists(stream)) return ncclInvalidArgument;
  if (count > 0 && !echo::emu::is_device_range(data, count * width)) return ncclInvalidArgument;
  Transfer t{send, peer, static_cast<char*>(data), count * width};
  if (t_group.depth == 0) {
    issue_transfers(comm, stream, {t});
    return ncclSuccess;
  }
  if (t_group.comm == nullptr) {
    t_group.comm = comm;
    t_group.stream = stream;
  } else if (t_group.comm != comm || t_group.stream != stream) {
    return ncclInvalidUsage;  // not emulated: one communicator and stream per group
  }
  t_group.transfers.push_back(t);
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  static std::atomic<int> counter{0};
  static const unsigned nonce = std::random_device{}();  // a crashed run's leftover is never reused
  IdContents c{};
  c.magic = kIdMagic;
  std::snprintf(c.name, sizeof c.name, "/echo-nccl-emu-%d-%08x-%d", static_cast<int>(getpid()), nonce, counter++);
  *id = ncclUniqueId{};
  std::memcpy(id->internal, &c, sizeof c);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (out == nullptr || nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  IdContents c;
  std::memcpy(&c, id.internal, sizeof c);
  if (c.magic != kIdMagic) return ncclInvalidArgument;
  const size_t bytes = segment_bytes(nranks);
  const int fd = shm_open(c.name, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return ncclSystemError;
  // Every rank sizes it alike; a new segment reads as zeros (no rank joined, no message posted).
  // Reserved whole, so a full /dev/shm is this error and not a SIGBUS later.
  const int reserved =
      ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? posix_fallocate(fd, 0, static_cast<off_t>(bytes)) : errno;
  if (reserved != 0) {
    std::fprintf(stderr, "echo kernel emulator: NCCL shared memory %s (%zu bytes): %s\n", c.name, bytes,
                 std::strerror(reserved));
    close(fd);
    shm_unlink(c.name);
    return ncclSystemError;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return ncclSystemError;
  echo::emu::unpoison_mapping(p, bytes);
  auto* comm = new ncclComm;
  comm->nranks = nranks;
  comm->rank = rank;
  comm->segment = static_cast<Segment*>(p);
  comm->bytes = bytes;
  // As ncclCommInitRank: returns when every rank has joined. The last to join (every other rank
  // has the segment mapped) removes the name.
  if (comm->segment->joined.fetch_add(1) + 1 == nranks) shm_unlink(c.name);
  wait_for(comm, -1, "ncclCommInitRank", [&] { return comm->segment->joined.load() >= nranks; });
  // Said once per communicator, so a test can tell the NCCL path ran.
  std::fprintf(stderr, "echo kernel emulator: NCCL communicator of %d ranks, rank %d\n", nranks, rank);
  *out = comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  echo::emu::synchronize_all();  // nothing queued still uses the mailboxes
  munmap(comm->segment, comm->bytes);
  delete comm;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclSystemError:
      return "unhandled system error (emulated NCCL)";
    case ncclInvalidArgument:
      return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage:
      return "invalid usage (emulated NCCL)";
    default:
      return "NCCL error (emulated)";
  }
}

ncclResult_t ncclGroupStart() {
  ++t_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group.depth == 0) return ncclInvalidUsage;
  if (--t_group.depth > 0) return ncclSuccess;
  if (t_group.comm != nullptr) issue_transfers(t_group.comm, t_group.stream, std::move(t_group.transfers));
  t_group = PendingGroup{};
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return add_transfer(true, const_cast<void*>(data), count, type, peer, comm, stream);
}

ncclResult_t ncclRecv(void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  return add_transfer(false, data, count, type, peer, comm, stream);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t width = type_bytes(type);
  const bool reducible = type == ncclFloat32 || type == ncclFloat64 || type == ncclInt32 || type == ncclBfloat16;
  if (comm == nullptr || !reducible || (op != ncclSum && op != ncclMax)) return ncclInvalidArgument;
  if (t_group.depth > 0) return ncclInvalidUsage;  // not emulated: collectives inside a group
  if (!echo::emu::stream_exists(stream)) return ncclInvalidArgument;
  const size_t bytes = count * width;
  if (count > 0 && (!echo::emu::is_device_range(send, bytes) || !echo::emu::is_device_range(recv, bytes)))
    return ncclInvalidArgument;
  echo::emu::issue(stream, [comm, send, recv, count, type, op, bytes] {
    const int P = comm->nranks, me = comm->rank;
    std::vector<std::vector<char>> copies(static_cast<size_t>(P));
    copies[static_cast<size_t>(me)].assign(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
    std::vector<Transfer> transfers;
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      transfers.push_back({true, p, copies[static_cast<size_t>(me)].data(), bytes});
      copies[static_cast<size_t>(p)].resize(bytes);
      transfers.push_back({false, p, copies[static_cast<size_t>(p)].data(), bytes});
    }
    run_transfers(comm, transfers, "ncclAllReduce");
    std::vector<char> acc = copies[0];
    for (int p = 1; p < P; ++p) reduce_into(acc.data(), copies[static_cast<size_t>(p)].data(), count, type, op);
    if (bytes > 0) std::memcpy(recv, acc.data(), bytes);
  });
  return ncclSuccess;
}

}  // extern "C"
