#include "model/initializer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>
#include <utility>

#include "util/mix.h"

namespace ps {
namespace model {
namespace spec_internal {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

bool IsIdentifierStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool IsIdentifierChar(char c) {
  return IsIdentifierStart(c) || (c >= '0' && c <= '9');
}

bool IsIdentifier(const std::string& s) {
  if (s.empty() || !IsIdentifierStart(s[0])) return false;
  for (char c : s) {
    if (!IsIdentifierChar(c)) return false;
  }
  return true;
}

std::string Trim(const std::string& s) {
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && IsSpace(s[begin])) ++begin;
  while (end > begin && IsSpace(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

// Reads all of `text` as a finite double. from_chars rather than strtod: it
// ignores the locale and refuses hex; inf and nan it reads, and we refuse.
bool ParseFiniteDouble(const std::string& text, double* out) {
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  // from_chars refuses a leading '+', which people write ("+0.5").
  if (begin != end && *begin == '+') {
    ++begin;
    if (begin != end && (*begin == '-' || *begin == '+')) return false;
  }
  if (begin == end) return false;
  double value = 0;
  const std::from_chars_result result =
      std::from_chars(begin, end, value, std::chars_format::general);
  if (result.ec != std::errc() || result.ptr != end) return false;
  if (!std::isfinite(value)) return false;
  *out = value;
  return true;
}

bool ParseBool(const std::string& text, double* out) {
  std::string lower;
  for (char c : text) {
    lower.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a')
                                         : c);
  }
  if (lower == "true" || lower == "1") {
    *out = 1;
    return true;
  }
  if (lower == "false" || lower == "0") {
    *out = 0;
    return true;
  }
  return false;
}

std::string ParameterList(const std::vector<SpecParameter>& parameters) {
  std::string names;
  for (const SpecParameter& p : parameters) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names.empty() ? "none" : names;
}

}  // namespace

StatusOr<ParsedSpec> ParseSpecSyntax(const std::string& spec,
                                     const char* what) {
  const std::string prefix = std::string(what) + " spec '" + spec + "': ";
  const std::string text = Trim(spec);
  if (text.empty()) return Status::InvalidArgument(prefix + "empty spec");

  ParsedSpec parsed;
  size_t pos = 0;
  if (!IsIdentifierStart(text[0])) {
    return Status::InvalidArgument(prefix + "expected a name at the start");
  }
  while (pos < text.size() && IsIdentifierChar(text[pos])) ++pos;
  parsed.name = text.substr(0, pos);
  while (pos < text.size() && IsSpace(text[pos])) ++pos;
  if (pos == text.size()) return parsed;
  if (text[pos] != '(') {
    return Status::InvalidArgument(prefix + "unexpected '" + text.substr(pos) +
                                   "' after the name '" + parsed.name + "'");
  }
  ++pos;
  const size_t close = text.find(')', pos);
  if (close == std::string::npos) {
    return Status::InvalidArgument(prefix + "missing ')'");
  }
  const std::string inside = text.substr(pos, close - pos);
  if (inside.find('(') != std::string::npos) {
    return Status::InvalidArgument(prefix + "unexpected '(' in the arguments");
  }
  if (close + 1 != text.size()) {
    return Status::InvalidArgument(
        prefix + "unexpected '" + Trim(text.substr(close + 1)) + "' after ')'");
  }
  if (Trim(inside).empty()) return parsed;

  size_t begin = 0;
  while (true) {
    size_t comma = inside.find(',', begin);
    const bool last = comma == std::string::npos;
    if (last) comma = inside.size();
    const std::string item = Trim(inside.substr(begin, comma - begin));
    if (item.empty()) {
      return Status::InvalidArgument(prefix + "empty argument");
    }
    ParsedSpec::Argument argument;
    const size_t equals = item.find('=');
    if (equals == std::string::npos) {
      argument.value = item;
    } else {
      argument.key = Trim(item.substr(0, equals));
      argument.value = Trim(item.substr(equals + 1));
      if (!IsIdentifier(argument.key)) {
        return Status::InvalidArgument(prefix + "bad argument name '" +
                                       argument.key + "'");
      }
      if (argument.value.empty()) {
        return Status::InvalidArgument(prefix + "argument '" + argument.key +
                                       "' has no value");
      }
    }
    parsed.arguments.push_back(std::move(argument));
    if (last) break;
    begin = comma + 1;
  }
  return parsed;
}

Status BindSpecArguments(const ParsedSpec& parsed,
                         const std::vector<SpecParameter>& parameters,
                         const std::string& context,
                         std::vector<double>* values) {
  const std::string prefix = context + ": ";
  values->assign(parameters.size(), 0);
  std::vector<bool> given(parameters.size(), false);
  size_t positional = 0;
  bool seen_named = false;
  for (const ParsedSpec::Argument& argument : parsed.arguments) {
    size_t index = parameters.size();
    if (argument.key.empty()) {
      if (seen_named) {
        return Status::InvalidArgument(prefix + "positional argument '" +
                                       argument.value + "' after a named one");
      }
      if (positional >= parameters.size()) {
        return Status::InvalidArgument(prefix + "too many arguments: '" +
                                       parsed.name + "' takes " +
                                       std::to_string(parameters.size()) +
                                       " (" + ParameterList(parameters) + ")");
      }
      index = positional++;
    } else {
      seen_named = true;
      for (size_t i = 0; i < parameters.size(); ++i) {
        if (argument.key == parameters[i].name ||
            (parameters[i].alias != nullptr &&
             argument.key == parameters[i].alias)) {
          index = i;
          break;
        }
      }
      if (index == parameters.size()) {
        return Status::InvalidArgument(prefix + "unknown argument '" +
                                       argument.key + "' (expected " +
                                       ParameterList(parameters) + ")");
      }
    }
    const SpecParameter& parameter = parameters[index];
    if (given[index]) {
      return Status::InvalidArgument(prefix + "argument '" + parameter.name +
                                     "' given twice");
    }
    given[index] = true;
    double value = 0;
    if (parameter.type == SpecParameter::Type::kBool) {
      if (!ParseBool(argument.value, &value)) {
        return Status::InvalidArgument(prefix + "argument '" + parameter.name +
                                       "': '" + argument.value +
                                       "' is not a boolean (true or false)");
      }
    } else if (!ParseFiniteDouble(argument.value, &value)) {
      return Status::InvalidArgument(prefix + "argument '" + parameter.name +
                                     "': '" + argument.value +
                                     "' is not a finite number");
    }
    (*values)[index] = value;
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (given[i]) continue;
    if (parameters[i].required) {
      return Status::InvalidArgument(prefix + "missing required argument '" +
                                     parameters[i].name + "'");
    }
    (*values)[i] = parameters[i].default_value;
  }
  return Status::OK();
}

StatusOr<BoundSpec> ParseSpec(const std::string& spec, const char* what,
                              const std::vector<SpecForm>& forms) {
  StatusOr<ParsedSpec> parsed_or = ParseSpecSyntax(spec, what);
  if (!parsed_or.ok()) return parsed_or.status();
  const ParsedSpec& parsed = parsed_or.value();
  BoundSpec bound;
  bound.context = std::string(what) + " spec '" + spec + "'";
  bound.form = forms.size();
  std::string names;  // "a, b or c"
  for (size_t i = 0; i < forms.size(); ++i) {
    if (parsed.name == forms[i].name) bound.form = i;
    if (i > 0) names += i + 1 < forms.size() ? ", " : " or ";
    names += forms[i].name;
  }
  if (bound.form == forms.size()) {
    return Status::InvalidArgument(bound.context + ": unknown " + what + " '" +
                                   parsed.name + "' (expected " + names + ")");
  }
  PS_RETURN_IF_ERROR(BindSpecArguments(parsed, forms[bound.form].parameters,
                                       bound.context, &bound.values));
  return bound;
}

namespace {

// The shortest text that reads back as `v` (std::to_chars).
template <typename T>
std::string FormatShortest(T v) {
  char buffer[64];
  const std::to_chars_result result =
      std::to_chars(buffer, buffer + sizeof(buffer), v);
  CHECK(result.ec == std::errc());
  return std::string(buffer, result.ptr);
}

}  // namespace

std::string FormatDouble(double v) { return FormatShortest(v); }

std::string FormatFloat(float v) { return FormatShortest(v); }

}  // namespace spec_internal

namespace {

using spec_internal::SpecParameter;

// SplitMix64's output function (util/mix.h) has full avalanche, so nearby
// counters give unrelated bits.
constexpr uint64_t kGolden = kGoldenGamma;
inline uint64_t Mix64(uint64_t z) { return SplitMix64(z); }

inline uint64_t RowKey(uint64_t table_id, uint64_t row_id) {
  return Mix64(Mix64(table_id + kGolden) ^ row_id);
}

// The random bits of draw `counter` of a row: counters are
// (element index << 32) | draw number, so each element has its own stream.
inline uint64_t Bits(uint64_t row_key, uint64_t counter) {
  return Mix64(row_key ^ Mix64((counter + 1) * kGolden));
}

inline uint64_t Counter(int index, uint32_t draw) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(index)) << 32) | draw;
}

