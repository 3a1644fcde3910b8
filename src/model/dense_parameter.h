// DenseChunk: a contiguous vector of n float parameters with its optimizer
// state, the server-side store of (a slice of) one dense parameter.
//
// The values start at zero (workers set initial values with Set()); the
// slots start from Optimizer::InitSlots. The whole chunk is one optimizer
// "row" of n values, so Adam's bias-correction powers count the chunk's
// updates.
//
// Thread-safety: not thread-safe; the server calls it from one thread. The
// shared Optimizer is immutable and may serve other chunks and tables
// concurrently.
#ifndef PS_MODEL_DENSE_PARAMETER_H_
#define PS_MODEL_DENSE_PARAMETER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "model/optimizer.h"
#include "ps/status.h"

namespace ps {
namespace model {

class DenseChunk {
 public:
  // The largest n accepted (Optimizer works on int sizes).
  static constexpr size_t kMaxSize = (size_t{1} << 30) - 1;

  // Makes a chunk of n zeros updated by `optimizer` (shared: a caller that
  // keeps ownership elsewhere may pass a shared_ptr with a no-op deleter, and
  // then must keep the optimizer alive as long as the chunk). Returns
  // kInvalidArgument if n is 0 or above kMaxSize or optimizer is null.
  static StatusOr<std::unique_ptr<DenseChunk>> Create(
      std::string name, size_t n, std::shared_ptr<const Optimizer> optimizer);

  DenseChunk(const DenseChunk&) = delete;
  DenseChunk& operator=(const DenseChunk&) = delete;

  // Overwrites the values with values[0..n); the slots are unchanged.
  // Returns kInvalidArgument if n != size().
  [[nodiscard]] Status Set(const float* values, size_t n);

  // Copies the values to out[0..n). Returns kInvalidArgument if
  // n != size().
  [[nodiscard]] Status Get(float* out, size_t n) const;

  // Applies gradient g[0..n) with the optimizer. Returns kInvalidArgument,
  // changing nothing, if n != size() or a gradient is not finite.
  [[nodiscard]] Status ApplyGradient(const float* g, size_t n);

  // Overwrites the optimizer state with slots[0..n) (restore from a
  // checkpoint). Returns kInvalidArgument if n != slot_size().
  [[nodiscard]] Status SetSlots(const float* slots, size_t n);

  const std::string& name() const { return name_; }
  size_t size() const { return values_.size(); }
  size_t slot_size() const { return slots_.size(); }
  // Valid until the chunk is destroyed; the contents change with Set,
  // ApplyGradient and SetSlots.
  const float* values() const { return values_.data(); }
  const float* slots() const { return slots_.data(); }
  const Optimizer& optimizer() const { return *optimizer_; }

 private:
  DenseChunk(std::string name, size_t n,
             std::shared_ptr<const Optimizer> optimizer);

  const std::string name_;
  const std::shared_ptr<const Optimizer> optimizer_;
  std::vector<float> values_;
  std::vector<float> slots_;
};

}  // namespace model
}  // namespace ps

#endif  // PS_MODEL_DENSE_PARAMETER_H_
