// The model layer's control messages: what encodes decodes back, and bytes
// that are not a well-formed request are refused with kCorruption.
#include "model/model_control.h"

#include <gtest/gtest.h>

#include <string>

namespace ps {
namespace model {
namespace {

ControlRequest Table() {
  ControlRequest r;
  r.op = ControlOp::kRegisterTable;
  r.name = std::string("emb\t\xff", 5);  // Any bytes: tabs, not UTF-8.
  r.dim = 16;
  r.initializer = "normal(0,0.01)";
  r.optimizer = "adagrad(lr=0.05)";
  r.consistency = "ssp:2";
  return r;
}

ControlRequest Dense() {
  ControlRequest r;
  r.op = ControlOp::kRegisterDense;
  r.name = "w";
  r.shape = {3, 4, 5};
  r.optimizer = "sgd(lr=0.1)";
  r.consistency = "bsp";
  return r;
}

StatusOr<ControlRequest> RoundTrip(const ControlRequest& r) {
  int head = 0;
  std::string body = EncodeControlRequest(r, &head);
  EXPECT_EQ(head, static_cast<int>(r.op));
  return DecodeControlRequest(head, body);
}

TEST(ModelControlTest, RegistrationsRoundTrip) {
  auto t = RoundTrip(Table());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->op, ControlOp::kRegisterTable);
  EXPECT_EQ(t->name, Table().name);
  EXPECT_EQ(t->dim, 16);
  EXPECT_EQ(t->initializer, "normal(0,0.01)");
  EXPECT_EQ(t->optimizer, "adagrad(lr=0.05)");
  EXPECT_EQ(t->consistency, "ssp:2");

  auto d = RoundTrip(Dense());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->op, ControlOp::kRegisterDense);
  EXPECT_EQ(d->shape, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(DenseElements(d->shape), 60);
  EXPECT_EQ(d->consistency, "bsp");

  ControlRequest scalar = Dense();
  scalar.shape.clear();
  auto s = RoundTrip(scalar);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(DenseElements(s->shape), 1);
}

TEST(ModelControlTest, EveryOperationRoundTrips) {
  for (ControlOp op :
       {ControlOp::kSave, ControlOp::kLoad, ControlOp::kVersion,
        ControlOp::kLoadCommit, ControlOp::kLoadAbort, ControlOp::kCatalog}) {
    ControlRequest r;
    r.op = op;
    r.dir = "/data/checkpoint";
    r.ring_epoch = 7;
    auto back = RoundTrip(r);
    ASSERT_TRUE(back.ok()) << OpName(op) << ": " << back.status();
    EXPECT_EQ(back->op, op);
    if (op == ControlOp::kSave || op == ControlOp::kLoad) {
      EXPECT_EQ(back->dir, "/data/checkpoint");
    } else {
      EXPECT_EQ(back->dir, "");  // Only save and load carry a directory.
    }
    // Only a catalog request carries the ring it is asked under.
    EXPECT_EQ(back->ring_epoch, op == ControlOp::kCatalog ? 7u : 0u);
  }
}

TEST(ModelControlTest, AHeadThatNamesAnotherOperationIsRefused) {
  int head = 0;
  std::string body = EncodeControlRequest(Table(), &head);
  auto r = DecodeControlRequest(static_cast<int>(ControlOp::kSave), body);
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status();
  r = DecodeControlRequest(99, body);
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status();
}

TEST(ModelControlTest, BytesThatAreNotARequestAreRefused) {
  // The old tab-separated text, an empty body (no operation), a truncated
  // message, and a field with the wrong wire type.
  int head = 0;
  std::string table = EncodeControlRequest(Table(), &head);
  for (const std::string& body :
       {std::string("emb\t8\tzeros\tsgd(lr=1)\tasp"), std::string(),
        table.substr(0, table.size() / 2), std::string("\x0d\x01\x02", 3)}) {
    auto r = DecodeControlRequest(head, body);
    EXPECT_EQ(r.status().code(), Status::Code::kCorruption)
        << "body of " << body.size() << " bytes: " << r.status();
  }
}

TEST(ModelControlTest, OutOfRangeFieldsAreRefused) {
  auto refused = [](const ControlRequest& r, const std::string& why) {
    auto back = RoundTrip(r);
    EXPECT_EQ(back.status().code(), Status::Code::kCorruption)
        << why << ": " << back.status();
  };
  ControlRequest r = Table();
  r.name.clear();
  refused(r, "empty name");
  r = Table();
  r.dim = 0;
  refused(r, "dim 0");
  r.dim = -5;
  refused(r, "negative dim");
  r = Table();
  r.optimizer.assign(kMaxControlText + 1, 'x');
  refused(r, "long optimizer");
  r = Dense();
  r.shape = {4, 0};
  refused(r, "zero extent");
  r.shape = {int64_t{1} << 21, int64_t{1} << 21};
  refused(r, "2^42 elements");
  r.shape = {INT64_MAX, INT64_MAX};
  refused(r, "a product that overflows");
  r.shape.assign(kMaxShapeRank + 1, 1);
  refused(r, "rank");
  r = Dense();
  r.op = ControlOp::kSave;
  r.dir.clear();
  refused(r, "empty directory");
  // At the limits: accepted.
  r = Dense();
  r.shape = {int64_t{1} << 20, int64_t{1} << 20};
  EXPECT_TRUE(RoundTrip(r).ok());
  r = Table();
  r.name.assign(kMaxControlText, 'n');
  EXPECT_TRUE(RoundTrip(r).ok());
}

TEST(ModelControlTest, RepliesCarryTheServersStatusAndVersion) {
  ControlReply ok;
  ok.version = 1234567890123ull;
  auto back = DecodeControlReply(EncodeControlReply(ok));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->status.ok());
  EXPECT_EQ(back->version, 1234567890123ull);

