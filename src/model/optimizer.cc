#include "model/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "model/initializer.h"

namespace ps {
namespace model {
namespace {

using spec_internal::FormatFloat;
using spec_internal::SpecParameter;

// The update rules. Each is a struct of its hyperparameters, in the spec's
// order, with its slot layout and its arithmetic (see optimizer.h);
// RuleOptimizer makes one an Optimizer.

struct Sgd {
  float lr;

  static int SlotFloats(int /*dim*/) { return 0; }
  void InitSlots(float* /*slots*/, int /*dim*/) const {}
  void Update(float* weights, float* /*slots*/, const float* grad,
              int dim) const {
    for (int i = 0; i < dim; ++i) weights[i] -= lr * grad[i];
  }
};

struct Momentum {
  float lr, momentum;
  bool nesterov;

  // velocity[dim].
  static int SlotFloats(int dim) { return dim; }
  void InitSlots(float* slots, int dim) const { std::fill_n(slots, dim, 0.0f); }
  void Update(float* weights, float* slots, const float* grad, int dim) const {
    float* velocity = slots;
    if (nesterov) {
      for (int i = 0; i < dim; ++i) {
        velocity[i] = momentum * velocity[i] + grad[i];
        weights[i] -= lr * (grad[i] + momentum * velocity[i]);
      }
    } else {
      for (int i = 0; i < dim; ++i) {
        velocity[i] = momentum * velocity[i] + grad[i];
        weights[i] -= lr * velocity[i];
      }
    }
  }
};

struct Adagrad {
  float lr, eps, initial_accumulator;

  // accumulator[dim].
  static int SlotFloats(int dim) { return dim; }
  void InitSlots(float* slots, int dim) const {
    std::fill_n(slots, dim, initial_accumulator);
  }
  void Update(float* weights, float* slots, const float* grad, int dim) const {
    float* accumulator = slots;
    for (int i = 0; i < dim; ++i) {
      const float g = grad[i];
      accumulator[i] = accumulator[i] + g * g;
      weights[i] -= lr * g / (std::sqrt(accumulator[i]) + eps);
    }
  }
};

struct Adam {
  float lr, beta1, beta2, eps;

  // m[dim], v[dim], beta1_power, beta2_power.
  static int SlotFloats(int dim) { return 2 * dim + 2; }
  void InitSlots(float* slots, int dim) const {
    std::fill_n(slots, 2 * dim, 0.0f);
    slots[2 * dim] = 1.0f;
    slots[2 * dim + 1] = 1.0f;
  }
  void Update(float* weights, float* slots, const float* grad, int dim) const {
    float* m = slots;
    float* v = slots + dim;
    float& beta1_power = slots[2 * dim];
    float& beta2_power = slots[2 * dim + 1];
    beta1_power *= beta1;
    beta2_power *= beta2;
    const float correction1 = 1.0f - beta1_power;
    const float correction2 = 1.0f - beta2_power;
    const float one_minus_beta1 = 1.0f - beta1;
    const float one_minus_beta2 = 1.0f - beta2;
    for (int i = 0; i < dim; ++i) {
      const float g = grad[i];
      m[i] = beta1 * m[i] + one_minus_beta1 * g;
      v[i] = beta2 * v[i] + one_minus_beta2 * (g * g);
      weights[i] -=
          lr * (m[i] / correction1) / (std::sqrt(v[i] / correction2) + eps);
    }
  }
};

struct Ftrl {
  float alpha, beta, l1, l2;

  // z[dim], n[dim].
  static int SlotFloats(int dim) { return 2 * dim; }
  void InitSlots(float* slots, int dim) const {
    std::fill_n(slots, 2 * dim, 0.0f);
  }
  void Update(float* weights, float* slots, const float* grad, int dim) const {
    float* z = slots;
    float* n = slots + dim;
    for (int i = 0; i < dim; ++i) {
      const float g = grad[i];
      const float n_new = n[i] + g * g;
      const float sigma = (std::sqrt(n_new) - std::sqrt(n[i])) / alpha;
      z[i] = z[i] + (g - sigma * weights[i]);
      n[i] = n_new;
      if (std::fabs(z[i]) <= l1) {
        weights[i] = 0.0f;
      } else {
        weights[i] = -(z[i] - std::copysign(l1, z[i])) /
                     ((beta + std::sqrt(n[i])) / alpha + l2);
      }
    }
  }
};

template <typename Rule>
class RuleOptimizer final : public Optimizer {
 public:
  explicit RuleOptimizer(const Rule& rule) : rule_(rule) {}

  int SlotFloats(int dim) const override { return Rule::SlotFloats(dim); }
  void InitSlots(float* slots, int dim) const override {
    rule_.InitSlots(slots, dim);
  }
  void Update(float* weights, float* slots, const float* grad,
              int dim) const override {
    rule_.Update(weights, slots, grad, dim);
  }

