#include "model/embedding_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ps {
namespace model {
namespace {

using Code = Status::Code;

constexpr uint64_t kMaxId = std::numeric_limits<uint64_t>::max();

std::unique_ptr<EmbeddingTable> MakeTable(int dim, const std::string& init,
                                          const std::string& optimizer,
                                          uint32_t table_id = 3) {
  StatusOr<Initializer> i = Initializer::Parse(init);
  EXPECT_TRUE(i.ok()) << i.status();
  StatusOr<std::unique_ptr<Optimizer>> o = Optimizer::Parse(optimizer);
  EXPECT_TRUE(o.ok()) << o.status();
  StatusOr<std::unique_ptr<EmbeddingTable>> t = EmbeddingTable::Create(
      "emb", table_id, dim, i.value(), std::move(o).value());
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

std::vector<float> Initial(const EmbeddingTable& t, uint64_t id) {
  std::vector<float> v(t.dim());
  t.initializer().Fill(t.table_id(), id, v.data(), t.dim());
  return v;
}

std::vector<float> LookupOne(EmbeddingTable* t, uint64_t id) {
  std::vector<float> v(t->dim());
  EXPECT_TRUE(t->Lookup(&id, 1, v.data()).ok());
  return v;
}

// id -> weights followed by slots.
std::map<uint64_t, std::vector<float>> Snapshot(const EmbeddingTable& t) {
  std::map<uint64_t, std::vector<float>> rows;
  t.ForEachRow([&](uint64_t id, const float* w, const float* s) {
    std::vector<float> row(w, w + t.dim());
    row.insert(row.end(), s, s + t.slot_floats());
    EXPECT_TRUE(rows.emplace(id, std::move(row)).second) << "twice: " << id;
  });
  return rows;
}

TEST(EmbeddingTableTest, CreateRejectsBadDimAndMissingOptimizer) {
  auto opt = [] { return std::move(Optimizer::Parse("sgd(lr=1)")).value(); };
  EXPECT_EQ(
      EmbeddingTable::Create("t", 0, 0, Initializer(), opt()).status().code(),
      Code::kInvalidArgument);
  EXPECT_EQ(
      EmbeddingTable::Create("t", 0, -4, Initializer(), opt()).status().code(),
      Code::kInvalidArgument);
  EXPECT_EQ(EmbeddingTable::Create("t", 0, EmbeddingTable::kMaxDim + 1,
                                   Initializer(), opt())
                .status()
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(
      EmbeddingTable::Create("t", 0, 4, Initializer(), nullptr).status().code(),
      Code::kInvalidArgument);
}

TEST(EmbeddingTableTest, LookupCreatesRowsFromTheInitializerLazily) {
  auto table = MakeTable(8, "normal(0,0.1)", "adagrad(lr=0.1)", 11);
  EXPECT_EQ(table->size(), 0u);
  const uint64_t ids[] = {5, 900, 5, 77};
  std::vector<float> out(4 * 8, -1.0f);
  ASSERT_TRUE(table->Lookup(ids, 4, out.data()).ok());
  EXPECT_EQ(table->size(), 3u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(std::vector<float>(out.begin() + i * 8, out.begin() + i * 8 + 8),
              Initial(*table, ids[i]))
        << i;
  }
  // Slots come from InitSlots (Adagrad: initial_accumulator = 0).
  for (const auto& [id, row] : Snapshot(*table)) {
    for (int j = 8; j < 16; ++j) EXPECT_EQ(row[j], 0.0f) << id;
  }
  // Looking up again creates nothing and returns the same values.
  std::vector<float> again(4 * 8);
  ASSERT_TRUE(table->Lookup(ids, 4, again.data()).ok());
  EXPECT_EQ(again, out);
  EXPECT_EQ(table->size(), 3u);
}

TEST(EmbeddingTableTest, TablesWithOneSpecAgreeOnLazyRows) {
  // Two servers creating the same rows in different orders.
  auto a = MakeTable(4, "uniform(-1,1)", "sgd(lr=1)", 2);
  auto b = MakeTable(4, "uniform(-1,1)", "sgd(lr=1)", 2);
  auto other_table = MakeTable(4, "uniform(-1,1)", "sgd(lr=1)", 3);
  for (uint64_t id = 0; id < 50; ++id) LookupOne(a.get(), id);
  for (uint64_t id = 50; id-- > 0;) LookupOne(b.get(), id * 7 % 50);
  EXPECT_EQ(Snapshot(*a), Snapshot(*b));
  EXPECT_NE(LookupOne(a.get(), 1), LookupOne(other_table.get(), 1));
}

TEST(EmbeddingTableTest, FindCreatesNothingAndReportsMissing) {
  auto table = MakeTable(3, "constant(2)", "sgd(lr=1)");
  const uint64_t present[] = {10, 20};
  std::vector<float> out(6);
  ASSERT_TRUE(table->Lookup(present, 2, out.data()).ok());
  const uint64_t ids[] = {10, 15, 20, 25};
  std::vector<float> found(12, -1.0f);
  std::vector<size_t> missing = {99};
  EXPECT_EQ(table->Find(ids, 4, found.data(), &missing), 2u);
  EXPECT_EQ(missing, (std::vector<size_t>{1, 3}));
  EXPECT_EQ(found, (std::vector<float>{2, 2, 2, 0, 0, 0, 2, 2, 2, 0, 0, 0}));
  EXPECT_EQ(table->size(), 2u);
  EXPECT_TRUE(table->Contains(10));
  EXPECT_FALSE(table->Contains(15));
  EXPECT_EQ(table->Find(ids, 4, found.data(), nullptr), 2u);
}

TEST(EmbeddingTableTest, ApplyGradientsCreatesMissingRowsFirst) {
  auto table = MakeTable(4, "uniform(-1,1)", "sgd(lr=0.5)");
  const uint64_t id = 1234;
  const float g[4] = {1, -2, 0, 4};
  ASSERT_TRUE(table->ApplyGradients(&id, 1, g).ok());
  EXPECT_EQ(table->size(), 1u);
  const std::vector<float> init = Initial(*table, id);
  const std::vector<float> got = LookupOne(table.get(), id);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(got[j], init[j] - 0.5f * g[j]) << j;
}

TEST(EmbeddingTableTest, DuplicateIdsAreSummedThenUpdatedOnce) {
  // Adam is not additive: three separate updates would differ from one
  // update with the sum, and the powers would advance three times.
  const int dim = 5;
  auto merged = MakeTable(dim, "normal(0,1)", "adam(lr=0.01)");
  auto summed = MakeTable(dim, "normal(0,1)", "adam(lr=0.01)");
  auto separate = MakeTable(dim, "normal(0,1)", "adam(lr=0.01)");
  const std::vector<uint64_t> ids = {8, 3, 8, kMaxId, 8, 3};
  std::vector<float> grads(ids.size() * dim);
  for (size_t k = 0; k < grads.size(); ++k) {
    grads[k] = 0.37f * static_cast<float>(k % 7) - 1.1f + 1e-3f * k;
  }
  ASSERT_TRUE(
      merged->ApplyGradients(ids.data(), ids.size(), grads.data()).ok());

  // By hand: the sums in batch order, first appearance order 8, 3, kMaxId.
  auto sum_of = [&](uint64_t id) {
    std::vector<float> s;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] != id) continue;
      if (s.empty()) {
        s.assign(grads.begin() + i * dim, grads.begin() + (i + 1) * dim);
      } else {
        for (int j = 0; j < dim; ++j) s[j] += grads[i * dim + j];
      }
    }
    return s;
  };
  const std::vector<uint64_t> unique = {8, 3, kMaxId};
  std::vector<float> unique_grads;
  for (uint64_t id : unique) {
    const std::vector<float> s = sum_of(id);
    unique_grads.insert(unique_grads.end(), s.begin(), s.end());
  }
  ASSERT_TRUE(
      summed->ApplyGradients(unique.data(), unique.size(), unique_grads.data())
          .ok());
  EXPECT_EQ(Snapshot(*merged), Snapshot(*summed));

  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(separate->ApplyGradients(&ids[i], 1, &grads[i * dim]).ok());
  }
  EXPECT_NE(Snapshot(*merged), Snapshot(*separate));
  // Row 8 saw one update: its bias-correction powers advanced once.
  EXPECT_EQ(Snapshot(*merged)[8][dim + 2 * dim], 0.9f);
}

