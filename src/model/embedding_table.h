// EmbeddingTable: a server's share of one embedding table, rows of `dim`
// floats keyed by 64-bit IDs, created lazily from an Initializer and updated
// in place by an Optimizer.
//
// Storage (seed 001's "tensor + index"):
//  - an arena of rows [dim weights | SlotFloats(dim) optimizer slots], in
//    chunks of about 2 MiB (a power of two rows each). The first chunk grows
//    by doubling until it reaches that size, so a small table stays small;
//    after that the arena only adds chunks: no per-row allocation, and rows
//    are never copied when the table grows. Chunks after the first are
//    carved from regions of up to 64 MiB of huge-page memory
//    (HugePageMemory): rows are read at random, and with 4 KiB pages each
//    one costs a TLB miss.
//  - an open-addressing index (linear probing, power-of-two capacity, load
//    at most 3/4) of packed 12-byte entries {id, row number}. Every uint64
//    is a valid ID (0 and ~0 included): an entry is empty when its row
//    number is ~0u, never by its ID. Rows are never removed. An index of
//    2 MiB or more is in huge-page memory too.
// At 10 million rows of dim 16 with Adagrad this costs about 1.16x the raw
// row bytes (RawBytes()); the index's share is at most 32 bytes per row, just
// after it doubles.
//
// A table holds at most 2^32 - 2 rows. Past that, the calls that create rows
// (Lookup(), InsertRow(), ApplyGradients()) return kUnavailable and change
// nothing.
//
// Thread-safety: not thread-safe, not even const methods against a
// mutating one (the scratch buffers of a call are members). The server calls
// a table from one thread, or under its own lock.
#ifndef PS_MODEL_EMBEDDING_TABLE_H_
#define PS_MODEL_EMBEDDING_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/initializer.h"
#include "model/optimizer.h"
#include "ps/status.h"
#include "util/huge_pages.h"

namespace ps {
namespace model {

class EmbeddingTable {
 public:
  // The largest dim accepted: a row of weights stays below 64 MiB.
  static constexpr int kMaxDim = 1 << 24;
  // The most rows a table holds (row numbers are 32-bit, ~0u marks empty).
  static constexpr size_t kMaxRows = 0xFFFFFFFEu;

  // Makes an empty table. `table_id` seeds the initializer (with each row's
  // ID), so replicas and restarts of a table agree on lazily created rows.
  // Returns kInvalidArgument if dim is not in [1, kMaxDim] or optimizer is
  // null.
  static StatusOr<std::unique_ptr<EmbeddingTable>> Create(
      std::string name, uint32_t table_id, int dim, Initializer initializer,
      std::unique_ptr<Optimizer> optimizer);

  EmbeddingTable(const EmbeddingTable&) = delete;
  EmbeddingTable& operator=(const EmbeddingTable&) = delete;
  ~EmbeddingTable();

  // Copies the weights of rows ids[0..n) to out[0..n*dim), row i at
  // out + i*dim. Missing rows are created first, in order of first
  // appearance: weights from the initializer, slots from
  // Optimizer::InitSlots. Duplicate IDs are fine. Both arrays are borrowed
  // for the call. kUnavailable, creating nothing, if the new rows would
  // exceed kMaxRows.
  [[nodiscard]] Status Lookup(const uint64_t* ids, size_t n, float* out);

  // Like Lookup() but creates nothing: the rows of absent IDs are left
  // zero-filled in `out`. If `missing` is not null it is replaced by the
  // positions i (indices into ids, ascending) of the absent IDs. Returns the
  // number of IDs found.
  size_t Find(const uint64_t* ids, size_t n, float* out,
              std::vector<size_t>* missing) const;

  // Whether row `id` exists.
  bool Contains(uint64_t id) const;

  // Applies gradients grads[0..n*dim) (row i at grads + i*dim) to rows
  // ids[0..n). Gradients of a repeated ID are summed first, in their order
  // in the batch (g_first + g_second + ...), and the optimizer runs once per
  // distinct row, in order of first appearance. Missing rows are created
  // from the initializer first. Returns kInvalidArgument, changing nothing,
  // if a gradient is not finite; kUnavailable, changing nothing, if the new
  // rows would exceed kMaxRows. Both arrays are borrowed for the call.
  [[nodiscard]] Status ApplyGradients(const uint64_t* ids, size_t n,
                                      const float* grads);
  // The check ApplyGradients makes first: kInvalidArgument naming the first
  // gradient that is not finite.
  [[nodiscard]] Status CheckGradients(const uint64_t* ids, size_t n,
                                      const float* grads) const;

