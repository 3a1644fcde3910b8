// SArray<V>: a shared, zero-copy array, ps-lite's data container.
//
// Copies of an SArray share one buffer (reference counted); `segment()` is a
// view into the same buffer. Sending an SArray hands a reference to the
// transport, which keeps the buffer alive until the bytes have left; after a
// send the buffer must not be modified. An SArray is thread-compatible: the
// reference count is atomic, the contents are not synchronised.
#ifndef PS_SARRAY_H_
#define PS_SARRAY_H_

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ps/base.h"
#include "ps/range.h"

namespace ps {

template <typename V>
class SArray {
 public:
  SArray() {}

  // An array of `size` copies of `val`.
  explicit SArray(size_t size, V val = 0) { resize(size, val); }

  // Reinterprets the bytes of `arr` (zero-copy); sizes must divide evenly.
  template <typename W>
  explicit SArray(const SArray<W>& arr) {
    *this = arr;
  }
  template <typename W>
  void operator=(const SArray<W>& arr) {
    size_ = arr.size() * sizeof(W) / sizeof(V);
    CHECK_EQ(size_ * sizeof(V), arr.size() * sizeof(W))
        << "cannot reinterpret an array of " << arr.size() << " x " << sizeof(W)
        << " bytes as elements of " << sizeof(V) << " bytes";
    capacity_ = arr.capacity() * sizeof(W) / sizeof(V);
    ptr_ = std::shared_ptr<V>(arr.ptr(), reinterpret_cast<V*>(arr.data()));
  }

  // Wraps `data`. If `deletable`, the array owns it and frees it with
  // delete[]; otherwise the caller keeps it alive while any copy exists.
  SArray(V* data, size_t size, bool deletable = false) {
    if (deletable) {
      reset(data, size, [](V* p) { delete[] p; });
    } else {
      reset(data, size, [](V*) {});
    }
  }

  // Shares the `size` elements at `data`, kept alive by `data` (for instance
  // a std::shared_ptr that aliases the owner of a larger buffer). An Ember
  // addition.
  SArray(std::shared_ptr<V> data, size_t size)
      : size_(size), capacity_(size), ptr_(std::move(data)) {}

  // Copies the contents of `vec`.
  explicit SArray(const std::vector<V>& vec) {
    CopyFrom(vec.data(), vec.size());
  }

  // Shares `vec` (zero-copy); the vector lives while any copy exists.
  explicit SArray(const std::shared_ptr<std::vector<V>>& vec) {
    ptr_ = std::shared_ptr<V>(vec, vec->data());
    size_ = vec->size();
    capacity_ = vec->capacity();
  }

  // Takes `vec` over without copying its elements (Ember extension).
  explicit SArray(std::vector<V>&& vec)
      : SArray(std::make_shared<std::vector<V>>(std::move(vec))) {}

  template <typename W>
  SArray(const std::initializer_list<W>& list) {
    CopyFrom(list.begin(), list.end());
  }
  template <typename W>
  void operator=(const std::initializer_list<W>& list) {
    CopyFrom(list.begin(), list.end());
  }

  void CopyFrom(const V* data, size_t size) {
    if (capacity_ >= size) {
      size_ = size;
      if (size > 0) std::memmove(this->data(), data, size * sizeof(V));
      return;
    }
    // A new buffer is written once, by the copy (no zero-fill first).
    V* fresh = new V[size];
    std::memcpy(fresh, data, size * sizeof(V));
    reset(fresh, size, [](V* p) { delete[] p; });
  }
  void CopyFrom(const SArray<V>& other) {
    if (this == &other) return;
    CopyFrom(other.data(), other.size());
  }
  template <typename ForwardIt>
  void CopyFrom(const ForwardIt& first, const ForwardIt& last) {
    size_t size = static_cast<size_t>(std::distance(first, last));
    V* data = new V[size + 1];
    reset(data, size, [](V* p) { delete[] p; });
    std::copy(first, last, data);
  }

  // Points at `data` and frees it with `del` when the last copy goes.
  template <typename Deleter>
  void reset(V* data, size_t size, Deleter del) {
    size_ = size;
    capacity_ = size;
    ptr_.reset(data, del);
  }

