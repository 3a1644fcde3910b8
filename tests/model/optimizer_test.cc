#include "model/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/dense_parameter.h"

namespace ps {
namespace model {
namespace {

using Code = Status::Code;

std::unique_ptr<Optimizer> MustParse(const std::string& spec) {
  StatusOr<std::unique_ptr<Optimizer>> parsed = Optimizer::Parse(spec);
  EXPECT_TRUE(parsed.ok()) << spec << ": " << parsed.status();
  if (!parsed.ok()) return nullptr;
  return std::move(parsed).value();
}

// Without FMA instructions the compiler cannot contract a*b+c, so the
// reference below, written in the same order as the documented formulas,
// must match bit for bit; with them, contraction may differ between the two
// translation units, and a tight tolerance applies.
void ExpectSame(float expected, float actual, const std::string& where) {
#if defined(__FMA__)
  EXPECT_NEAR(expected, actual, 1e-6 * std::max(1.0f, std::fabs(expected)))
      << where;
#else
  uint32_t a, b;
  std::memcpy(&a, &expected, 4);
  std::memcpy(&b, &actual, 4);
  EXPECT_EQ(a, b) << where << ": expected " << expected << ", got " << actual;
#endif
}

// Gradients of varied sign and magnitude, with some exact zeros.
std::vector<std::vector<float>> MakeGradients(int steps, int dim,
                                              uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-3, 2);
  std::vector<std::vector<float>> grads(steps, std::vector<float>(dim));
  for (auto& g : grads) {
    for (float& x : g) {
      x = (rng() % 10 == 0) ? 0.0f : normal(rng) * std::pow(10.0f, scale(rng));
    }
  }
  return grads;
}

// Runs `optimizer` over `grads` from weights `w0`, and the reference `step`
// (which sees weights and its own state) alongside; compares the weights and
// the slots (through `slots_of`, the reference state in slot layout) after
// every step.
template <typename Reference>
void CompareWithReference(const Optimizer& optimizer, Reference reference,
                          const std::vector<std::vector<float>>& grads,
                          const std::string& name) {
  const int dim = static_cast<int>(grads[0].size());
  std::vector<float> weights(dim);
  for (int i = 0; i < dim; ++i)
    weights[i] = 0.1f * static_cast<float>(i) - 0.3f;
  std::vector<float> ref_weights = weights;
  std::vector<float> slots(optimizer.SlotFloats(dim), -123.0f);
  optimizer.InitSlots(slots.data(), dim);
  for (size_t step = 0; step < grads.size(); ++step) {
    optimizer.Update(weights.data(), slots.data(), grads[step].data(), dim);
    reference.Step(ref_weights.data(), grads[step].data());
    const std::vector<float> ref_slots = reference.Slots();
    ASSERT_EQ(ref_slots.size(), slots.size());
    for (int i = 0; i < dim; ++i) {
      ExpectSame(ref_weights[i], weights[i],
                 name + " step " + std::to_string(step) + " weight " +
                     std::to_string(i));
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      ExpectSame(ref_slots[i], slots[i],
                 name + " step " + std::to_string(step) + " slot " +
                     std::to_string(i));
    }
    if (::testing::Test::HasFailure()) return;
  }
  for (float w : weights) EXPECT_TRUE(std::isfinite(w)) << name;
}

struct SgdReference {
  float lr;
  int dim;
  void Step(float* w, const float* g) {
    for (int i = 0; i < dim; ++i) w[i] = w[i] - lr * g[i];
  }
  std::vector<float> Slots() const { return {}; }
};

struct MomentumReference {
  float lr, mu;
  bool nesterov;
  std::vector<float> velocity;
  void Step(float* w, const float* g) {
    for (size_t i = 0; i < velocity.size(); ++i) {
      velocity[i] = mu * velocity[i] + g[i];
      const float direction = nesterov ? g[i] + mu * velocity[i] : velocity[i];
      w[i] = w[i] - lr * direction;
    }
  }
  std::vector<float> Slots() const { return velocity; }
};

struct AdagradReference {
  float lr, eps;
  std::vector<float> sum_of_squares;
  void Step(float* w, const float* g) {
    for (size_t i = 0; i < sum_of_squares.size(); ++i) {
      sum_of_squares[i] += g[i] * g[i];
      w[i] = w[i] - lr * g[i] / (std::sqrt(sum_of_squares[i]) + eps);
    }
  }
  std::vector<float> Slots() const { return sum_of_squares; }
};

struct AdamReference {
  float lr, beta1, beta2, eps;
  std::vector<float> m, v;
  float p1 = 1.0f, p2 = 1.0f;
  void Step(float* w, const float* g) {
    p1 = p1 * beta1;
    p2 = p2 * beta2;
    for (size_t i = 0; i < m.size(); ++i) {
      m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
      v[i] = beta2 * v[i] + (1.0f - beta2) * (g[i] * g[i]);
      const float m_hat = m[i] / (1.0f - p1);
      const float v_hat = v[i] / (1.0f - p2);
      w[i] = w[i] - lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
  std::vector<float> Slots() const {
    std::vector<float> s = m;
    s.insert(s.end(), v.begin(), v.end());
    s.push_back(p1);
    s.push_back(p2);
    return s;
  }
};

// FTRL-proximal as in McMahan et al. (2013), Algorithm 1, per coordinate.
struct FtrlReference {
  float alpha, beta, l1, l2;
  std::vector<float> z, n;
  void Step(float* w, const float* g) {
    for (size_t i = 0; i < z.size(); ++i) {
      const float sigma =
          (std::sqrt(n[i] + g[i] * g[i]) - std::sqrt(n[i])) / alpha;
      z[i] = z[i] + (g[i] - sigma * w[i]);
      n[i] = n[i] + g[i] * g[i];
      if (std::fabs(z[i]) <= l1) {
        w[i] = 0.0f;
      } else {
        const float sign = z[i] < 0 ? -1.0f : 1.0f;
        w[i] = -(z[i] - sign * l1) / ((beta + std::sqrt(n[i])) / alpha + l2);
      }
    }
  }
  std::vector<float> Slots() const {
    std::vector<float> s = z;
    s.insert(s.end(), n.begin(), n.end());
    return s;
  }
};

constexpr int kDim = 7;
constexpr int kSteps = 400;

TEST(OptimizerTest, SgdMatchesReference) {
  auto opt = MustParse("sgd(lr=0.05)");
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->SlotFloats(kDim), 0);
  CompareWithReference(*opt, SgdReference{0.05f, kDim},
                       MakeGradients(kSteps, kDim, 1), "sgd");
}

TEST(OptimizerTest, MomentumMatchesReference) {
  for (bool nesterov : {false, true}) {
    auto opt = MustParse(std::string("momentum(0.02, momentum=0.8, nesterov=") +
                         (nesterov ? "true" : "false") + ")");
    ASSERT_NE(opt, nullptr);
    EXPECT_EQ(opt->SlotFloats(kDim), kDim);
    CompareWithReference(
        *opt,
        MomentumReference{0.02f, 0.8f, nesterov, std::vector<float>(kDim, 0)},
        MakeGradients(kSteps, kDim, 2), nesterov ? "nesterov" : "momentum");
  }
}

TEST(OptimizerTest, AdagradMatchesReference) {
  auto opt = MustParse("adagrad(lr=0.1,eps=1e-6,initial_accumulator=0.25)");
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->SlotFloats(kDim), kDim);
  CompareWithReference(
      *opt, AdagradReference{0.1f, 1e-6f, std::vector<float>(kDim, 0.25f)},
      MakeGradients(kSteps, kDim, 3), "adagrad");
}

TEST(OptimizerTest, AdamMatchesReference) {
  auto opt = MustParse("adam(lr=0.01,beta1=0.8,beta2=0.99,eps=1e-6)");
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->SlotFloats(kDim), 2 * kDim + 2);
  CompareWithReference(
      *opt,
      AdamReference{0.01f, 0.8f, 0.99f, 1e-6f, std::vector<float>(kDim, 0),
                    std::vector<float>(kDim, 0)},
      MakeGradients(kSteps, kDim, 4), "adam");
}

TEST(OptimizerTest, FtrlMatchesReference) {
  auto opt = MustParse("ftrl(alpha=0.1,beta=1,l1=0.5,l2=0.01)");
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->SlotFloats(kDim), 2 * kDim);
  CompareWithReference(
      *opt,
      FtrlReference{0.1f, 1.0f, 0.5f, 0.01f, std::vector<float>(kDim, 0),
                    std::vector<float>(kDim, 0)},
      MakeGradients(kSteps, kDim, 5), "ftrl");
}

