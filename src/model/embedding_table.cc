#include "model/embedding_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <unordered_set>
#include <utility>

#include "util/mix.h"

namespace ps {
namespace model {
namespace {

// A full arena chunk holds the largest power of two of rows that fits in
// this many bytes (at least one row). The unused tail of the last chunk is
// then under 2 MiB: below 0.2% of a table of a gigabyte.
constexpr size_t kChunkBytes = size_t{2} << 20;
// Full chunks are carved from regions of this many bytes (at least one
// chunk).
constexpr size_t kRegionBytes = size_t{64} << 20;
// The first chunk starts with this many rows and doubles up to a full chunk.
constexpr size_t kFirstChunkRows = 16;
constexpr size_t kInitialIndexCapacity = 16;
// How far ahead the batch loops prefetch index slots and rows: far enough to
// cover a memory miss, near enough to stay in L1.
constexpr size_t kPrefetchDistance = 16;

constexpr size_t kCacheLine = 64;
// Prefetches at most this many bytes of a row: the hardware's stream
// prefetcher takes over along longer rows.
constexpr size_t kMaxPrefetchBytes = 512;

inline void Prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

// Prefetches the cache lines of [p, p + bytes), up to kMaxPrefetchBytes.
inline void PrefetchRange(const void* p, size_t bytes, bool for_write) {
  const char* begin = static_cast<const char*>(p);
  const uintptr_t first =
      reinterpret_cast<uintptr_t>(begin) & ~(kCacheLine - 1);
  const uintptr_t end =
      reinterpret_cast<uintptr_t>(begin) + std::min(bytes, kMaxPrefetchBytes);
  for (uintptr_t line = first; line < end; line += kCacheLine) {
    if (for_write) {
      __builtin_prefetch(reinterpret_cast<const void*>(line), 1, 3);
    } else {
      __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
    }
  }
}

size_t NextPowerOfTwo(size_t v) {
  size_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Whether `rows` rows can live in an index of `capacity` slots: load <= 3/4.
inline bool FitsIndex(size_t rows, size_t capacity) {
  return rows * 4 <= capacity * 3;
}

}  // namespace

StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(
    std::string name, uint32_t table_id, int dim, Initializer initializer,
    std::unique_ptr<Optimizer> optimizer) {
  PS_RETURN_IF_ERROR(CheckParameterArguments(
      "embedding table '" + name + "'", "dim", dim, kMaxDim, optimizer.get()));
  return std::unique_ptr<EmbeddingTable>(
      new EmbeddingTable(std::move(name), table_id, dim, std::move(initializer),
                         std::move(optimizer)));
}

EmbeddingTable::EmbeddingTable(std::string name, uint32_t table_id, int dim,
                               Initializer initializer,
                               std::unique_ptr<Optimizer> optimizer)
    : name_(std::move(name)),
      table_id_(table_id),
      dim_(dim),
      initializer_(std::move(initializer)),
      optimizer_(std::move(optimizer)),
      slot_floats_(optimizer_->SlotFloats(dim)),
      row_floats_(static_cast<size_t>(dim) + slot_floats_) {
  const size_t row_bytes = row_floats_ * sizeof(float);
  chunk_shift_ = 0;
  while ((row_bytes << (chunk_shift_ + 1)) <= kChunkBytes) ++chunk_shift_;
  chunk_mask_ = (uint32_t{1} << chunk_shift_) - 1;
  Rehash(kInitialIndexCapacity);
}

EmbeddingTable::~EmbeddingTable() = default;

uint64_t EmbeddingTable::HashId(uint64_t id) {
  // Sequential and strided IDs spread evenly.
  return SplitMix64(id);
}

uint32_t EmbeddingTable::FindRow(uint64_t id) const {
  size_t slot = HashId(id) & index_mask_;
  while (true) {
    const IndexEntry& entry = index_[slot];
    if (entry.row == kEmptyRow) return kEmptyRow;
    if (EntryId(entry) == id) return entry.row;
    slot = (slot + 1) & index_mask_;
  }
}

uint32_t EmbeddingTable::FindOrCreateRow(uint64_t id, const float* weights,
                                         const float* slots, bool* created) {
  size_t slot = HashId(id) & index_mask_;
  while (true) {
    const IndexEntry& entry = index_[slot];
    if (entry.row == kEmptyRow) break;
    if (EntryId(entry) == id) {
      *created = false;
      return entry.row;
    }
    slot = (slot + 1) & index_mask_;
  }
  CHECK_LT(num_rows_, kMaxRows)
      << "embedding table '" << name_ << "' is full (" << kMaxRows << " rows)";
  if (!FitsIndex(num_rows_ + 1, index_capacity_)) {
    Rehash(index_capacity_ * 2);
    slot = HashId(id) & index_mask_;
    while (index_[slot].row != kEmptyRow) slot = (slot + 1) & index_mask_;
  }
  if (num_rows_ == row_capacity_) GrowArena();

  const uint32_t row = static_cast<uint32_t>(num_rows_);
  float* data = RowData(row);
  if (weights == nullptr) {
    initializer_.Fill(table_id_, id, data, dim_);
  } else {
    std::memcpy(data, weights, dim_ * sizeof(float));
  }
  if (slots == nullptr) {
    optimizer_->InitSlots(data + dim_, dim_);
  } else if (slot_floats_ > 0) {
    std::memcpy(data + dim_, slots, slot_floats_ * sizeof(float));
  }
  index_[slot] = IndexEntry{static_cast<uint32_t>(id),
                            static_cast<uint32_t>(id >> 32), row};
  ++num_rows_;
  *created = true;
  return row;
}

void EmbeddingTable::GrowArena() {
  const size_t full_rows = size_t{1} << chunk_shift_;
  if (chunks_.empty()) {
    first_chunk_rows_ = std::min(kFirstChunkRows, full_rows);
    first_chunk_.reset(new float[first_chunk_rows_ * row_floats_]);
    chunks_.push_back(first_chunk_.get());
    row_capacity_ = first_chunk_rows_;
    return;
  }
  if (chunks_.size() == 1 && first_chunk_rows_ < full_rows) {
    // Only the first chunk is ever copied, and only while it is smaller than
    // one full chunk: at most 2 MiB, in amortised O(1) per row.
    const size_t rows = std::min(first_chunk_rows_ * 2, full_rows);
    std::unique_ptr<float[]> bigger(new float[rows * row_floats_]);
    std::memcpy(bigger.get(), first_chunk_.get(),
                num_rows_ * row_floats_ * sizeof(float));
    first_chunk_ = std::move(bigger);
    chunks_[0] = first_chunk_.get();
    first_chunk_rows_ = rows;
    row_capacity_ = rows;
    return;
  }
  chunks_.push_back(NewFullChunk());
  row_capacity_ += full_rows;
}

float* EmbeddingTable::NewFullChunk() {
  const size_t chunk_bytes =
      (size_t{1} << chunk_shift_) * row_floats_ * sizeof(float);
  if (regions_.empty() || regions_.back().size() - region_used_ < chunk_bytes) {
    // A region's untouched tail is address space only; a huge page becomes
    // resident when rows are first written into it.
    const size_t chunks = std::max<size_t>(1, kRegionBytes / chunk_bytes);
    regions_.emplace_back(chunks * chunk_bytes);
    region_used_ = 0;
  }
  float* chunk = reinterpret_cast<float*>(
      static_cast<char*>(regions_.back().data()) + region_used_);
  region_used_ += chunk_bytes;
  return chunk;
}

void EmbeddingTable::Rehash(size_t capacity) {
  ++index_generation_;
  // The new index is built aside and swapped in at the end, so a failed
  // allocation (std::bad_alloc) leaves the table as it was.
  std::unique_ptr<IndexEntry[]> small;
  HugePageMemory large;
  IndexEntry* fresh;
  const size_t bytes = capacity * sizeof(IndexEntry);
  if (bytes >= HugePageMemory::kHugePageBytes) {
    large = HugePageMemory(bytes);
    fresh = static_cast<IndexEntry*>(large.data());
  } else {
    small.reset(new IndexEntry[capacity]);
    fresh = small.get();
  }
  for (size_t i = 0; i < capacity; ++i) {
    new (&fresh[i]) IndexEntry{0, 0, kEmptyRow};
  }
  const size_t mask = capacity - 1;
  for (size_t i = 0; i < index_capacity_; ++i) {
    const IndexEntry& entry = index_[i];
    if (entry.row == kEmptyRow) continue;
    size_t slot = HashId(EntryId(entry)) & mask;
    while (fresh[slot].row != kEmptyRow) slot = (slot + 1) & mask;
    fresh[slot] = entry;
  }
  index_small_ = std::move(small);
  index_large_ = std::move(large);
  index_ = fresh;
  index_capacity_ = capacity;
  index_mask_ = mask;
}

void EmbeddingTable::Reserve(size_t rows) {
  size_t capacity = index_capacity_;
  while (!FitsIndex(rows, capacity)) capacity *= 2;
  if (capacity != index_capacity_) Rehash(capacity);
}

void EmbeddingTable::ResolveRows(const uint64_t* ids, size_t n) {
  rows_scratch_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      Prefetch(&index_[HashId(ids[i + kPrefetchDistance]) & index_mask_]);
    }
    bool created;
    rows_scratch_[i] = FindOrCreateRow(ids[i], nullptr, nullptr, &created);
  }
}

Status EmbeddingTable::Lookup(const uint64_t* ids, size_t n, float* out) {
  if (n == 0) return Status::OK();
  PS_RETURN_IF_ERROR(CheckRoom(ids, n));
  ResolveRows(ids, n);
  // The rows are copied without software prefetches: the copies of
  // different rows are independent, so the CPU overlaps their misses by
  // itself, as it does for a plain gather. Prefetching every row's lines
  // kPrefetchDistance rows ahead made this loop slower, not faster: the pull
  // of 10 M rows of dim 64 ran at 8.0-8.9 M rows/s with them and 9.5-10.0 M
  // without (embedding_bench, 5 alternating pairs).
  const size_t row_bytes = dim_ * sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(out + i * dim_, RowData(rows_scratch_[i]), row_bytes);
  }
  return Status::OK();
}

