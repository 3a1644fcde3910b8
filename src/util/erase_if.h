// EraseIf: C++20's std::erase_if for vectors and deques, in C++17.
//
// Thread safety: as the container's.
#ifndef PS_UTIL_ERASE_IF_H_
#define PS_UTIL_ERASE_IF_H_

#include <algorithm>
#include <cstddef>

namespace ps {

// Erases the elements of `*c` (a vector or deque) for which `pred` holds,
// keeping the others in their order; returns how many it erased.
template <typename Container, typename Pred>
size_t EraseIf(Container* c, Pred pred) {
  const auto kept_end = std::remove_if(c->begin(), c->end(), pred);
  const size_t erased = static_cast<size_t>(c->end() - kept_end);
  c->erase(kept_end, c->end());
  return erased;
}

}  // namespace ps

#endif  // PS_UTIL_ERASE_IF_H_