  ControlReply err;
  err.status = Status::Corruption("checksum mismatch");
  back = DecodeControlReply(EncodeControlReply(err));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->status.code(), Status::Code::kCorruption);
  EXPECT_EQ(back->status.message(), "checksum mismatch");
}

// A catalog (a server that joined asks its peers for their registrations)
// carries every registration, checked as a request's; one that is
// malformed makes the reply malformed.
TEST(ModelControlTest, ACatalogCarriesRegistrationsAndTheRingEpoch) {
  ControlReply catalog;
  catalog.version = 42;
  catalog.ring_epoch = 3;
  catalog.registrations = {Table(), Dense()};
  auto back = DecodeControlReply(EncodeControlReply(catalog));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->version, 42u);
  EXPECT_EQ(back->ring_epoch, 3u);
  ASSERT_EQ(back->registrations.size(), 2u);
  EXPECT_EQ(back->registrations[0].op, ControlOp::kRegisterTable);
  EXPECT_EQ(back->registrations[0].name, Table().name);
  EXPECT_EQ(back->registrations[0].dim, 16);
  EXPECT_EQ(back->registrations[0].initializer, "normal(0,0.01)");
  EXPECT_EQ(back->registrations[0].consistency, "ssp:2");
  EXPECT_EQ(back->registrations[1].op, ControlOp::kRegisterDense);
  EXPECT_EQ(back->registrations[1].shape, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(back->registrations[1].optimizer, "sgd(lr=0.1)");

  ControlRequest bad = Table();
  bad.dim = 0;
  catalog.registrations = {Dense(), bad};
  back = DecodeControlReply(EncodeControlReply(catalog));
  EXPECT_EQ(back.status().code(), Status::Code::kCorruption) << back.status();
  bad = Dense();
  bad.shape = {2, 0};
  catalog.registrations = {bad};
  back = DecodeControlReply(EncodeControlReply(catalog));
  EXPECT_EQ(back.status().code(), Status::Code::kCorruption) << back.status();
}

TEST(ModelControlTest, MalformedRepliesAreRefused) {
  EXPECT_EQ(DecodeControlReply("OK\t12").status().code(),
            Status::Code::kCorruption);
  // Field 1 (code) = 42: no such Status code.
  EXPECT_EQ(DecodeControlReply(std::string("\x08\x2a", 2)).status().code(),
            Status::Code::kCorruption);
  // An error code without a message still reads as an error.
  auto r = DecodeControlReply(std::string("\x08\x06", 2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code(), Status::Code::kCorruption);
  EXPECT_FALSE(r->status.message().empty());
}

}  // namespace
}  // namespace model
}  // namespace ps
