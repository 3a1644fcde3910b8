#include "model/optimizer.h"

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

class SgdOptimizer : public Optimizer {
 public:
  explicit SgdOptimizer(float lr) : lr_(lr) {}

  int SlotFloats(int /*dim*/) const override { return 0; }
  void InitSlots(float* /*slots*/, int /*dim*/) const override {}

  void Update(float* weights, float* /*slots*/, const float* grad,
              int dim) const override {
    for (int i = 0; i < dim; ++i) weights[i] -= lr_ * grad[i];
  }

  std::string ToString() const override {
    return "sgd(lr=" + FormatFloat(lr_) + ")";
  }

 private:
  const float lr_;
};

class MomentumOptimizer : public Optimizer {
 public:
  MomentumOptimizer(float lr, float momentum, bool nesterov)
      : lr_(lr), momentum_(momentum), nesterov_(nesterov) {}

  int SlotFloats(int dim) const override { return dim; }

  void InitSlots(float* slots, int dim) const override {
    for (int i = 0; i < dim; ++i) slots[i] = 0.0f;
  }

  void Update(float* weights, float* slots, const float* grad,
              int dim) const override {
    float* velocity = slots;
    if (nesterov_) {
      for (int i = 0; i < dim; ++i) {
        velocity[i] = momentum_ * velocity[i] + grad[i];
        weights[i] -= lr_ * (grad[i] + momentum_ * velocity[i]);
      }
    } else {
      for (int i = 0; i < dim; ++i) {
        velocity[i] = momentum_ * velocity[i] + grad[i];
        weights[i] -= lr_ * velocity[i];
      }
    }
  }

  std::string ToString() const override {
    return "momentum(lr=" + FormatFloat(lr_) +
           ",momentum=" + FormatFloat(momentum_) +
           ",nesterov=" + (nesterov_ ? "true" : "false") + ")";
  }

 private:
  const float lr_;
  const float momentum_;
  const bool nesterov_;
};

class AdagradOptimizer : public Optimizer {
 public:
  AdagradOptimizer(float lr, float eps, float initial_accumulator)
      : lr_(lr), eps_(eps), initial_accumulator_(initial_accumulator) {}

  int SlotFloats(int dim) const override { return dim; }

  void InitSlots(float* slots, int dim) const override {
    for (int i = 0; i < dim; ++i) slots[i] = initial_accumulator_;
  }

  void Update(float* weights, float* slots, const float* grad,
              int dim) const override {
    float* accumulator = slots;
    for (int i = 0; i < dim; ++i) {
      const float g = grad[i];
      accumulator[i] = accumulator[i] + g * g;
      weights[i] -= lr_ * g / (std::sqrt(accumulator[i]) + eps_);
    }
  }

  std::string ToString() const override {
    return "adagrad(lr=" + FormatFloat(lr_) + ",eps=" + FormatFloat(eps_) +
           ",initial_accumulator=" + FormatFloat(initial_accumulator_) + ")";
  }

 private:
  const float lr_;
  const float eps_;
  const float initial_accumulator_;
};

class AdamOptimizer : public Optimizer {
 public:
  AdamOptimizer(float lr, float beta1, float beta2, float eps)
      : lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps) {}

  // m[dim], v[dim], beta1_power, beta2_power.
  int SlotFloats(int dim) const override { return 2 * dim + 2; }

  void InitSlots(float* slots, int dim) const override {
    for (int i = 0; i < 2 * dim; ++i) slots[i] = 0.0f;
    slots[2 * dim] = 1.0f;
    slots[2 * dim + 1] = 1.0f;
  }

  void Update(float* weights, float* slots, const float* grad,
              int dim) const override {
    float* m = slots;
    float* v = slots + dim;
    float& beta1_power = slots[2 * dim];
    float& beta2_power = slots[2 * dim + 1];
    beta1_power *= beta1_;
    beta2_power *= beta2_;
    const float correction1 = 1.0f - beta1_power;
    const float correction2 = 1.0f - beta2_power;
    const float one_minus_beta1 = 1.0f - beta1_;
    const float one_minus_beta2 = 1.0f - beta2_;
    for (int i = 0; i < dim; ++i) {
      const float g = grad[i];
      m[i] = beta1_ * m[i] + one_minus_beta1 * g;
      v[i] = beta2_ * v[i] + one_minus_beta2 * (g * g);
      weights[i] -=
          lr_ * (m[i] / correction1) / (std::sqrt(v[i] / correction2) + eps_);
    }
  }

  std::string ToString() const override {
    return "adam(lr=" + FormatFloat(lr_) + ",beta1=" + FormatFloat(beta1_) +
           ",beta2=" + FormatFloat(beta2_) + ",eps=" + FormatFloat(eps_) + ")";
  }

 private:
  const float lr_;
  const float beta1_;
  const float beta2_;
  const float eps_;
};

class FtrlOptimizer : public Optimizer {
 public:
  FtrlOptimizer(float alpha, float beta, float l1, float l2)
      : alpha_(alpha), beta_(beta), l1_(l1), l2_(l2) {}

  // z[dim], n[dim].
  int SlotFloats(int dim) const override { return 2 * dim; }

  void InitSlots(float* slots, int dim) const override {
    for (int i = 0; i < 2 * dim; ++i) slots[i] = 0.0f;
  }