// Values worked out by hand, independent of the reference code above.
TEST(OptimizerTest, FirstStepsHaveTheTextbookValues) {
  const float g[2] = {0.5f, -2.0f};
  {
    auto opt = MustParse("sgd(0.1)");
    float w[2] = {1.0f, 1.0f};
    opt->Update(w, nullptr, g, 2);
    EXPECT_FLOAT_EQ(w[0], 0.95f);
    EXPECT_FLOAT_EQ(w[1], 1.2f);
  }
  {
    // Adagrad and Adam both take a first step of about lr * sign(g).
    for (const char* spec : {"adagrad(lr=0.1)", "adam(lr=0.1)"}) {
      auto opt = MustParse(spec);
      std::vector<float> slots(opt->SlotFloats(2));
      opt->InitSlots(slots.data(), 2);
      float w[2] = {0.0f, 0.0f};
      opt->Update(w, slots.data(), g, 2);
      EXPECT_NEAR(w[0], -0.1f, 1e-6) << spec;
      EXPECT_NEAR(w[1], 0.1f, 1e-6) << spec;
    }
  }
  {
    // Momentum: the second step moves by lr * (g + mu * g).
    auto opt = MustParse("momentum(lr=1,momentum=0.5)");
    float v[2];
    opt->InitSlots(v, 2);
    float w[2] = {0.0f, 0.0f};
    opt->Update(w, v, g, 2);
    opt->Update(w, v, g, 2);
    EXPECT_FLOAT_EQ(w[0], -(0.5f + 0.75f));
  }
  {
    // FTRL from z = n = 0, w = 0, l1 = 0: z = g, n = g^2,
    // w = -g / ((beta + |g|) / alpha).
    auto opt = MustParse("ftrl(alpha=0.5,beta=1)");
    float slots[4];
    opt->InitSlots(slots, 2);
    float w[2] = {0.0f, 0.0f};
    opt->Update(w, slots, g, 2);
    EXPECT_FLOAT_EQ(w[0], -0.5f / (1.5f / 0.5f));
    EXPECT_FLOAT_EQ(w[1], 2.0f / (3.0f / 0.5f));
  }
}

