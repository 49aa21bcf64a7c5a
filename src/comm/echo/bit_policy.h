// Bits per site: uniform (4 or 8), or `early_site_8bit`, which promotes the sites of the first
// half of the layers to 8 bits. Sites are numbered in visiting order, two per layer, so the
// backward pass meets the last layer first.
#pragma once

#include "comm/all_reduce.h"

namespace echo::comm {

struct BitPolicy {
  int bits = 4;
  bool early_site_8bit = false;
  int num_layers = 0;  // needed by early_site_8bit

  int layer_of(Site site) const;
  int bits_for(Site site) const;
};

}  // namespace echo::comm