  void Update(float* weights, float* slots, const float* grad,
              int dim) const override {
    float* z = slots;
    float* n = slots + dim;
    for (int i = 0; i < dim; ++i) {
      const float g = grad[i];
      const float n_new = n[i] + g * g;
      const float sigma = (std::sqrt(n_new) - std::sqrt(n[i])) / alpha_;
      z[i] = z[i] + (g - sigma * weights[i]);
      n[i] = n_new;
      if (std::fabs(z[i]) <= l1_) {
        weights[i] = 0.0f;
      } else {
        weights[i] = -(z[i] - std::copysign(l1_, z[i])) /
                     ((beta_ + std::sqrt(n[i])) / alpha_ + l2_);
      }
    }
  }

  std::string ToString() const override {
    return "ftrl(alpha=" + FormatFloat(alpha_) + ",beta=" + FormatFloat(beta_) +
           ",l1=" + FormatFloat(l1_) + ",l2=" + FormatFloat(l2_) + ")";
  }

 private:
  const float alpha_;
  const float beta_;
  const float l1_;
  const float l2_;
};

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

}  // namespace

StatusOr<std::unique_ptr<Optimizer>> Optimizer::Parse(const std::string& spec) {
  StatusOr<spec_internal::ParsedSpec> parsed_or =
      spec_internal::ParseSpecSyntax(spec, "optimizer");
  if (!parsed_or.ok()) return parsed_or.status();
  const spec_internal::ParsedSpec& parsed = parsed_or.value();
  const std::string context = "optimizer spec '" + spec + "'";
  constexpr auto kNumber = SpecParameter::Type::kNumber;
  constexpr auto kBool = SpecParameter::Type::kBool;

  std::vector<SpecParameter> parameters;
  if (parsed.name == "sgd") {
    parameters = {{"lr", nullptr, kNumber, true, 0}};
  } else if (parsed.name == "momentum") {
    parameters = {{"lr", nullptr, kNumber, true, 0},
                  {"momentum", nullptr, kNumber, false, 0.9},
                  {"nesterov", nullptr, kBool, false, 0}};
  } else if (parsed.name == "adagrad") {
    parameters = {{"lr", nullptr, kNumber, true, 0},
                  {"eps", nullptr, kNumber, false, 1e-8},
                  {"initial_accumulator", "initial_accumulator_value", kNumber,
                   false, 0}};
  } else if (parsed.name == "adam") {
    parameters = {{"lr", nullptr, kNumber, true, 0},
                  {"beta1", nullptr, kNumber, false, 0.9},
                  {"beta2", nullptr, kNumber, false, 0.999},
                  {"eps", nullptr, kNumber, false, 1e-8}};
  } else if (parsed.name == "ftrl") {
    parameters = {{"alpha", nullptr, kNumber, true, 0},
                  {"beta", nullptr, kNumber, false, 1},
                  {"l1", nullptr, kNumber, false, 0},
                  {"l2", nullptr, kNumber, false, 0}};
  } else {
    return Status::InvalidArgument(
        context + ": unknown optimizer '" + parsed.name +
        "' (expected sgd, momentum, adagrad, adam or ftrl)");
  }
  std::vector<double> values;
  PS_RETURN_IF_ERROR(
      spec_internal::BindSpecArguments(parsed, parameters, context, &values));
  std::vector<float> f;
  PS_RETURN_IF_ERROR(ToFloats(values, parameters, context, &f));

  std::unique_ptr<Optimizer> optimizer;
  if (parsed.name == "sgd") {
    PS_RETURN_IF_ERROR(RequirePositive(f[0], "lr", context));
    optimizer = std::make_unique<SgdOptimizer>(f[0]);
  } else if (parsed.name == "momentum") {
    PS_RETURN_IF_ERROR(RequirePositive(f[0], "lr", context));
    PS_RETURN_IF_ERROR(RequireUnitInterval(f[1], "momentum", context));
    optimizer = std::make_unique<MomentumOptimizer>(f[0], f[1], f[2] != 0);
  } else if (parsed.name == "adagrad") {
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
    optimizer = std::make_unique<AdagradOptimizer>(f[0], f[1], f[2]);
  } else if (parsed.name == "adam") {
    PS_RETURN_IF_ERROR(RequirePositive(f[0], "lr", context));
    PS_RETURN_IF_ERROR(RequireUnitInterval(f[1], "beta1", context));
    PS_RETURN_IF_ERROR(RequireUnitInterval(f[2], "beta2", context));
    PS_RETURN_IF_ERROR(RequirePositive(f[3], "eps", context));
    optimizer = std::make_unique<AdamOptimizer>(f[0], f[1], f[2], f[3]);
  } else {
    PS_RETURN_IF_ERROR(RequirePositive(f[0], "alpha", context));
    PS_RETURN_IF_ERROR(RequireNonNegative(f[1], "beta", context));
    PS_RETURN_IF_ERROR(RequireNonNegative(f[2], "l1", context));
    PS_RETURN_IF_ERROR(RequireNonNegative(f[3], "l2", context));
    optimizer = std::make_unique<FtrlOptimizer>(f[0], f[1], f[2], f[3]);
  }
  return optimizer;
}

}  // namespace model
}  // namespace ps