// Uniform on [0, 1), 53 random bits.
inline double UnitOpen1(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Uniform on (0, 1]: never 0, so log() is finite.
inline double UnitOpen0(uint64_t bits) {
  return static_cast<double>((bits >> 11) + 1) * 0x1.0p-53;
}

// Standard normal number `k` of an element, by Box-Muller from uniforms
// 2k and 2k+1 of its stream (the sine half is not used: every draw is a
// function of its own counters only).
inline double StandardNormal(uint64_t row_key, int index, uint32_t k) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double u1 = UnitOpen0(Bits(row_key, Counter(index, 2 * k)));
  const double u2 = UnitOpen1(Bits(row_key, Counter(index, 2 * k + 1)));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

// A truncated normal redraws beyond 2 std; a draw is rejected with
// probability 4.6%, so 1000 rejections in a row never happen in practice.
// The bound only guarantees termination (the mean is used then).
constexpr uint32_t kMaxTruncatedDraws = 1000;

}  // namespace

StatusOr<Initializer> Initializer::Parse(const std::string& spec) {
  constexpr auto kNumber = SpecParameter::Type::kNumber;
  // In the order of Kind.
  const std::vector<spec_internal::SpecForm> forms = {
      {"zeros", {}},
      {"constant", {{"value", nullptr, kNumber, true, 0}}},
      {"uniform",
       {{"lo", nullptr, kNumber, true, 0}, {"hi", nullptr, kNumber, true, 0}}},
      {"normal",
       {{"mean", nullptr, kNumber, true, 0},
        {"std", nullptr, kNumber, true, 0}}},
      {"truncated_normal",
       {{"mean", nullptr, kNumber, true, 0},
        {"std", nullptr, kNumber, true, 0}}},
  };
  StatusOr<spec_internal::BoundSpec> bound =
      spec_internal::ParseSpec(spec, "initializer", forms);
  if (!bound.ok()) return bound.status();
  const Kind kind = static_cast<Kind>(bound.value().form);
  const std::string& context = bound.value().context;
  std::vector<double> values = std::move(bound.value().values);
  values.resize(2, 0);
  if (kind == Kind::kUniform && values[0] > values[1]) {
    return Status::InvalidArgument(
        context + ": lo (" + spec_internal::FormatDouble(values[0]) +
        ") is greater than hi (" + spec_internal::FormatDouble(values[1]) +
        ")");
  }
  if ((kind == Kind::kNormal || kind == Kind::kTruncatedNormal) &&
      values[1] < 0) {
    return Status::InvalidArgument(context + ": std (" +
                                   spec_internal::FormatDouble(values[1]) +
                                   ") is negative");
  }
  // Every value Fill() can produce must be a finite float. A standard normal
  // from 53-bit uniforms stays within 8.6 of zero, so 9 std bounds it.
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  double largest = std::fabs(values[0]);
  if (kind == Kind::kUniform) {
    largest = std::max(largest, std::fabs(values[1]));
  } else if (kind == Kind::kNormal || kind == Kind::kTruncatedNormal) {
    largest += 9 * values[1];
  }
  if (!(largest <= kFloatMax)) {
    return Status::InvalidArgument(context +
                                   ": values would not fit in a float");
  }
  return Initializer(kind, values[0], values[1]);
}

