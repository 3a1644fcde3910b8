#include "util/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>
#include <utility>

namespace ps {

HugePageMemory::HugePageMemory(size_t bytes) {
  if (bytes == 0) return;
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) throw std::bad_alloc();
  const size_t size = (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  // Map one huge page more than needed and trim both ends, so that the
  // mapping starts on a huge-page boundary.
  const size_t mapped = size + kHugePageBytes;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned =
      (start + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  const size_t head = aligned - start;
  if (head > 0) munmap(raw, head);
  const size_t tail = mapped - head - size;
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
  data_ = reinterpret_cast<void*>(aligned);
  size_ = size;
  // Only a hint: without transparent huge pages (or with them disabled) the
  // mapping works as well with small pages, so a failure is ignored.
  (void)madvise(data_, size_, MADV_HUGEPAGE);
}

HugePageMemory::~HugePageMemory() { Release(); }

HugePageMemory::HugePageMemory(HugePageMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

HugePageMemory& HugePageMemory::operator=(HugePageMemory&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void HugePageMemory::Release() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace ps
