// One Echo site's per-value work, tile by tile inside the pipelined transport (docs/design.md §8,
// fused compensator; Echo paper Sec. 4.2 and Appendix C): x' = (x + c)·2^e is formed where a tile
// is read for encoding and never stored whole, and where the tile's sum is decoded it is unscaled,
// the compensator takes u = x' - ŷ/P (x' recomputed from x, which the tile still holds, and the
// not yet updated m1, m2) and ŷ becomes the output. The arithmetic is compensator_math.h and
// rescale.h, the unfused path's, so both give the same bits (tested).
#pragma once

#include <span>

#include "comm/echo/compensator.h"
#include "comm/segment_reduce.h"

namespace echo::comm {

class FusedEchoSite final : public TileHooks {
 public:
  // `compensator` is prepared for this site's length.
  FusedEchoSite(Compensator& compensator, int num_ranks);

  // max |x'| before rescaling, +inf where x' is not finite (MPI_MAX and the shm max need not carry NaN).
  float local_absmax(std::span<const float> x) const;
  void set_exponent(int e) { exponent_ = e; }

  void load(const float* x, size_t begin, size_t n, float* out) const override;
  void finish(float* x, size_t begin, size_t n, const float* y) override;

 private:
  CompensatorCoeffs k_;
  float* m1_;
  float* m2_;
  float num_ranks_;
  int exponent_ = 0;
};

}  // namespace echo::comm
