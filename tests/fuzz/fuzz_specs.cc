// Fuzz target: the model layer's control messages (model/model_control.h)
// and the spec text they carry. The first byte is the SimpleApp head: 0
// makes the rest a reply, anything else the head of a request whose body
// is the rest. A decoded registration's initializer, optimizer and
// consistency specs are parsed as the server parses them, and every text
// field also as the key placement and consistency settings a node reads.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/initializer.h"
#include "model/model_control.h"
#include "model/model_protocol.h"
#include "model/optimizer.h"
#include "node/consistency_config.h"
#include "partition/key_ring.h"

namespace {

void ParseSpecs(const std::string& f) {
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int head = data[0];
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (head == 0) {
    auto reply = ps::model::DecodeControlReply(body);
    // What decodes encodes back to the same reply.
    if (reply.ok()) {
      auto again =
          ps::model::DecodeControlReply(ps::model::EncodeControlReply(*reply));
      if (!again.ok() || again->status.code() != reply->status.code() ||
          again->version != reply->version) {
        __builtin_trap();
      }
    }
    return 0;
  }
  auto request = ps::model::DecodeControlRequest(head, body);
  if (!request.ok()) return 0;
  const ps::model::ControlRequest& r = *request;
  // A decoded request survives its own encoding.
  int head_again = 0;
  auto again = ps::model::DecodeControlRequest(
      head, ps::model::EncodeControlRequest(r, &head_again));
  if (head_again != head || !again.ok() || again->name != r.name ||
      again->shape != r.shape || again->dir != r.dir) {
    __builtin_trap();
  }
  if (r.op == ps::model::ControlOp::kRegisterDense &&
      ps::model::DenseElements(r.shape) > ps::model::kMaxDenseElements) {
    __builtin_trap();
  }
  for (const std::string* f :
       {&r.name, &r.initializer, &r.optimizer, &r.consistency, &r.dir}) {
    ParseSpecs(*f);
  }
  return 0;
}
