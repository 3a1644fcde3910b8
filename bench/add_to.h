// AddTo: the summing server handle's arithmetic, shared by kv_bench's
// summing handle and zmq_baseline's --server_sums, so that both servers do
// the same work per pushed value.
#ifndef EMBER_BENCH_ADD_TO_H_
#define EMBER_BENCH_ADD_TO_H_

#include <cstddef>
#include <cstring>

// dst[0..n) += src[0..n), four floats at a time (GCC's -O2 does not
// vectorise the plain loop: the arrays might overlap). `src` is read with
// memcpy, so it need not be aligned (a received message's payload).
inline void AddTo(float* dst, const float* src, size_t n) {
  typedef float V4 __attribute__((vector_size(16)));
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    V4 a, b;
    std::memcpy(&a, dst + j, sizeof(a));
    std::memcpy(&b, src + j, sizeof(b));
    a += b;
    std::memcpy(dst + j, &a, sizeof(a));
  }
  for (; j < n; ++j) {
    float b;
    std::memcpy(&b, src + j, sizeof(b));
    dst[j] += b;
  }
}

#endif  // EMBER_BENCH_ADD_TO_H_