TEST(OptimizerTest, FtrlL1KeepsWeightsExactlyZeroWhileZIsBelowIt) {
  // Gradients in [-1, 1] over 20 steps keep |z| <= 20 from w = 0.
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (const char* spec : {"ftrl(alpha=0.1,l1=25)", "ftrl(alpha=0.1,l1=0)"}) {
    auto opt = MustParse(spec);
    std::vector<float> slots(opt->SlotFloats(kDim));
    opt->InitSlots(slots.data(), kDim);
    std::vector<float> w(kDim, 0.0f);
    std::vector<float> g(kDim);
    for (int step = 0; step < 20; ++step) {
      for (float& x : g) x = unit(rng);
      opt->Update(w.data(), slots.data(), g.data(), kDim);
    }
    int zeros = 0;
    for (float x : w) zeros += x == 0.0f;
    if (std::string(spec).find("l1=25") != std::string::npos) {
      EXPECT_EQ(zeros, kDim) << spec;
    } else {
      EXPECT_EQ(zeros, 0) << spec;
    }
  }
}

TEST(OptimizerTest, AdamBiasCorrectionIsPerRow) {
  auto opt = MustParse("adam(lr=0.01)");
  const int dim = 3;
  std::vector<float> a(opt->SlotFloats(dim)), b(opt->SlotFloats(dim));
  opt->InitSlots(a.data(), dim);
  opt->InitSlots(b.data(), dim);
  EXPECT_EQ(a[2 * dim], 1.0f);
  EXPECT_EQ(a[2 * dim + 1], 1.0f);
  const float g[dim] = {1, 2, 3};
  float wa[dim] = {0, 0, 0}, wb[dim] = {0, 0, 0};
  for (int i = 0; i < 5; ++i) opt->Update(wa, a.data(), g, dim);
  opt->Update(wb, b.data(), g, dim);
  float p1 = 1.0f, p2 = 1.0f;
  for (int i = 0; i < 5; ++i) {
    p1 *= 0.9f;
    p2 *= 0.999f;
  }
  EXPECT_EQ(a[2 * dim], p1);
  EXPECT_EQ(a[2 * dim + 1], p2);
  EXPECT_EQ(b[2 * dim], 0.9f);
  EXPECT_EQ(b[2 * dim + 1], 0.999f);
}