void Initializer::Fill(uint64_t table_id, uint64_t row_id, float* out,
                       int dim) const {
  switch (kind_) {
    case Kind::kZeros:
      for (int i = 0; i < dim; ++i) out[i] = 0.0f;
      return;
    case Kind::kConstant:
      for (int i = 0; i < dim; ++i) out[i] = static_cast<float>(a_);
      return;
    case Kind::kUniform: {
      const uint64_t key = RowKey(table_id, row_id);
      const double width = b_ - a_;
      for (int i = 0; i < dim; ++i) {
        const double u = UnitOpen1(Bits(key, Counter(i, 0)));
        out[i] = static_cast<float>(a_ + width * u);
      }
      return;
    }
    case Kind::kNormal: {
      const uint64_t key = RowKey(table_id, row_id);
      for (int i = 0; i < dim; ++i) {
        out[i] = static_cast<float>(a_ + b_ * StandardNormal(key, i, 0));
      }
      return;
    }
    case Kind::kTruncatedNormal: {
      const uint64_t key = RowKey(table_id, row_id);
      for (int i = 0; i < dim; ++i) {
        double z = 0;
        for (uint32_t k = 0; k < kMaxTruncatedDraws; ++k) {
          const double draw = StandardNormal(key, i, k);
          if (std::fabs(draw) <= 2.0) {
            z = draw;
            break;
          }
        }
        out[i] = static_cast<float>(a_ + b_ * z);
      }
      return;
    }
  }
}

std::string Initializer::ToString() const {
  using spec_internal::FormatDouble;
  switch (kind_) {
    case Kind::kZeros:
      return "zeros";
    case Kind::kConstant:
      return "constant(value=" + FormatDouble(a_) + ")";
    case Kind::kUniform:
      return "uniform(lo=" + FormatDouble(a_) + ",hi=" + FormatDouble(b_) + ")";
    case Kind::kNormal:
      return "normal(mean=" + FormatDouble(a_) + ",std=" + FormatDouble(b_) +
             ")";
    case Kind::kTruncatedNormal:
      return "truncated_normal(mean=" + FormatDouble(a_) +
             ",std=" + FormatDouble(b_) + ")";
  }
  return "zeros";
}

}  // namespace model
}  // namespace ps
