// Optimizer: the server-side update rule of a parameter, parsed from a spec
// string such as "adagrad(lr=0.05)" (grammar in model/initializer.h).
//
// An Optimizer holds only its hyperparameters. The per-parameter state (the
// "slots": momenta, accumulators) lives beside the weights, in storage the
// caller owns, so one Optimizer serves a whole table: the caller asks
// SlotFloats(dim) for the size, InitSlots() once per row, then Update() with
// each merged gradient.
//
// The arithmetic is float32 and written exactly as documented below, element
// by element and in that order, so that a reference implementation following
// the formulas gives bitwise equal results (when neither is compiled with
// FMA contraction). `sqrt` is IEEE-754 square root (correctly rounded), so
// results do not depend on the C library.
//
// Thread-safety: an Optimizer is immutable after Parse(); its const methods
// may run concurrently, on different rows.
#ifndef PS_MODEL_OPTIMIZER_H_
#define PS_MODEL_OPTIMIZER_H_

#include <memory>
#include <string>

#include "ps/status.h"

namespace ps {
namespace model {

class Optimizer {
 public:
  Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;

  // Parses `spec`. With w a weight, g its gradient and all values float:
  //
  //   sgd(lr)                                   slots: none
  //     w -= lr * g
  //   momentum(lr, momentum=0.9, nesterov=false) slots: v[dim]
  //     v = momentum * v + g
  //     w -= lr * v                               (nesterov=false)
  //     w -= lr * (g + momentum * v)              (nesterov=true)
  //   adagrad(lr, eps=1e-8, initial_accumulator=0)  slots: acc[dim]
  //     acc = acc + g * g
  //     w -= lr * g / (sqrt(acc) + eps)
  //   adam(lr, beta1=0.9, beta2=0.999, eps=1e-8)    slots: m[dim], v[dim],
  //                                                 beta1_power, beta2_power
  //     once per row and update: beta1_power *= beta1; beta2_power *= beta2
  //     m = beta1 * m + (1 - beta1) * g
  //     v = beta2 * v + (1 - beta2) * (g * g)
  //     w -= lr * (m / (1 - beta1_power)) / (sqrt(v / (1 - beta2_power)) + eps)
  //   ftrl(alpha, beta=1, l1=0, l2=0)               slots: z[dim], n[dim]
  //     sigma = (sqrt(n + g * g) - sqrt(n)) / alpha
  //     z = z + (g - sigma * w)
  //     n = n + g * g
  //     w = |z| <= l1 ? 0 : -(z - sign(z) * l1) / ((beta + sqrt(n)) / alpha +
  //     l2)
  //
  // Adam is the lazy (sparse) variant: the bias-correction powers are kept
  // per row (initially 1) and advance only when that row is updated, so a
  // row's t counts its own updates, not the table's steps. FTRL is
  // FTRL-proximal (McMahan et al., 2013) per coordinate; the weights are
  // recomputed from z and n on every update, so the initializer's value only
  // counts until a row's first update (through sigma * w).
  //
  // Arguments may be positional (in the order shown) or named; omitted ones
  // take the defaults shown, and lr (alpha for ftrl) is required.
  // adagrad also accepts initial_accumulator_value. Returns kInvalidArgument,
  // naming the problem, for an unknown optimizer or argument, a value that is
  // not a finite number (or boolean, for nesterov), lr or alpha <= 0,
  // momentum, beta1 or beta2 outside [0, 1), eps < 0 (adam: <= 0), both eps
  // and initial_accumulator 0 for adagrad, initial_accumulator < 0, or beta,
  // l1 or l2 < 0 for ftrl.
  static StatusOr<std::unique_ptr<Optimizer>> Parse(const std::string& spec);

  // The number of floats of state per `dim` weights.
  virtual int SlotFloats(int dim) const = 0;

  // Sets the state of a new row: slots[0..SlotFloats(dim)), borrowed for
  // the call.
  virtual void InitSlots(float* slots, int dim) const = 0;

  // Applies one (already merged) gradient to one row: weights[0..dim) and
  // slots[0..SlotFloats(dim)) are updated in place, grad[0..dim) is read.
  // All are borrowed for the call. No check for non-finite values: the
  // caller validates gradients.
  virtual void Update(float* weights, float* slots, const float* grad,
                      int dim) const = 0;

  // The canonical spec, which Parse() maps back to an equal optimizer: the
  // name with every argument named, e.g.
  // "adam(lr=0.001,beta1=0.9,beta2=0.999,eps=1e-08)".
  std::string ToString() const { return spec_; }

 private:
  std::string spec_;  // Set by Parse.
};

// For what holds an optimizer (an embedding table, a dense parameter), at
// its creation: kInvalidArgument, starting with `subject` ("embedding table
// 'x'"), unless `size` (named `size_name`) is in [1, max] and `optimizer` is
// set.
template <typename N>
Status CheckParameterArguments(const std::string& subject,
                               const char* size_name, N size, N max,
                               const Optimizer* optimizer) {
  if (size < 1 || size > max) {
    return Status::InvalidArgument(subject + ": " + size_name + " " +
                                   std::to_string(size) + " is not in [1, " +
                                   std::to_string(max) + "]");
  }
  if (optimizer == nullptr) {
    return Status::InvalidArgument(subject + ": no optimizer");
  }
  return Status::OK();
}

}  // namespace model
}  // namespace ps

#endif  // PS_MODEL_OPTIMIZER_H_