 private:
  const Rule rule_;
};

template <typename Rule>
std::unique_ptr<Optimizer> MakeOptimizer(const Rule& rule) {
  return std::make_unique<RuleOptimizer<Rule>>(rule);
}

// Converts the bound arguments to float, refusing values a float cannot hold.
Status ToFloats(const std::vector<double>& values,
                const std::vector<SpecParameter>& parameters,
                const std::string& context, std::vector<float>* out) {
  out->clear();
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::fabs(values[i]) > std::numeric_limits<float>::max()) {
      return Status::InvalidArgument(context + ": argument '" +
                                     parameters[i].name +
                                     "' is out of float range");
    }
    out->push_back(static_cast<float>(values[i]));
  }
  return Status::OK();
}

Status RequirePositive(float value, const char* name,
                       const std::string& context) {
  if (value > 0.0f) return Status::OK();
  return Status::InvalidArgument(context + ": " + name + " (" +
                                 FormatFloat(value) + ") must be > 0");
}

Status RequireNonNegative(float value, const char* name,
                          const std::string& context) {
  if (value >= 0.0f) return Status::OK();
  return Status::InvalidArgument(context + ": " + name + " (" +
                                 FormatFloat(value) + ") must be >= 0");
}

Status RequireUnitInterval(float value, const char* name,
                           const std::string& context) {
  if (value >= 0.0f && value < 1.0f) return Status::OK();
  return Status::InvalidArgument(context + ": " + name + " (" +
                                 FormatFloat(value) + ") must be in [0, 1)");
}

// The canonical spec of `form` with the bound arguments `f`: every argument
// named, numbers as FormatFloat writes them, booleans as true or false.
std::string CanonicalSpec(const spec_internal::SpecForm& form,
                          const std::vector<float>& f) {
  std::string out = std::string(form.name) + "(";
  for (size_t i = 0; i < f.size(); ++i) {
    const SpecParameter& p = form.parameters[i];
    if (i > 0) out += ",";
    out += std::string(p.name) + "=";
    if (p.type == SpecParameter::Type::kBool) {
      out += f[i] != 0 ? "true" : "false";
    } else {
      out += FormatFloat(f[i]);
    }
  }
  return out + ")";
}

}  // namespace

StatusOr<std::unique_ptr<Optimizer>> Optimizer::Parse(const std::string& spec) {
  constexpr auto kNumber = SpecParameter::Type::kNumber;
  constexpr auto kBool = SpecParameter::Type::kBool;
  enum { kSgd, kMomentum, kAdagrad, kAdam, kFtrl };  // The forms' order.
  const std::vector<spec_internal::SpecForm> forms = {
      {"sgd", {{"lr", nullptr, kNumber, true, 0}}},
      {"momentum",
       {{"lr", nullptr, kNumber, true, 0},
        {"momentum", nullptr, kNumber, false, 0.9},
        {"nesterov", nullptr, kBool, false, 0}}},
      {"adagrad",
       {{"lr", nullptr, kNumber, true, 0},
        {"eps", nullptr, kNumber, false, 1e-8},
        {"initial_accumulator", "initial_accumulator_value", kNumber, false,
         0}}},
      {"adam",
       {{"lr", nullptr, kNumber, true, 0},
        {"beta1", nullptr, kNumber, false, 0.9},
        {"beta2", nullptr, kNumber, false, 0.999},
        {"eps", nullptr, kNumber, false, 1e-8}}},
      {"ftrl",
       {{"alpha", nullptr, kNumber, true, 0},
        {"beta", nullptr, kNumber, false, 1},
        {"l1", nullptr, kNumber, false, 0},
        {"l2", nullptr, kNumber, false, 0}}},
  };
  StatusOr<spec_internal::BoundSpec> bound_or =
      spec_internal::ParseSpec(spec, "optimizer", forms);
  if (!bound_or.ok()) return bound_or.status();
  const spec_internal::BoundSpec& bound = bound_or.value();
  const std::string& context = bound.context;
  const spec_internal::SpecForm& form = forms[bound.form];
  std::vector<float> f;
  PS_RETURN_IF_ERROR(ToFloats(bound.values, form.parameters, context, &f));

  std::unique_ptr<Optimizer> optimizer;
  if (bound.form == kSgd) {
    PS_RETURN_IF_ERROR(RequirePositive(f[0], "lr", context));
    optimizer = MakeOptimizer(Sgd{f[0]});
  } else if (bound.form == kMomentum) {
    PS_RETURN_IF_ERROR(RequirePositive(f[0], "lr", context));
    PS_RETURN_IF_ERROR(RequireUnitInterval(f[1], "momentum", context));
    optimizer = MakeOptimizer(Momentum{f[0], f[1], f[2] != 0});
  } else if (bound.form == kAdagrad) {
    PS_RETURN_IF_ERROR(RequirePositive(f[0], "lr", context));
    PS_RETURN_IF_ERROR(RequireNonNegative(f[1], "eps", context));
    PS_RETURN_IF_ERROR(
        RequireNonNegative(f[2], "initial_accumulator", context));
    if (f[1] == 0.0f && f[2] == 0.0f) {
      return Status::InvalidArgument(
          context +
          ": eps and initial_accumulator cannot both be 0 (a zero gradient "
          "would divide 0 by 0)");
    }
    optimizer = MakeOptimizer(Adagrad{f[0], f[1], f[2]});
  } else if (bound.form == kAdam) {
    PS_RETURN_IF_ERROR(RequirePositive(f[0], "lr", context));
    PS_RETURN_IF_ERROR(RequireUnitInterval(f[1], "beta1", context));
    PS_RETURN_IF_ERROR(RequireUnitInterval(f[2], "beta2", context));
    PS_RETURN_IF_ERROR(RequirePositive(f[3], "eps", context));
    optimizer = MakeOptimizer(Adam{f[0], f[1], f[2], f[3]});
  } else {
    PS_RETURN_IF_ERROR(RequirePositive(f[0], "alpha", context));
    PS_RETURN_IF_ERROR(RequireNonNegative(f[1], "beta", context));
    PS_RETURN_IF_ERROR(RequireNonNegative(f[2], "l1", context));
    PS_RETURN_IF_ERROR(RequireNonNegative(f[3], "l2", context));
    optimizer = MakeOptimizer(Ftrl{f[0], f[1], f[2], f[3]});
  }
  optimizer->spec_ = CanonicalSpec(form, f);
  return optimizer;
}

}  // namespace model
}  // namespace ps
