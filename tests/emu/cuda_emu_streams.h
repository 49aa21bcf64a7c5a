// The emulated device's streams (docs/design.md §15b): work issued to a stream runs later, in issue
// order, on that stream's own host thread, beside the host and the other streams, as a GPU runs it.
// So a kernel that reads another stream's result without cudaStreamWaitEvent, a host read of an
// asynchronous copy before its synchronization, or a stream-ordered free that overtakes a reader
// shows as a wrong result or an ASan report instead of passing. The legacy default stream keeps its
// implicit ordering with every blocking stream, in both directions.
//
// ECHO_EMU_STREAMS=async (the default) or sync (every piece of work runs on the calling thread at
// issue: the emulator's first model, for telling a stream-ordering failure from a kernel's).
// ECHO_EMU_STREAM_DELAY_US (default 200): each kernel, copy or fill waits a random 0..N µs on its
// stream before it runs, so concurrent streams interleave differently from run to run;
// ECHO_EMU_SEED fixes the delays' seed (default: from the process id).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace echo::emu {

class Stream;

// A point in one stream's work: reached once the stream has completed `position` pieces of work.
// A default mark (no stream) is always reached: an event never recorded.
struct StreamMark {
  std::shared_ptr<Stream> stream;
  uint64_t position = 0;
};

// cudaStreamCreateWithFlags's stream: `blocking` unless made with cudaStreamNonBlocking.
void add_stream(cudaStream_t handle, bool blocking);
// Waits for the stream's work, then forgets it. False when no such stream exists.
bool remove_stream(cudaStream_t handle);
// True for a stream created and not destroyed, the legacy default stream (null or
// cudaStreamLegacy) and the per-thread default stream.
bool stream_exists(cudaStream_t handle);

// Issues `work` on `stream` and returns the mark just after it. On the legacy default stream it
// runs after all earlier work of every blocking stream, and their later work runs after it.
// `delayed`: subject to ECHO_EMU_STREAM_DELAY_US (device work; not markers).
StreamMark issue(cudaStream_t stream, std::function<void()> work, bool delayed = true);
// cudaStreamWaitEvent: `stream`'s later work waits until `mark` is reached.
void issue_wait(cudaStream_t stream, const StreamMark& mark);

bool reached(const StreamMark& mark);
// The host waits until `mark` is reached.
void wait_until(const StreamMark& mark);
// The host waits for all work issued to `stream` so far (on the legacy stream: and for all earlier
// work of the blocking streams, as an operation there would).
void synchronize(cudaStream_t stream);
// The host waits for all work issued to every stream so far (cudaDeviceSynchronize).
void synchronize_all();

}  // namespace echo::emu