Status EmbeddingTable::CheckRoom(const uint64_t* ids, size_t n) {
  if (num_rows_ + n > kMaxRows && num_rows_ + CountNewIds(ids, n) > kMaxRows) {
    return Status::Unavailable("embedding table '" + name_ + "' is full (" +
                               std::to_string(kMaxRows) + " rows)");
  }
  return Status::OK();
}

size_t EmbeddingTable::Find(const uint64_t* ids, size_t n, float* out,
                            std::vector<size_t>* missing) const {
  if (missing != nullptr) missing->clear();
  size_t found = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      Prefetch(&index_[HashId(ids[i + kPrefetchDistance]) & index_mask_]);
    }
    const uint32_t row = FindRow(ids[i]);
    float* dst = out + i * dim_;
    if (row == kEmptyRow) {
      std::memset(dst, 0, dim_ * sizeof(float));
      if (missing != nullptr) missing->push_back(i);
    } else {
      std::memcpy(dst, RowData(row), dim_ * sizeof(float));
      ++found;
    }
  }
  return found;
}

bool EmbeddingTable::Contains(uint64_t id) const {
  return FindRow(id) != kEmptyRow;
}

size_t EmbeddingTable::CountNewIds(const uint64_t* ids, size_t n) {
  std::unordered_set<uint64_t> absent;
  for (size_t i = 0; i < n; ++i) {
    if (FindRow(ids[i]) == kEmptyRow) absent.insert(ids[i]);
  }
  return absent.size();
}

