// A TP group of threads for tests of vocab- or channel-sharded ops without MPI: each shard runs
// on its own thread, and its TpReducer combines the per-shard values in shard order behind a
// barrier, as an all-reduce over the group would (every shard gets the same result).
#pragma once

#include <algorithm>
#include <barrier>
#include <span>
#include <vector>

#include "backend/tp_reducer.h"

namespace echo::testing {

class ThreadTpGroup {
 public:
  explicit ThreadTpGroup(int size) : barrier_(size), slots_(size) {
    for (int r = 0; r < size; ++r)
      reducers_.push_back({[this, r](std::span<double> v) { reduce(r, v, true); },
                           [this, r](std::span<double> v) { reduce(r, v, false); }});
  }
  ThreadTpGroup(const ThreadTpGroup&) = delete;
  ThreadTpGroup& operator=(const ThreadTpGroup&) = delete;
  // The reducer shard `rank` calls (from its own thread).
  const backend::TpReducer& reducer(int rank) const { return reducers_[rank]; }

 private:
  void reduce(int rank, std::span<double> v, bool is_max) {
    slots_[rank].assign(v.begin(), v.end());
    barrier_.arrive_and_wait();
    for (size_t i = 0; i < v.size(); ++i) {
      double acc = slots_[0][i];
      for (size_t r = 1; r < slots_.size(); ++r) acc = is_max ? std::max(acc, slots_[r][i]) : acc + slots_[r][i];
      v[i] = acc;
    }
    barrier_.arrive_and_wait();  // all have read the slots before anyone writes the next call's
  }
  std::barrier<> barrier_;
  std::vector<std::vector<double>> slots_;
  std::vector<backend::TpReducer> reducers_;
};

}  // namespace echo::testing
