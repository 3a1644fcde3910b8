// Fuzz target: the text of the model layer's control requests. A
// registration's body is tab-separated fields; its initializer, optimizer
// and consistency specs are parsed as the server parses them, and so are
// the key placement and consistency settings a node reads.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/initializer.h"
#include "model/model_protocol.h"
#include "model/optimizer.h"
#include "node/consistency_config.h"
#include "partition/key_ring.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> fields = ps::model::SplitTabs(body);
  for (const std::string& f : fields) {
    auto init = ps::model::Initializer::Parse(f);
    if (init.ok()) {
      float row[4];
      init->Fill(1, 2, row, 4);
    }
    auto opt = ps::model::Optimizer::Parse(f);
    if (opt.ok()) {
      const ps::model::Optimizer& o = *opt.value();
      float w[4] = {1, 2, 3, 4}, g[4] = {1, -1, 0.5f, 0};
      std::vector<float> slots(o.SlotFloats(4));
      o.InitSlots(slots.data(), 4);
      o.Update(w, slots.data(), g, 4);
      // The canonical spec parses back (what checkpoints store).
      if (!ps::model::Optimizer::Parse(o.ToString()).ok()) __builtin_trap();
    }
    auto consistency = ps::ConsistencyConfig::Parse(f);
    if (consistency.ok() &&
        !ps::ConsistencyConfig::Parse(consistency->ToString()).ok()) {
      __builtin_trap();
    }
    (void)ps::model::KVAppFor(f);
    (void)ps::ParsePlacement(f);
  }
  return 0;
}