  // Adds row `id` with the given weights[0..dim) and slots
  // [0..SlotFloats(dim)); a null `slots` means Optimizer::InitSlots. For
  // restoring checkpoints. Returns kInvalidArgument if the row exists (the
  // table is unchanged), kUnavailable if the table is full.
  [[nodiscard]] Status InsertRow(uint64_t id, const float* weights,
                                 const float* slots);
  // Sets row `id` to weights[0..dim) and slots[0..SlotFloats(dim)),
  // creating it if absent: a copy of another server's row
  // (docs/replication.md). kUnavailable if the table is full.
  [[nodiscard]] Status PutRow(uint64_t id, const float* weights,
                              const float* slots);

  // Calls fn(id, weights, slots) once per row, in index order
  // (deterministic for a given history of calls, unrelated to ID order).
  // The pointers are valid during the call only; `fn` must not call back
  // into this table.
  void ForEachRow(const std::function<void(uint64_t id, const float* weights,
                                           const float* slots)>& fn) const;

  // ---- Snapshots: a checkpoint of a table in use ----
  //
  // BeginSnapshot() fixes the table's rows as they are now, without copying
  // them. Until EndSnapshot(), ApplyGradients first keeps the contents of
  // each snapshot row it is the first to change, which TakePreservedRows()
  // hands out, and NextSnapshotRows() hands out the others a slice at a time,
  // so that every row of the snapshot is handed out exactly once, with its
  // contents at BeginSnapshot(). Rows created after BeginSnapshot() are not
  // part of the snapshot. The table's other calls work as usual meanwhile;
  // callers hold the table's lock for each call, as for every other, so
  // they may write out what they were handed without it. Extra memory: a
  // bit per row, plus the preserved rows until they are taken.
  struct RowBatch {
    std::vector<uint64_t> ids;
    std::vector<float> weights;  // ids.size() * dim
    std::vector<float> slots;    // ids.size() * slot_floats
    void Clear() {
      ids.clear();
      weights.clear();
      slots.clear();
    }
  };
  void BeginSnapshot();
  // Appends to *out the snapshot rows not yet handed out among the next
  // `slots` slots of the index; returns false once every row of the
  // snapshot has been handed out (or no snapshot is under way). The walk
  // starts over (skipping the rows handed out) when the index has been
  // rehashed since the last call, so it ends once the table stops doubling
  // faster than the walk goes: 3/8 of `slots` new rows per call.
  bool NextSnapshotRows(size_t slots, RowBatch* out);
  // Appends the rows preserved since the last call to *out.
  void TakePreservedRows(RowBatch* out);
  void EndSnapshot();
  // The number of rows of the snapshot under way.
  size_t snapshot_rows() const { return snapshot_rows_; }

  // Makes room in the index for `rows` rows in total, so that filling the
  // table to that size rehashes no more. Allocates no arena.
  void Reserve(size_t rows);

  // The number of rows.
  size_t size() const { return num_rows_; }
  // Bytes allocated: arena chunks, index, and the reusable scratch buffers.
  size_t MemoryBytes() const;
  // size() * (dim + SlotFloats(dim)) * sizeof(float).
  size_t RawBytes() const { return num_rows_ * row_floats_ * sizeof(float); }

  const std::string& name() const { return name_; }
  uint32_t table_id() const { return table_id_; }
  int dim() const { return dim_; }
  int slot_floats() const { return slot_floats_; }
  const Initializer& initializer() const { return initializer_; }
  const Optimizer& optimizer() const { return *optimizer_; }

 private:
  // One index slot, 12 bytes: the ID is split so the struct needs only
  // 4-byte alignment.
  struct IndexEntry {
    uint32_t id_low;
    uint32_t id_high;
    uint32_t row;  // kEmptyRow if the slot is free.
  };
  static_assert(sizeof(IndexEntry) == 12, "index entries are packed");
  static constexpr uint32_t kEmptyRow = 0xFFFFFFFFu;

  EmbeddingTable(std::string name, uint32_t table_id, int dim,
                 Initializer initializer, std::unique_ptr<Optimizer> optimizer);

  static uint64_t HashId(uint64_t id);
  static uint64_t EntryId(const IndexEntry& e) {
    return (static_cast<uint64_t>(e.id_high) << 32) | e.id_low;
  }

