// The model layer's keys: rows and dense chunks spread evenly over servers
// that own ps-lite's key ranges, and the server recovers IDs exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "model/model_protocol.h"
#include "partition/key_ring.h"
#include "util/mix.h"

namespace ps {
namespace {

std::vector<int> ServerIds(int n) {
  std::vector<int> ids;
  for (int r = 0; r < n; ++r) ids.push_back(8 + 2 * r);
  return ids;
}

// The most loaded server's row count over the mean.
double Balance(const KeyRing& ring, const std::vector<uint64_t>& keys) {
  std::vector<size_t> counts(ring.num_servers(), 0);
  for (uint64_t k : keys) ++counts[ring.OwnerIndex(k)];
  const double mean = static_cast<double>(keys.size()) / ring.num_servers();
  return *std::max_element(counts.begin(), counts.end()) / mean;
}

TEST(ModelKeysTest, RowIdsSurviveTheRoundTrip) {
  std::mt19937_64 rng(1);
  for (uint32_t table : {1u, 77u, 0xFFFFFFu}) {
    for (int i = 0; i < 10000; ++i) {
      const uint64_t id = i < 100 ? static_cast<uint64_t>(i) : rng();
      ASSERT_EQ(model::RowId(table, model::RowKey(table, id)), id);
    }
    EXPECT_EQ(model::RowId(table, model::RowKey(table, UINT64_MAX)),
              UINT64_MAX);
  }
}

TEST(ModelKeysTest, RowsSpreadEvenlyWhateverTheIds) {
  std::mt19937_64 rng(2);
  const uint32_t tables[] = {model::TableId("user"), model::TableId("item"),
                             model::TableId("ad")};
  for (int n = 2; n <= 8; ++n) {
    const KeyRing ring = KeyRing::EvenSplit(ServerIds(n), 1).value();
    for (uint32_t table : tables) {
      SCOPED_TRACE(std::to_string(n) + " servers, table " +
                   std::to_string(table));
      for (size_t count : {size_t{1000}, size_t{100000}}) {
        std::vector<uint64_t> sequential, hashed, slotted, strided;
        for (size_t i = 0; i < count; ++i) {
          sequential.push_back(model::RowKey(table, i));
          hashed.push_back(model::RowKey(table, rng()));
          // Field-slotted IDs (slot << 48 | value) and strided IDs.
          slotted.push_back(model::RowKey(table, (uint64_t{i % 7} << 48) | i));
          strided.push_back(model::RowKey(table, i * 1000));
        }
        EXPECT_LE(Balance(ring, sequential), 1.10);
        EXPECT_LE(Balance(ring, slotted), 1.10);
        EXPECT_LE(Balance(ring, strided), 1.10);
        if (count >= 100000) {
          EXPECT_LE(Balance(ring, hashed), 1.10);
        }
      }
    }
  }
}

TEST(ModelKeysTest, DenseChunksSitAtEqualSpacing) {
  for (uint64_t chunks : {1u, 2u, 3u, 5u, 16u, 61u, 1000u}) {
    const uint32_t table = model::TableId("w" + std::to_string(chunks));
    std::vector<uint64_t> keys;
    for (uint64_t c = 0; c < chunks; ++c) {
      keys.push_back(model::DenseKey(table, c, chunks));
      EXPECT_EQ(model::DenseChunk(table, keys.back(), chunks), c);
    }
    // Keys that name no chunk.
    EXPECT_EQ(model::DenseChunk(table, keys[0] + 1, chunks), chunks);
    EXPECT_EQ(model::DenseChunk(table, model::DenseKey(table, chunks, chunks),
                                chunks),
              chunks);
    for (int n = 1; n <= 8; ++n) {
      const KeyRing ring = KeyRing::EvenSplit(ServerIds(n), 1).value();
      std::vector<size_t> counts(n, 0);
      for (uint64_t k : keys) ++counts[ring.OwnerIndex(k)];
      const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
      EXPECT_LE(*hi - *lo, 1u) << chunks << " chunks, " << n << " servers";
    }
  }
}

}  // namespace
}  // namespace ps
