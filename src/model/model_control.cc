#include "model/model_control.h"

#include <iterator>

#include "model_control.pb.h"

namespace ps {
namespace model {

namespace pb = ::ember::model;

const char* OpName(ControlOp op) {
  // By the op's value, 1 to 7 (0 is none).
  static const char* const kNames[] = {
      "control", "RegisterTable", "RegisterDense", "Save",
      "Load",    "version",       "Load (commit)", "Load (abort)"};
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
        Same(pb::ControlRequest::kLoadAbort, ControlOp::kLoadAbort),
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

}  // namespace

int64_t DenseElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string EncodeControlRequest(const ControlRequest& request, int* head) {
  pb::ControlRequest pb;
  switch (request.op) {
    case ControlOp::kRegisterTable: {
      pb::RegisterTable* t = pb.mutable_register_table();
      t->set_name(request.name);
      t->set_dim(request.dim);
      t->set_initializer(request.initializer);
      t->set_optimizer(request.optimizer);
      t->set_consistency(request.consistency);
      break;
    }
    case ControlOp::kRegisterDense: {
      pb::RegisterDense* d = pb.mutable_register_dense();
      d->set_name(request.name);
      for (int64_t s : request.shape) d->add_shape(s);
      d->set_optimizer(request.optimizer);
      d->set_consistency(request.consistency);
      break;
    }
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
    case ControlOp::kRegisterTable: {
      const pb::RegisterTable& t = pb.register_table();
      r.name = t.name();
      r.dim = t.dim();
      r.initializer = t.initializer();
      r.optimizer = t.optimizer();
      r.consistency = t.consistency();
      PS_RETURN_IF_ERROR(CheckName(r.name));
      if (r.dim < 1) return Bad("dim " + std::to_string(r.dim));
      PS_RETURN_IF_ERROR(CheckText("initializer", r.initializer));
      break;
    }
    case ControlOp::kRegisterDense: {
      const pb::RegisterDense& d = pb.register_dense();
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
      break;
    }
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
  }
  if (r.op == ControlOp::kRegisterTable || r.op == ControlOp::kRegisterDense) {
    PS_RETURN_IF_ERROR(CheckText("optimizer", r.optimizer));
    PS_RETURN_IF_ERROR(CheckText("consistency", r.consistency));
  }
  return r;
}

std::string EncodeControlReply(const ControlReply& reply) {
  pb::ControlReply pb;
  pb.set_code(static_cast<int>(reply.status.code()));
  pb.set_message(reply.status.message());
  pb.set_version(reply.version);
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
  return r;
}

}  // namespace model
}  // namespace ps
