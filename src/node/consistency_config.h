// ConsistencyConfig: which consistency mode a server enforces (see
// include/ps/consistency.h), parsed from configuration text. A setting the
// node reads with the others (Options) and hands to its server apps, whose
// controller (src/consistency/, a layer above) enforces it; so the value type
// lives here, below both.
#ifndef PS_NODE_CONSISTENCY_CONFIG_H_
#define PS_NODE_CONSISTENCY_CONFIG_H_

#include <cstdint>
#include <limits>
#include <string>

#include "ps/status.h"

namespace ps {

struct ConsistencyConfig {
  enum class Mode { kAsp, kSsp, kBsp };
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

  Mode mode = Mode::kAsp;
  // How many iterations a pull may run ahead of the slowest worker:
  // kUnbounded for asp, s for ssp:s, 0 for bsp.
  int64_t staleness = kUnbounded;

  // "asp", "bsp", "ssp:3" (also "ssp(3)"). kInvalidArgument otherwise.
  static StatusOr<ConsistencyConfig> Parse(const std::string& spec);
  // From a mode name and an optional staleness text (EMBER_CONSISTENCY and
  // EMBER_STALENESS): ssp needs a staleness, the others refuse one.
  static StatusOr<ConsistencyConfig> FromSettings(const std::string& mode,
                                                  const std::string* staleness);

  std::string ToString() const;
  bool operator==(const ConsistencyConfig& o) const {
    return mode == o.mode && staleness == o.staleness;
  }
};

}  // namespace ps

#endif  // PS_NODE_CONSISTENCY_CONFIG_H_