TEST(OptimizerTest, ParseAcceptsPositionalNamedAndDefaults) {
  struct Case {
    const char* spec;
    const char* canonical;
  };
  const Case cases[] = {
      {"sgd(lr=0.01)", "sgd(lr=0.01)"},
      {"sgd(0.01)", "sgd(lr=0.01)"},
      {"  sgd ( lr = 0.5 )  ", "sgd(lr=0.5)"},
      {"sgd(+1e-3)", "sgd(lr=0.001)"},
      {"momentum(lr=0.1)", "momentum(lr=0.1,momentum=0.9,nesterov=false)"},
      {"momentum(0.1, 0.5, true)",
       "momentum(lr=0.1,momentum=0.5,nesterov=true)"},
      {"momentum(0.1, nesterov=1)",
       "momentum(lr=0.1,momentum=0.9,nesterov=true)"},
      {"adagrad(lr=0.1)", "adagrad(lr=0.1,eps=1e-08,initial_accumulator=0)"},
      {"adagrad(lr=0.1,initial_accumulator_value=0.1,eps=0)",
       "adagrad(lr=0.1,eps=0,initial_accumulator=0.1)"},
      {"adam(lr=0.001)", "adam(lr=0.001,beta1=0.9,beta2=0.999,eps=1e-08)"},
      {"adam(0.001, 0.5, beta2=0.9)",
       "adam(lr=0.001,beta1=0.5,beta2=0.9,eps=1e-08)"},
      {"adam(lr=1e-3,beta1=0)", "adam(lr=0.001,beta1=0,beta2=0.999,eps=1e-08)"},
      {"ftrl(alpha=0.05)", "ftrl(alpha=0.05,beta=1,l1=0,l2=0)"},
      {"ftrl(0.05, 0.5, 1, 2)", "ftrl(alpha=0.05,beta=0.5,l1=1,l2=2)"},
  };
  for (const Case& c : cases) {
    StatusOr<std::unique_ptr<Optimizer>> parsed = Optimizer::Parse(c.spec);
    ASSERT_TRUE(parsed.ok()) << c.spec << ": " << parsed.status();
    const std::string canonical = parsed.value()->ToString();
    EXPECT_EQ(canonical, c.canonical) << c.spec;
    // The canonical form parses back to itself.
    StatusOr<std::unique_ptr<Optimizer>> again = Optimizer::Parse(canonical);
    ASSERT_TRUE(again.ok()) << canonical << ": " << again.status();
    EXPECT_EQ(again.value()->ToString(), canonical);
  }
}

TEST(OptimizerTest, ParseRejectsMalformedSpecsWithAReason) {
  struct Case {
    const char* spec;
    const char* reason;  // A substring of the message.
  };
  const Case cases[] = {
      {"", "empty spec"},
      {"rmsprop(lr=0.1)", "unknown optimizer 'rmsprop'"},
      {"SGD(lr=0.1)", "unknown optimizer 'SGD'"},
      {"sgd", "missing required argument 'lr'"},
      {"sgd()", "missing required argument 'lr'"},
      {"adam(beta1=0.5)", "missing required argument 'lr'"},
      {"ftrl(beta=1)", "missing required argument 'alpha'"},
      {"sgd(lr=abc)", "'abc' is not a finite number"},
      {"sgd(lr=0.1x)", "'0.1x' is not a finite number"},
      {"sgd(lr=nan)", "not a finite number"},
      {"sgd(lr=inf)", "not a finite number"},
      {"sgd(lr=0x10)", "not a finite number"},
      {"sgd(lr=1e999)", "not a finite number"},
      {"sgd(lr=1e300)", "out of float range"},
      {"sgd(lr=0)", "lr (0) must be > 0"},
      {"sgd(lr=-0.1)", "lr (-0.1) must be > 0"},
      {"sgd(0.1, 0.2)", "too many arguments"},
      {"sgd(lr=0.1, momentum=0.9)", "unknown argument 'momentum'"},
      {"sgd(lr=0.1, lr=0.2)", "'lr' given twice"},
      {"sgd(0.1, lr=0.2)", "'lr' given twice"},
      {"momentum(momentum=0.5, 0.1)",
       "positional argument '0.1' after a named"},
      {"momentum(lr=0.1,momentum=1)", "momentum (1) must be in [0, 1)"},
      {"momentum(lr=0.1,nesterov=maybe)", "'maybe' is not a boolean"},
      {"adagrad(lr=0.1,eps=-1)", "eps (-1) must be >= 0"},
      {"adagrad(lr=0.1,eps=0)", "cannot both be 0"},
      {"adagrad(lr=0.1,initial_accumulator=-1)",
       "initial_accumulator (-1) must be >= 0"},
      {"adam(lr=0.1,beta1=1)", "beta1 (1) must be in [0, 1)"},
      {"adam(lr=0.1,beta2=-0.1)", "beta2 (-0.1) must be in [0, 1)"},
      {"adam(lr=0.1,eps=0)", "eps (0) must be > 0"},
      {"ftrl(alpha=0)", "alpha (0) must be > 0"},
      {"ftrl(alpha=0.1,l1=-1)", "l1 (-1) must be >= 0"},
      {"ftrl(alpha=0.1,beta=-1)", "beta (-1) must be >= 0"},
      {"sgd(lr=0.1", "missing ')'"},
      {"sgd(lr=0.1))", "unexpected ')' after ')'"},
      {"sgd(lr=0.1) extra", "unexpected 'extra' after ')'"},
      {"sgd lr", "unexpected 'lr' after the name 'sgd'"},
      {"sgd(lr=0.1,)", "empty argument"},
      {"sgd(,lr=0.1)", "empty argument"},
      {"sgd(lr=)", "argument 'lr' has no value"},
      {"sgd(1x=0.1)", "bad argument name '1x'"},
      {"sgd(lr=(0.1))", "unexpected '('"},
      {"(lr=0.1)", "expected a name"},
  };
  for (const Case& c : cases) {
    StatusOr<std::unique_ptr<Optimizer>> parsed = Optimizer::Parse(c.spec);
    ASSERT_FALSE(parsed.ok()) << "accepted '" << c.spec << "'";
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument) << c.spec;
    EXPECT_NE(parsed.status().message().find(c.reason), std::string::npos)
        << "spec '" << c.spec << "' gave: " << parsed.status().message()
        << "\nexpected it to contain: " << c.reason;
  }
}

