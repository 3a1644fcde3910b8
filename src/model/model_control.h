// The model layer's control messages (proto/model_control.proto) as plain
// structs, and their codec: the only file that touches the generated
// header. ModelClient encodes requests and decodes replies; ModelServer
// decodes requests and encodes replies.
//
// Decoding is strict: bytes from the network that do not parse, name no or
// another operation than the request's head, or carry out-of-range fields
// are kCorruption (never a crash), so a handler only ever sees well-formed
// requests. Whether a spec string (initializer, optimizer, consistency)
// means anything is the server's judgement, not the codec's.
//
// Thread safety: pure functions.
#ifndef PS_MODEL_MODEL_CONTROL_H_
#define PS_MODEL_MODEL_CONTROL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ps {
namespace model {

// The operation of a control request: the SimpleApp request's head, and the
// number of the `op` case of ControlRequest.
enum class ControlOp : int {
  kRegisterTable = 1,
  kRegisterDense = 2,
  kSave = 3,
  kLoad = 4,
  kVersion = 5,
  kLoadCommit = 6,
  kLoadAbort = 7,
  // A server that joined a running job asks a peer for its registrations
  // (docs/model.md, "Servers joining and leaving").
  kCatalog = 8,
};

// "RegisterTable", "Save", ... for messages.
const char* OpName(ControlOp op);

// Bounds on what a request may carry (the codec refuses more).
constexpr size_t kMaxControlText = 4096;  // a name, spec or directory
constexpr size_t kMaxShapeRank = 32;
constexpr int64_t kMaxDenseElements = int64_t{1} << 40;

struct ControlRequest {
  ControlOp op = ControlOp::kVersion;
  // kRegisterTable and kRegisterDense.
  std::string name;
  std::string optimizer;
  std::string consistency;
  // kRegisterTable.
  int64_t dim = 0;
  std::string initializer;
  // kRegisterDense: the element count is the product of the shape.
  std::vector<int64_t> shape;
  // kSave and kLoad.
  std::string dir;
  // kCatalog: the epoch of the ring the asker joined under.
  uint64_t ring_epoch = 0;
};

struct ControlReply {
  Status status;
  uint64_t version = 0;  // kVersion and kCatalog
  // Registrations and kCatalog: the answering server's ring epoch.
  uint64_t ring_epoch = 0;
  // kCatalog: every registration the server holds (kRegisterTable and
  // kRegisterDense requests, checked as DecodeControlRequest checks them).
  std::vector<ControlRequest> registrations;
};

// The body of a request. Returns the head to send with it in *head.
std::string EncodeControlRequest(const ControlRequest& request, int* head);

// Decodes a request's head and body. kCorruption if the body does not parse
// or names another operation than `head`, if a register request has an
// empty name, a dim < 1, a shape entry < 1 or more than kMaxDenseElements
// elements, or if any text is longer than kMaxControlText.
StatusOr<ControlRequest> DecodeControlRequest(int head,
                                              const std::string& body);

// A dense registration's element count (the product of its shape; 1 for a
// scalar). Only for shapes DecodeControlRequest accepted or the client
// checked.
int64_t DenseElements(const std::vector<int64_t>& shape);

std::string EncodeControlReply(const ControlReply& reply);
// kCorruption if the body does not parse, its code is unknown or a
// registration it carries is malformed (as DecodeControlRequest judges).
StatusOr<ControlReply> DecodeControlReply(const std::string& body);

}  // namespace model
}  // namespace ps

#endif  // PS_MODEL_MODEL_CONTROL_H_
