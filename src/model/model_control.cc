#include "model/model_control.h"

#include <iterator>

#include "model_control.pb.h"

namespace ps {
namespace model {

namespace pb = ::ember::model;

const char* OpName(ControlOp op) {
  // By the op's value, 1 to 8 (0 is none).
  static const char* const kNames[] = {
      "control", "RegisterTable", "RegisterDense", "Save",   "Load",
      "version", "Load (commit)", "Load (abort)",  "catalog"};
  const auto i = static_cast<size_t>(op);
  return i < std::size(kNames) ? kNames[i] : "control";
}

namespace {

// The oneof case numbers are the ControlOp values.
constexpr bool Same(pb::ControlRequest::OpCase c, ControlOp op) {
  return static_cast<int>(c) == static_cast<int>(op);
}
static_assert(
    Same(pb::ControlRequest::kRegisterTable, ControlOp::kRegisterTable) &&
        Same(pb::ControlRequest::kRegisterDense, ControlOp::kRegisterDense) &&
        Same(pb::ControlRequest::kSave, ControlOp::kSave) &&
        Same(pb::ControlRequest::kLoad, ControlOp::kLoad) &&
        Same(pb::ControlRequest::kVersion, ControlOp::kVersion) &&
        Same(pb::ControlRequest::kLoadCommit, ControlOp::kLoadCommit) &&
        Same(pb::ControlRequest::kLoadAbort, ControlOp::kLoadAbort) &&
        Same(pb::ControlRequest::kCatalog, ControlOp::kCatalog),
    "the op case numbers of model_control.proto are ControlOp's");

Status Bad(const std::string& what) {
  return Status::Corruption("malformed model control request: " + what);
}

Status CheckText(const char* field, const std::string& text) {
  if (text.size() > kMaxControlText) {
    return Bad(std::string(field) + " of " + std::to_string(text.size()) +
               " bytes");
  }
  return Status::OK();
}

Status CheckName(const std::string& name) {
  if (name.empty()) return Bad("empty name");
  return CheckText("name", name);
}

void ToPb(const ControlRequest& r, pb::RegisterTable* t) {
  t->set_name(r.name);
  t->set_dim(r.dim);
  t->set_initializer(r.initializer);
  t->set_optimizer(r.optimizer);
  t->set_consistency(r.consistency);
}

void ToPb(const ControlRequest& r, pb::RegisterDense* d) {
  d->set_name(r.name);
  for (int64_t s : r.shape) d->add_shape(s);
  d->set_optimizer(r.optimizer);
  d->set_consistency(r.consistency);
}

Status CheckSpecs(const ControlRequest& r) {
  PS_RETURN_IF_ERROR(CheckText("optimizer", r.optimizer));
  return CheckText("consistency", r.consistency);
}

StatusOr<ControlRequest> FromPb(const pb::RegisterTable& t) {
  ControlRequest r;
  r.op = ControlOp::kRegisterTable;
  r.name = t.name();
  r.dim = t.dim();
  r.initializer = t.initializer();
  r.optimizer = t.optimizer();
  r.consistency = t.consistency();
  PS_RETURN_IF_ERROR(CheckName(r.name));
  if (r.dim < 1) return Bad("dim " + std::to_string(r.dim));
  PS_RETURN_IF_ERROR(CheckText("initializer", r.initializer));
  PS_RETURN_IF_ERROR(CheckSpecs(r));
  return r;
}

StatusOr<ControlRequest> FromPb(const pb::RegisterDense& d) {
  ControlRequest r;
  r.op = ControlOp::kRegisterDense;
  r.name = d.name();
  r.optimizer = d.optimizer();
  r.consistency = d.consistency();
  PS_RETURN_IF_ERROR(CheckName(r.name));
  if (static_cast<size_t>(d.shape_size()) > kMaxShapeRank) {
    return Bad("a shape of rank " + std::to_string(d.shape_size()));
  }
  int64_t elements = 1;
  for (int64_t s : d.shape()) {
    if (s < 1) return Bad("shape entry " + std::to_string(s));
    if (s > kMaxDenseElements / elements) {
      return Bad("more than " + std::to_string(kMaxDenseElements) +
                 " elements");
    }
    elements *= s;
    r.shape.push_back(s);
  }
  PS_RETURN_IF_ERROR(CheckSpecs(r));
  return r;
}

}  // namespace

int64_t DenseElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string EncodeControlRequest(const ControlRequest& request, int* head) {
  pb::ControlRequest pb;
  switch (request.op) {
    case ControlOp::kRegisterTable:
      ToPb(request, pb.mutable_register_table());
      break;
    case ControlOp::kRegisterDense:
      ToPb(request, pb.mutable_register_dense());
      break;
    case ControlOp::kSave:
      pb.mutable_save()->set_dir(request.dir);
      break;
    case ControlOp::kLoad:
      pb.mutable_load()->set_dir(request.dir);
      break;
    case ControlOp::kVersion:
      pb.mutable_version();
      break;
    case ControlOp::kLoadCommit:
      pb.mutable_load_commit();
      break;
    case ControlOp::kLoadAbort:
      pb.mutable_load_abort();
      break;
    case ControlOp::kCatalog:
      pb.mutable_catalog()->set_ring_epoch(request.ring_epoch);
      break;
  }
  *head = static_cast<int>(request.op);
  return pb.SerializeAsString();
}

StatusOr<ControlRequest> DecodeControlRequest(int head,
                                              const std::string& body) {
  pb::ControlRequest pb;
  if (!pb.ParseFromString(body)) return Bad("the body does not parse");
  if (pb.op_case() == pb::ControlRequest::OP_NOT_SET) {
    return Bad("no operation");
  }
  if (static_cast<int>(pb.op_case()) != head) {
    return Bad("head " + std::to_string(head) + " but operation " +
               std::to_string(static_cast<int>(pb.op_case())));
  }
  ControlRequest r;
  r.op = static_cast<ControlOp>(head);
  switch (r.op) {
    case ControlOp::kRegisterTable:
      return FromPb(pb.register_table());
    case ControlOp::kRegisterDense:
      return FromPb(pb.register_dense());
    case ControlOp::kSave:
    case ControlOp::kLoad:
      r.dir = r.op == ControlOp::kSave ? pb.save().dir() : pb.load().dir();
      if (r.dir.empty()) return Bad("empty directory");
      PS_RETURN_IF_ERROR(CheckText("directory", r.dir));
      break;
    case ControlOp::kVersion:
    case ControlOp::kLoadCommit:
    case ControlOp::kLoadAbort:
      break;
    case ControlOp::kCatalog:
      r.ring_epoch = pb.catalog().ring_epoch();
      break;
  }
  return r;
}

std::string EncodeControlReply(const ControlReply& reply) {
  pb::ControlReply pb;
  pb.set_code(static_cast<int>(reply.status.code()));
  pb.set_message(reply.status.message());
  pb.set_version(reply.version);
  pb.set_ring_epoch(reply.ring_epoch);
  for (const ControlRequest& r : reply.registrations) {
    if (r.op == ControlOp::kRegisterTable) ToPb(r, pb.add_tables());
    if (r.op == ControlOp::kRegisterDense) ToPb(r, pb.add_dense());
  }
  return pb.SerializeAsString();
}

StatusOr<ControlReply> DecodeControlReply(const std::string& body) {
  pb::ControlReply pb;
  if (!pb.ParseFromString(body)) {
    return Status::Corruption("malformed model control reply");
  }
  if (pb.code() < static_cast<int>(Status::Code::kOk) ||
      pb.code() > static_cast<int>(Status::Code::kInternal)) {
    return Status::Corruption("model control reply with unknown code " +
                              std::to_string(pb.code()));
  }
  ControlReply r;
  const auto code = static_cast<Status::Code>(pb.code());
  if (code != Status::Code::kOk) {
    // An error without a message would read as nothing in a log.
    r.status =
        Status(code, pb.message().empty() ? "(no message)" : pb.message());
  }
  r.version = pb.version();
  r.ring_epoch = pb.ring_epoch();
  for (const pb::RegisterTable& t : pb.tables()) {
    auto reg = FromPb(t);
    if (!reg.ok()) return reg.status();
    r.registrations.push_back(std::move(reg.value()));
  }
  for (const pb::RegisterDense& d : pb.dense()) {
    auto reg = FromPb(d);
    if (!reg.ok()) return reg.status();
    r.registrations.push_back(std::move(reg.value()));
  }
  return r;
}

}  // namespace model
}  // namespace ps
