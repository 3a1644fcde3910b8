// HugePageMemory: an anonymous mapping aligned to 2 MiB and advised for
// transparent huge pages (madvise MADV_HUGEPAGE), for large arrays read at
// random: an embedding table's rows and index. With 4 KiB pages every random
// row costs a TLB miss and a page-table walk that itself misses the cache;
// 2 MiB pages take most of those away (embedding_bench, 10 M rows of dim 64
// with Adagrad: pull 1.5-1.8x and push 1.4x the rows/s).
//
// The advice is a hint: whether the kernel backs the mapping with huge pages
// is its own policy (/sys/kernel/mm/transparent_hugepage/enabled: "always" or
// "madvise" do, "never" does not; prctl PR_SET_THP_DISABLE turns it off for
// a process). A huge page is resident as a whole once any byte of it is
// touched, so use this only for memory that will be filled.
// The memory starts zeroed. Move-only; unmapped on destruction.
#ifndef PS_UTIL_HUGE_PAGES_H_
#define PS_UTIL_HUGE_PAGES_H_

#include <cstddef>

namespace ps {

class HugePageMemory {
 public:
  static constexpr size_t kHugePageBytes = size_t{2} << 20;

  HugePageMemory() = default;
  // Maps `bytes` rounded up to kHugePageBytes. Throws std::bad_alloc if the
  // mapping fails, as new does.
  explicit HugePageMemory(size_t bytes);
  ~HugePageMemory();
  HugePageMemory(HugePageMemory&& other) noexcept;
  HugePageMemory& operator=(HugePageMemory&& other) noexcept;
  HugePageMemory(const HugePageMemory&) = delete;
  HugePageMemory& operator=(const HugePageMemory&) = delete;

  void* data() const { return data_; }
  // The mapped bytes: the requested size rounded up to kHugePageBytes.
  size_t size() const { return size_; }

 private:
  void Release();

  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ps

#endif  // PS_UTIL_HUGE_PAGES_H_