Status EmbeddingTable::CheckGradients(const uint64_t* ids, size_t n,
                                      const float* grads) const {
  const size_t dim = dim_;
  for (size_t k = 0; k < n * dim; ++k) {
    if (!std::isfinite(grads[k])) {
      const size_t i = k / dim;
      return Status::InvalidArgument("embedding table '" + name_ +
                                     "': gradient of id " +
                                     std::to_string(ids[i]) + " (position " +
                                     std::to_string(i) + ") is not finite");
    }
  }
  return Status::OK();
}

Status EmbeddingTable::ApplyGradients(const uint64_t* ids, size_t n,
                                      const float* grads) {
  if (n == 0) return Status::OK();
  // Validate everything before changing anything: a NaN would poison the
  // row (and its optimizer state) for good.
  PS_RETURN_IF_ERROR(CheckGradients(ids, n, grads));
  const size_t dim = dim_;
  PS_RETURN_IF_ERROR(CheckRoom(ids, n));
  ResolveRows(ids, n);
  if (snapshot_active_) {
    // Keep what a snapshot under way must still hand out, before changing it.
    for (size_t i = 0; i < n; ++i) {
      const uint32_t row = rows_scratch_[i];
      if (row < snapshot_rows_ && !HandedOut(row)) {
        MarkHandedOut(row);
        AppendRow(ids[i], row, &preserved_);
      }
    }
  }

  // Group positions by row, numbering rows in order of first appearance,
  // with a scratch hash of {row, number} pairs sized for load <= 1/2.
  const size_t capacity = NextPowerOfTwo(std::max<size_t>(16, 2 * n));
  const size_t mask = capacity - 1;
  dedup_scratch_.assign(2 * capacity, kEmptyRow);
  unique_of_scratch_.resize(n);
  unique_rows_scratch_.clear();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t row = rows_scratch_[i];
    size_t slot = HashId(row) & mask;
    while (true) {
      uint32_t* pair = &dedup_scratch_[2 * slot];
      if (pair[0] == kEmptyRow) {
        pair[0] = row;
        pair[1] = static_cast<uint32_t>(unique_rows_scratch_.size());
        unique_rows_scratch_.push_back(row);
        break;
      }
      if (pair[0] == row) break;
      slot = (slot + 1) & mask;
    }
    unique_of_scratch_[i] = dedup_scratch_[2 * slot + 1];
  }

  const size_t unique = unique_rows_scratch_.size();
  const float* merged = grads;
  if (unique != n) {
    // Sum in batch order: the first occurrence is copied, later ones added.
    merged_scratch_.resize(unique * dim);
    size_t next_new = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t u = unique_of_scratch_[i];
      float* dst = &merged_scratch_[u * dim];
      const float* src = grads + i * dim;
      if (u == next_new) {
        std::memcpy(dst, src, dim * sizeof(float));
        ++next_new;
      } else {
        for (size_t j = 0; j < dim; ++j) dst[j] += src[j];
      }
    }
    merged = merged_scratch_.data();
  }
  // Without duplicates, unique_rows_scratch_ equals rows_scratch_ and
  // `merged` is the caller's gradients, uncopied.
  for (size_t u = 0; u < unique; ++u) {
    if (u + kPrefetchDistance < unique) {
      PrefetchRange(RowData(unique_rows_scratch_[u + kPrefetchDistance]),
                    row_floats_ * sizeof(float), /*for_write=*/true);
    }
    float* data = RowData(unique_rows_scratch_[u]);
    optimizer_->Update(data, data + dim_, merged + u * dim, dim_);
  }
  return Status::OK();
}