TEST(EmbeddingTableTest, ExtremeIdsAreOrdinaryKeys) {
  // 0 and ~0 and IDs whose halves look like the index's empty marker.
  const std::vector<uint64_t> ids = {
      0, kMaxId, 0xFFFFFFFFull, 0xFFFFFFFF00000000ull, 1, kMaxId - 1};
  auto table = MakeTable(2, "uniform(-1,1)", "sgd(lr=1)");
  std::vector<float> out(ids.size() * 2);
  ASSERT_TRUE(table->Lookup(ids.data(), ids.size(), out.data()).ok());
  EXPECT_EQ(table->size(), ids.size());
  for (uint64_t id : ids) {
    EXPECT_TRUE(table->Contains(id)) << id;
    EXPECT_EQ(LookupOne(table.get(), id), Initial(*table, id)) << id;
  }
  EXPECT_EQ(table->size(), ids.size());
  const float g[2] = {1, 1};
  ASSERT_TRUE(table->ApplyGradients(&ids[1], 1, g).ok());
  const std::vector<float> init = Initial(*table, kMaxId);
  EXPECT_EQ(LookupOne(table.get(), kMaxId),
            (std::vector<float>{init[0] - 1, init[1] - 1}));
  EXPECT_EQ(LookupOne(table.get(), 0), Initial(*table, 0));
  std::map<uint64_t, std::vector<float>> rows = Snapshot(*table);
  EXPECT_EQ(rows.size(), ids.size());
  for (uint64_t id : ids) EXPECT_EQ(rows.count(id), 1u) << id;
}