  float* RowData(uint32_t row) {
    return chunks_[row >> chunk_shift_] +
           static_cast<size_t>(row & chunk_mask_) * row_floats_;
  }
  const float* RowData(uint32_t row) const {
    return chunks_[row >> chunk_shift_] +
           static_cast<size_t>(row & chunk_mask_) * row_floats_;
  }

  // The row of `id`, or kEmptyRow.
  uint32_t FindRow(uint64_t id) const;
  // The row of `id`, appending a new row (initializer + InitSlots, unless
  // `weights` is given: then weights and `slots`, or InitSlots if null) if
  // absent. CHECKs kMaxRows.
  uint32_t FindOrCreateRow(uint64_t id, const float* weights,
                           const float* slots, bool* created);
  // Makes the arena hold one more row.
  void GrowArena();
  // A full chunk's memory, from the last region or a new one.
  float* NewFullChunk();
  // Rebuilds the index with `capacity` slots (a power of two).
  void Rehash(size_t capacity);
  // Resolves ids[0..n) to rows_scratch_, creating missing rows.
  void ResolveRows(const uint64_t* ids, size_t n);
  // The number of distinct IDs in ids[0..n), not counting existing rows, for
  // the kMaxRows check. Uses the index only.
  size_t CountNewIds(const uint64_t* ids, size_t n);
  // kUnavailable if creating the absent rows of ids would pass kMaxRows.
  Status CheckRoom(const uint64_t* ids, size_t n);

  // Immutable after construction.
  const std::string name_;
  const uint32_t table_id_;
  const int dim_;
  const Initializer initializer_;
  const std::unique_ptr<Optimizer> optimizer_;
  const int slot_floats_;
  const size_t row_floats_;  // dim_ + slot_floats_.
  int chunk_shift_;          // A full chunk holds 1 << chunk_shift_ rows.
  uint32_t chunk_mask_;

  // Arena: chunks_[0] holds first_chunk_rows_ rows (growing to a full chunk
  // while it is the only one) and is first_chunk_; every later chunk is full
  // and lies in regions_, the last of which has region_used_ bytes taken.
  std::vector<float*> chunks_;
  std::unique_ptr<float[]> first_chunk_;
  std::vector<HugePageMemory> regions_;
  size_t region_used_ = 0;
  size_t first_chunk_rows_ = 0;
  size_t row_capacity_ = 0;
  size_t num_rows_ = 0;

  // Index: index_ points into index_small_ (below 2 MiB) or index_large_.
  IndexEntry* index_ = nullptr;
  std::unique_ptr<IndexEntry[]> index_small_;
  HugePageMemory index_large_;
  size_t index_capacity_ = 0;
  size_t index_mask_ = 0;

  // Copies row `row` (of ID `id`) to *out.
  void AppendRow(uint64_t id, uint32_t row, RowBatch* out) const;
  bool HandedOut(uint32_t row) const {
    return (snapshot_handed_[row >> 6] >> (row & 63)) & 1;
  }
  void MarkHandedOut(uint32_t row) {
    snapshot_handed_[row >> 6] |= uint64_t{1} << (row & 63);
  }

  // Rehash() counts its calls, so a snapshot's walk over the index knows
  // when to start again.
  uint64_t index_generation_ = 0;
  // The snapshot under way: its rows are 0..snapshot_rows_-1; a set bit of
  // snapshot_handed_ marks a row handed out or preserved; the walk is at
  // slot snapshot_cursor_ of the index of generation snapshot_generation_.
  bool snapshot_active_ = false;
  size_t snapshot_rows_ = 0;
  std::vector<uint64_t> snapshot_handed_;
  size_t snapshot_cursor_ = 0;
  uint64_t snapshot_generation_ = 0;
  RowBatch preserved_;

  // Scratch of ApplyGradients and Lookup, kept to avoid allocating per call.
  std::vector<uint32_t> rows_scratch_;
  std::vector<uint32_t> unique_of_scratch_;  // Position -> distinct index.
  std::vector<uint32_t> dedup_scratch_;      // Open-addressed row -> index.
  std::vector<uint32_t> unique_rows_scratch_;
  std::vector<float> merged_scratch_;
};

}  // namespace model
}  // namespace ps

#endif  // PS_MODEL_EMBEDDING_TABLE_H_
