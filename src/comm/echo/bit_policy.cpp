// Site -> layer -> bit width.
#include "comm/echo/bit_policy.h"

#include "core/error.h"

namespace echo::comm {

int BitPolicy::layer_of(Site site) const {
  ECHO_CHECK(num_layers > 0, "the site bit policy needs the number of layers");
  ECHO_CHECK(site.index >= 0 && site.index < 2 * num_layers, "{} is outside the {} sites of a {}-layer model",
             to_string(site), 2 * num_layers, num_layers);
  const int visited_layer = site.index / 2;
  return site.direction == Direction::forward ? visited_layer : num_layers - 1 - visited_layer;
}

int BitPolicy::bits_for(Site site) const {
  if (!early_site_8bit) return bits;
  return layer_of(site) < num_layers / 2 ? 8 : bits;
}

}  // namespace echo::comm