Status EmbeddingTable::InsertRow(uint64_t id, const float* weights,
                                 const float* slots) {
  DCHECK(weights != nullptr);
  if (FindRow(id) != kEmptyRow) {
    return Status::InvalidArgument("embedding table '" + name_ + "': row " +
                                   std::to_string(id) + " already exists");
  }
  if (num_rows_ >= kMaxRows) {
    return Status::Unavailable("embedding table '" + name_ + "' is full (" +
                               std::to_string(kMaxRows) + " rows)");
  }
  bool created;
  FindOrCreateRow(id, weights, slots, &created);
  DCHECK(created);
  return Status::OK();
}

Status EmbeddingTable::PutRow(uint64_t id, const float* weights,
                              const float* slots) {
  const uint32_t row = FindRow(id);
  if (row == kEmptyRow) return InsertRow(id, weights, slots);
  if (snapshot_active_ && row < snapshot_rows_ && !HandedOut(row)) {
    MarkHandedOut(row);
    AppendRow(id, row, &preserved_);
  }
  float* data = RowData(row);
  std::memcpy(data, weights, dim_ * sizeof(float));
  if (slot_floats_ > 0) {
    std::memcpy(data + dim_, slots, slot_floats_ * sizeof(float));
  }
  return Status::OK();
}

