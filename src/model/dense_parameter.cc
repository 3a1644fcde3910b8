#include "model/dense_parameter.h"

#include <cmath>
#include <cstring>
#include <utility>

namespace ps {
namespace model {
namespace {

Status CheckSize(const std::string& name, const char* what, size_t got,
                 size_t want) {
  if (got == want) return Status::OK();
  return Status::InvalidArgument("dense parameter '" + name + "': " + what +
                                 " of " + std::to_string(got) +
                                 " floats, expected " + std::to_string(want));
}

}  // namespace

StatusOr<std::unique_ptr<DenseChunk>> DenseChunk::Create(
    std::string name, size_t n, std::shared_ptr<const Optimizer> optimizer) {
  PS_RETURN_IF_ERROR(CheckParameterArguments(
      "dense parameter '" + name + "'", "size", n, kMaxSize, optimizer.get()));
  return std::unique_ptr<DenseChunk>(
      new DenseChunk(std::move(name), n, std::move(optimizer)));
}

DenseChunk::DenseChunk(std::string name, size_t n,
                       std::shared_ptr<const Optimizer> optimizer)
    : name_(std::move(name)),
      optimizer_(std::move(optimizer)),
      values_(n, 0.0f),
      slots_(optimizer_->SlotFloats(static_cast<int>(n))) {
  optimizer_->InitSlots(slots_.data(), static_cast<int>(n));
}

Status DenseChunk::Set(const float* values, size_t n) {
  PS_RETURN_IF_ERROR(CheckSize(name_, "Set", n, values_.size()));
  std::memcpy(values_.data(), values, n * sizeof(float));
  return Status::OK();
}

Status DenseChunk::Get(float* out, size_t n) const {
  PS_RETURN_IF_ERROR(CheckSize(name_, "Get", n, values_.size()));
  std::memcpy(out, values_.data(), n * sizeof(float));
  return Status::OK();
}

Status DenseChunk::ApplyGradient(const float* g, size_t n) {
  PS_RETURN_IF_ERROR(CheckSize(name_, "gradient", n, values_.size()));
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(g[i])) {
      return Status::InvalidArgument("dense parameter '" + name_ +
                                     "': gradient element " +
                                     std::to_string(i) + " is not finite");
    }
  }
  optimizer_->Update(values_.data(), slots_.data(), g, static_cast<int>(n));
  return Status::OK();
}

Status DenseChunk::SetSlots(const float* slots, size_t n) {
  PS_RETURN_IF_ERROR(CheckSize(name_, "slots", n, slots_.size()));
  if (n > 0) std::memcpy(slots_.data(), slots, n * sizeof(float));
  return Status::OK();
}

}  // namespace model
}  // namespace ps