TEST(EmbeddingTableTest, GrowingThroughManyChunksAndRehashesKeepsValues) {
  // dim 64 + 64 Adagrad slots = 512 bytes a row: 4096 rows a chunk, so
  // 60000 rows span 15 chunks, and the index doubles 13 times.
  const int dim = 64;
  auto table = MakeTable(dim, "uniform(-1,1)", "sgd(lr=1)");
  const size_t rows = 60000;
  auto id_of = [](size_t r) { return r * 0x9e3779b97f4a7c15ULL + 17; };
  std::vector<uint64_t> batch;
  std::vector<float> out;
  std::vector<float> grads;
  for (size_t begin = 0; begin < rows; begin += 1000) {
    batch.clear();
    for (size_t r = begin; r < begin + 1000; ++r) batch.push_back(id_of(r));
    out.resize(batch.size() * dim);
    ASSERT_TRUE(table->Lookup(batch.data(), batch.size(), out.data()).ok());
    // Every row of even r gets one gradient of ones, on its creation batch.
    std::vector<uint64_t> even;
    for (size_t r = begin; r < begin + 1000; r += 2) even.push_back(id_of(r));
    grads.assign(even.size() * dim, 1.0f);
    ASSERT_TRUE(
        table->ApplyGradients(even.data(), even.size(), grads.data()).ok());
  }
  EXPECT_EQ(table->size(), rows);
  std::vector<float> got(dim);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<float> want = Initial(*table, id_of(r));
    if (r % 2 == 0) {
      for (float& w : want) w -= 1.0f;
    }
    const uint64_t id = id_of(r);
    ASSERT_EQ(table->Find(&id, 1, got.data(), nullptr), 1u) << r;
    ASSERT_EQ(got, want) << "row " << r;
  }
  EXPECT_EQ(table->size(), rows);
}

