// How a process that receives large messages should set glibc's malloc.
//
// ZeroMQ mallocs every message it receives. With glibc's defaults each
// allocation of 128 KiB or more is a fresh mapping that the kernel faults
// in and zeroes, page by page, and that is unmapped again when the message
// is freed: a 4 MB push cost its server ~130 page faults, a 120 MB one
// (10 M keys) ~30,000, which made time per key 2.5 x that of 1 M keys.
// TuneMallocForLargeMessages keeps large blocks in malloc's heap instead:
//   - M_MMAP_MAX 0: no allocation is a mapping of its own, whatever its size
//     (M_MMAP_THRESHOLD cannot be raised above 32 MiB on 64-bit machines);
//   - M_ARENA_MAX 1: every thread allocates from the main heap, which grows
//     with brk and can hold any size (a thread's own arena is made of 64 MiB
//     mappings, and a larger block there is mapped on its own after all);
//   - M_TRIM_THRESHOLD keep_mb: up to that much freed memory at the top of
//     the heap is kept for reuse rather than given back to the kernel.
// One arena means the threads' larger allocations share one lock; small
// ones (up to 1 KiB) come from each thread's cache without it. Measured on
// 2 cores at 2 x 2 and 4 x 4 sparse 1000-key pushes and pulls: no
// difference beyond the noise (docs/performance.md). Process-wide and best
// set before threads allocate. Returns whether malloc accepted everything.
#ifndef PS_UTIL_MALLOC_TUNING_H_
#define PS_UTIL_MALLOC_TUNING_H_

#include <malloc.h>

namespace ps {

inline bool TuneMallocForLargeMessages(int keep_mb) {
  if (keep_mb <= 0) return true;
  const bool trim = mallopt(M_TRIM_THRESHOLD, keep_mb << 20) == 1;
  const bool arenas = mallopt(M_ARENA_MAX, 1) == 1;
  const bool maps = mallopt(M_MMAP_MAX, 0) == 1;
  return trim && arenas && maps;
}

}  // namespace ps

#endif  // PS_UTIL_MALLOC_TUNING_H_