  // Grows or shrinks; new elements are `val`. Growing beyond the capacity
  // reallocates and copies, detaching this array from its former sharers.
  void resize(size_t size, V val = 0) {
    size_t cur_n = size_;
    if (capacity_ >= size) {
      size_ = size;
    } else {
      V* new_data = new V[size + 5];
      if (cur_n > 0) std::memcpy(new_data, data(), cur_n * sizeof(V));
      reset(new_data, size, [](V* p) { delete[] p; });
    }
    if (size <= cur_n) return;
    V* p = data() + cur_n;
    if (val == 0) {
      std::memset(static_cast<void*>(p), 0, (size - cur_n) * sizeof(V));
    } else {
      std::fill(p, p + size - cur_n, val);
    }
  }

  void reserve(size_t size) {
    if (capacity_ >= size) return;
    size_t old_size = size_;
    resize(size);
    size_ = old_size;
  }

  void clear() {
    reset(nullptr, 0, [](V*) {});
  }

  inline bool empty() const { return size() == 0; }
  inline size_t size() const { return size_; }
  inline size_t capacity() const { return capacity_; }

  inline V* begin() { return data(); }
  inline const V* begin() const { return data(); }
  inline V* end() { return data() + size(); }
  inline const V* end() const { return data() + size(); }
  inline V* data() const { return ptr_.get(); }

  inline std::shared_ptr<V>& ptr() { return ptr_; }
  inline const std::shared_ptr<V>& ptr() const { return ptr_; }

  inline V back() const {
    CHECK(!empty());
    return data()[size_ - 1];
  }
  inline V front() const {
    CHECK(!empty());
    return data()[0];
  }
  inline V& operator[](int i) { return data()[i]; }
  inline const V& operator[](int i) const { return data()[i]; }

  inline void push_back(const V& val) {
    if (size_ == capacity_) reserve(size_ * 2 + 5);
    data()[size_++] = val;
  }
  void pop_back() {
    if (size_) --size_;
  }
  void append(const SArray<V>& arr) {
    if (arr.empty()) return;
    size_t orig_size = size_;
    resize(size_ + arr.size());
    std::memcpy(data() + orig_size, arr.data(), arr.size() * sizeof(V));
  }

  // A view of elements [begin, end) sharing this array's buffer.
  SArray<V> segment(size_t begin, size_t end) const {
    CHECK_GE(end, begin);
    CHECK_LE(end, size());
    SArray<V> ret;
    ret.ptr_ = std::shared_ptr<V>(ptr_, data() + begin);
    ret.size_ = end - begin;
    ret.capacity_ = end - begin;
    return ret;
  }

 private:
  size_t size_ = 0;
  size_t capacity_ = 0;
  std::shared_ptr<V> ptr_;
};

// The positions [begin, end) of the sorted array `arr` whose values lie in
// [lower, upper).
template <typename V>
Range FindRange(const SArray<V>& arr, V lower, V upper) {
  if (upper <= lower) return Range(0, 0);
  auto lb = std::lower_bound(arr.begin(), arr.end(), lower);
  auto ub = std::lower_bound(arr.begin(), arr.end(), upper);
  return Range(lb - arr.begin(), ub - arr.begin());
}

// A short rendering of the first and last elements of a buffer.
template <typename V>
inline std::string DebugStr(const V* data, int n, int m = 5) {
  std::stringstream ss;
  ss << "[" << n << "]: ";
  if (n < 2 * m) {
    for (int i = 0; i < n; ++i) ss << data[i] << " ";
  } else {
    for (int i = 0; i < m; ++i) ss << data[i] << " ";
    ss << "... ";
    for (int i = n - m; i < n; ++i) ss << data[i] << " ";
  }
  return ss.str();
}

template <typename V>
std::ostream& operator<<(std::ostream& os, const SArray<V>& obj) {
  os << DebugStr(obj.data(), static_cast<int>(obj.size()));
  return os;
}

}  // namespace ps

#endif  // PS_SARRAY_H_