TEST(EmbeddingTableTest, MemoryStaysWithinAThirdOverRawBytes) {
  const int dim = 16;
  auto table = MakeTable(dim, "zeros", "adagrad(lr=0.1)");
  EXPECT_EQ(table->slot_floats(), dim);
  // An empty table is small: no arena yet, a 16-slot index.
  EXPECT_LT(table->MemoryBytes(), 1024u);
  const size_t rows = 1000000;
  std::vector<uint64_t> ids(4096);
  std::vector<float> out(ids.size() * dim);
  for (size_t begin = 0; begin < rows; begin += ids.size()) {
    const size_t n = std::min(ids.size(), rows - begin);
    for (size_t i = 0; i < n; ++i) ids[i] = (begin + i) * 2654435761ULL;
    ASSERT_TRUE(table->Lookup(ids.data(), n, out.data()).ok());
  }
  ASSERT_EQ(table->size(), rows);
  EXPECT_EQ(table->RawBytes(), rows * (dim + dim) * sizeof(float));
  const double ratio =
      static_cast<double>(table->MemoryBytes()) / table->RawBytes();
  EXPECT_GE(ratio, 1.0);
  EXPECT_LE(ratio, 1.3) << "MemoryBytes " << table->MemoryBytes();
  // A small table stays small: its first chunk grows by doubling.
  auto small = MakeTable(dim, "zeros", "adagrad(lr=0.1)");
  for (uint64_t id = 0; id < 100; ++id) LookupOne(small.get(), id);
  EXPECT_LT(small->MemoryBytes(), 2 * small->RawBytes() + 4096);
}

TEST(EmbeddingTableTest, InsertRowAndForEachRowRoundTrip) {
  const int dim = 6;
  auto source = MakeTable(dim, "normal(0,1)", "ftrl(alpha=0.1,l1=0.01)");
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 3000; ++i) ids.push_back(i * i * 31 + i);
  ids.push_back(kMaxId);
  std::vector<float> grads(ids.size() * dim);
  for (size_t k = 0; k < grads.size(); ++k) {
    grads[k] = std::sin(static_cast<float>(k));
  }
  ASSERT_TRUE(
      source->ApplyGradients(ids.data(), ids.size(), grads.data()).ok());

  auto restored = MakeTable(dim, "normal(0,1)", "ftrl(alpha=0.1,l1=0.01)");
  size_t visited = 0;
  source->ForEachRow([&](uint64_t id, const float* w, const float* s) {
    ++visited;
    EXPECT_TRUE(restored->InsertRow(id, w, s).ok()) << id;
  });
  EXPECT_EQ(visited, ids.size());
  EXPECT_EQ(restored->size(), source->size());
  EXPECT_EQ(Snapshot(*restored), Snapshot(*source));

  // Both continue identically.
  ASSERT_TRUE(
      source->ApplyGradients(ids.data(), ids.size(), grads.data()).ok());
  ASSERT_TRUE(
      restored->ApplyGradients(ids.data(), ids.size(), grads.data()).ok());
  EXPECT_EQ(Snapshot(*restored), Snapshot(*source));

  // A present row is refused and left alone.
  const std::vector<float> zeros(dim + restored->slot_floats(), 0.0f);
  const Status dup = restored->InsertRow(ids[0], zeros.data(), zeros.data());
  EXPECT_EQ(dup.code(), Code::kInvalidArgument) << dup;
  EXPECT_EQ(Snapshot(*restored), Snapshot(*source));

  // Null slots mean fresh optimizer state.
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(restored->InsertRow(42424242, w.data(), nullptr).ok());
  const std::vector<float> row = Snapshot(*restored)[42424242];
  EXPECT_EQ(std::vector<float>(row.begin(), row.begin() + dim), w);
  for (size_t j = dim; j < row.size(); ++j) EXPECT_EQ(row[j], 0.0f);
}

TEST(EmbeddingTableTest, NonFiniteGradientsAreRejectedBeforeAnyChange) {
  auto table = MakeTable(2, "constant(1)", "sgd(lr=1)");
  const uint64_t existing = 1;
  LookupOne(table.get(), existing);
  const uint64_t ids[] = {existing, 2, 3};
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    const float grads[] = {1, 1, 1, 1, 1, bad};
    const Status s = table->ApplyGradients(ids, 3, grads);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("id 3"), std::string::npos) << s;
    EXPECT_EQ(table->size(), 1u);  // Rows 2 and 3 were not created.
    EXPECT_EQ(LookupOne(table.get(), existing), (std::vector<float>{1, 1}));
  }
  EXPECT_TRUE(table->ApplyGradients(ids, 0, nullptr).ok());
}