void EmbeddingTable::ForEachRow(
    const std::function<void(uint64_t id, const float* weights,
                             const float* slots)>& fn) const {
  for (size_t i = 0; i < index_capacity_; ++i) {
    const IndexEntry& entry = index_[i];
    if (entry.row == kEmptyRow) continue;
    const float* data = RowData(entry.row);
    fn(EntryId(entry), data, data + dim_);
  }
}

void EmbeddingTable::AppendRow(uint64_t id, uint32_t row, RowBatch* out) const {
  const float* data = RowData(row);
  out->ids.push_back(id);
  out->weights.insert(out->weights.end(), data, data + dim_);
  out->slots.insert(out->slots.end(), data + dim_, data + row_floats_);
}

void EmbeddingTable::BeginSnapshot() {
  snapshot_active_ = true;
  snapshot_rows_ = num_rows_;
  snapshot_handed_.assign((num_rows_ + 63) / 64, 0);
  snapshot_cursor_ = 0;
  snapshot_generation_ = index_generation_;
  preserved_.Clear();
}

bool EmbeddingTable::NextSnapshotRows(size_t slots, RowBatch* out) {
  if (!snapshot_active_) return false;
  if (snapshot_generation_ != index_generation_) {
    // Rehashed since the last slice: walk the new index from its start (the
    // rows handed out already are marked). The walk that reaches the end
    // saw one index whole, so it missed no row.
    snapshot_generation_ = index_generation_;
    snapshot_cursor_ = 0;
  }
  const size_t end = std::min(index_capacity_, snapshot_cursor_ + slots);
  for (size_t i = snapshot_cursor_; i < end; ++i) {
    const IndexEntry& entry = index_[i];
    if (entry.row == kEmptyRow || entry.row >= snapshot_rows_ ||
        HandedOut(entry.row)) {
      continue;
    }
    MarkHandedOut(entry.row);
    AppendRow(EntryId(entry), entry.row, out);
  }
  snapshot_cursor_ = end;
  return snapshot_cursor_ < index_capacity_;
}

void EmbeddingTable::TakePreservedRows(RowBatch* out) {
  out->ids.insert(out->ids.end(), preserved_.ids.begin(), preserved_.ids.end());
  out->weights.insert(out->weights.end(), preserved_.weights.begin(),
                      preserved_.weights.end());
  out->slots.insert(out->slots.end(), preserved_.slots.begin(),
                    preserved_.slots.end());
  preserved_ = RowBatch();  // Frees the memory too.
}

void EmbeddingTable::EndSnapshot() {
  snapshot_active_ = false;
  snapshot_rows_ = 0;
  std::vector<uint64_t>().swap(snapshot_handed_);
  preserved_ = RowBatch();
}

size_t EmbeddingTable::MemoryBytes() const {
  size_t bytes = row_capacity_ * row_floats_ * sizeof(float);
  bytes += index_capacity_ * sizeof(IndexEntry);
  bytes += chunks_.capacity() * sizeof(chunks_[0]);
  bytes += rows_scratch_.capacity() * sizeof(uint32_t);
  bytes += unique_of_scratch_.capacity() * sizeof(uint32_t);
  bytes += dedup_scratch_.capacity() * sizeof(uint32_t);
  bytes += unique_rows_scratch_.capacity() * sizeof(uint32_t);
  bytes += merged_scratch_.capacity() * sizeof(float);
  return bytes;
}

}  // namespace model
}  // namespace ps