TEST(DenseChunkTest, AppliesTheSharedOptimizerToTheWholeVector) {
  std::shared_ptr<const Optimizer> opt = MustParse("adagrad(lr=0.1)");
  StatusOr<std::unique_ptr<DenseChunk>> made = DenseChunk::Create("w", 5, opt);
  ASSERT_TRUE(made.ok()) << made.status();
  DenseChunk& chunk = *made.value();
  EXPECT_EQ(chunk.size(), 5u);
  EXPECT_EQ(chunk.slot_size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(chunk.values()[i], 0.0f);

  const float initial[5] = {1, 2, 3, 4, 5};
  ASSERT_TRUE(chunk.Set(initial, 5).ok());
  const float g[5] = {0.5f, -1, 0, 2, 1e-3f};
  ASSERT_TRUE(chunk.ApplyGradient(g, 5).ok());
  // The same update done by hand through the optimizer.
  float w[5] = {1, 2, 3, 4, 5};
  float slots[5];
  opt->InitSlots(slots, 5);
  opt->Update(w, slots, g, 5);
  float got[5];
  ASSERT_TRUE(chunk.Get(got, 5).ok());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(got[i], w[i]) << i;
    EXPECT_EQ(chunk.slots()[i], slots[i]) << i;
  }
}

TEST(DenseChunkTest, RejectsWrongSizesAndNonFiniteGradients) {
  std::shared_ptr<const Optimizer> opt = MustParse("sgd(lr=0.1)");
  EXPECT_EQ(DenseChunk::Create("w", 0, opt).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(DenseChunk::Create("w", 3, nullptr).status().code(),
            Code::kInvalidArgument);
  auto made = DenseChunk::Create("w", 3, opt);
  ASSERT_TRUE(made.ok());
  DenseChunk& chunk = *made.value();
  const float v[4] = {1, 2, 3, 4};
  EXPECT_EQ(chunk.Set(v, 4).code(), Code::kInvalidArgument);
  EXPECT_EQ(chunk.Set(v, 2).code(), Code::kInvalidArgument);
  float out[4];
  EXPECT_EQ(chunk.Get(out, 4).code(), Code::kInvalidArgument);
  EXPECT_EQ(chunk.ApplyGradient(v, 4).code(), Code::kInvalidArgument);
  EXPECT_EQ(chunk.SetSlots(v, 1).code(), Code::kInvalidArgument);
  ASSERT_TRUE(chunk.Set(v, 3).ok());
  const float bad[3] = {0.1f, std::nanf(""), 0.1f};
  const Status s = chunk.ApplyGradient(bad, 3);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("element 1"), std::string::npos) << s;
  ASSERT_TRUE(chunk.Get(out, 3).ok());
  EXPECT_EQ(out[0], 1.0f);  // Unchanged.
  EXPECT_EQ(out[2], 3.0f);
}

}  // namespace
}  // namespace model
}  // namespace ps