TEST(EmbeddingTableTest, ReserveAvoidsLaterRehashesAndKeepsRows) {
  auto table = MakeTable(4, "uniform(-1,1)", "sgd(lr=1)");
  for (uint64_t id = 0; id < 10; ++id) LookupOne(table.get(), id);
  table->Reserve(100000);
  const size_t reserved = table->MemoryBytes();
  for (uint64_t id = 0; id < 10; ++id) {
    EXPECT_EQ(LookupOne(table.get(), id), Initial(*table, id));
  }
  for (uint64_t id = 10; id < 75000; ++id) LookupOne(table.get(), id);
  // Only arena chunks were added: the index did not grow.
  const size_t arena = (table->size() * 4 * sizeof(float));
  EXPECT_LE(table->MemoryBytes(), reserved + arena + (2 << 20));
}

}  // namespace
}  // namespace model
}  // namespace ps

namespace ps {
namespace model {
namespace {

// Every row of a snapshot is handed out exactly once, with its contents at
// BeginSnapshot, while gradients change old rows, new rows are created and
// the index is rehashed between slices; rows made after it are left out.
TEST(EmbeddingTableSnapshotTest, HandsOutEveryRowOnceAsItWasAtTheStart) {
  auto t = MakeTable(4, "normal(0,1)", "adagrad(lr=0.5)");
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 3000; ++i) ids.push_back(i * 7919 + 1);
  std::vector<float> scratch(ids.size() * 4);
  ASSERT_TRUE(t->Lookup(ids.data(), ids.size(), scratch.data()).ok());
  std::map<uint64_t, std::vector<float>> before;  // weights and slots
  t->ForEachRow([&](uint64_t id, const float* w, const float* s) {
    std::vector<float> row(w, w + 4);
    row.insert(row.end(), s, s + t->slot_floats());
    before[id] = row;
  });
  ASSERT_EQ(before.size(), ids.size());

  t->BeginSnapshot();
  EXPECT_EQ(t->snapshot_rows(), ids.size());
  std::map<uint64_t, std::vector<float>> handed;
  auto collect = [&](const EmbeddingTable::RowBatch& b) {
    ASSERT_EQ(b.weights.size(), b.ids.size() * 4);
    ASSERT_EQ(b.slots.size(), b.ids.size() * t->slot_floats());
    for (size_t i = 0; i < b.ids.size(); ++i) {
      std::vector<float> row(b.weights.begin() + i * 4,
                             b.weights.begin() + (i + 1) * 4);
      row.insert(row.end(), b.slots.begin() + i * t->slot_floats(),
                 b.slots.begin() + (i + 1) * t->slot_floats());
      EXPECT_TRUE(handed.emplace(b.ids[i], row).second)
          << "row " << b.ids[i] << " handed out twice";
    }
  };
  const size_t index_before = t->MemoryBytes();
  uint64_t next_new = 1u << 30;
  bool more = true;
  for (int step = 0; more; ++step) {
    // Change some old rows (some twice) and create new ones: enough new
    // ones that the index doubles during the walk (which then starts over),
    // not so many that it doubles faster than the walk goes.
    std::vector<uint64_t> touch;
    for (int k = 0; k < 40; ++k)
      touch.push_back(ids[(step * 131 + k * 17) % ids.size()]);
    for (int k = 0; k < 60; ++k) touch.push_back(next_new++);
    std::vector<float> grads(touch.size() * 4, 0.25f);
    ASSERT_TRUE(
        t->ApplyGradients(touch.data(), touch.size(), grads.data()).ok());
    EmbeddingTable::RowBatch batch;
    t->TakePreservedRows(&batch);
    more = t->NextSnapshotRows(256, &batch);
    collect(batch);
  }
  EmbeddingTable::RowBatch rest;
  t->TakePreservedRows(&rest);
  collect(rest);
  t->EndSnapshot();
  EXPECT_GT(t->MemoryBytes(), index_before);  // the index did grow
  EXPECT_EQ(handed, before);
  EXPECT_GT(t->size(), ids.size());
  // Without a snapshot, nothing is handed out or preserved.
  EmbeddingTable::RowBatch none;
  EXPECT_FALSE(t->NextSnapshotRows(1 << 20, &none));
  ASSERT_TRUE(t->ApplyGradients(ids.data(), 1, scratch.data()).ok());
  t->TakePreservedRows(&none);
  EXPECT_TRUE(none.ids.empty());
}

}  // namespace
}  // namespace model
}  // namespace ps
