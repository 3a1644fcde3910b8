// Initializer: how a parameter's first value is made, from a spec string
// such as "uniform(lo=-0.05,hi=0.05)".
//
// Fill() is a pure function of (spec, table id, row id, element index): the
// random numbers come from a counter-based generator (a SplitMix64-style hash
// of those integers), not from a stateful engine. So a row that is created
// lazily has the same initial value whichever server creates it and whenever,
// and a row that is lost and recreated comes back identical. The floating
// point steps (log, cos, sqrt in double, then one rounding to float) follow
// IEEE-754 and the C library's log/cos: bitwise identical across processes of
// the same build, close but not promised bitwise across C libraries.
//
// Thread-safety: an Initializer is an immutable value after Parse(); all
// const methods may be called from any number of threads at once.
//
// This header also holds the small "name(arg, key=value, ...)" spec parser
// that the optimizer specs share (namespace spec_internal); it is not part of
// the model layer's interface.
#ifndef PS_MODEL_INITIALIZER_H_
#define PS_MODEL_INITIALIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ps {
namespace model {

// Spec grammar, for initializers and optimizers alike:
//
//   spec     := name [ "(" [ argument { "," argument } ] ")" ]
//   argument := value | key "=" value
//
// Names and keys are [A-Za-z_][A-Za-z0-9_]*; spaces are allowed between
// tokens. Positional arguments come first, in the documented order; named
// ones may follow in any order. Numbers are decimal (as strtod reads them,
// without hex, inf or nan); booleans are true/false/1/0.
class Initializer {
 public:
  enum class Kind {
    kZeros,            // zeros: every element 0.
    kConstant,         // constant(value): every element `value`.
    kUniform,          // uniform(lo, hi): uniform on [lo, hi).
    kNormal,           // normal(mean, std).
    kTruncatedNormal,  // truncated_normal(mean, std): normal, redrawn
                       // while more than 2 std from the mean.
  };

  // The "zeros" initializer.
  Initializer() = default;

  // Parses `spec` (grammar above). Accepted forms, with argument names:
  //   zeros                      (also "zeros()")
  //   constant(value)
  //   uniform(lo, hi)            lo <= hi
  //   normal(mean, std)          std >= 0
  //   truncated_normal(mean, std) std >= 0
  // Every argument is required and must be finite. Returns kInvalidArgument,
  // with a message naming the problem, for an unknown name, a malformed or
  // non-finite number, a missing, unknown, repeated or extra argument,
  // lo > hi, std < 0, or characters after the closing parenthesis.
  static StatusOr<Initializer> Parse(const std::string& spec);

  // Writes the initial value of row `row_id` (the embedding ID, not a storage
  // position) of table `table_id` into out[0..dim). Element i depends only on
  // the spec, table_id, row_id and i. `out` is borrowed for the call.
  void Fill(uint64_t table_id, uint64_t row_id, float* out, int dim) const;

  // The canonical spec, which Parse() accepts and maps back to an equal
  // Initializer: all arguments named, numbers in their shortest round-trip
  // form, e.g. "uniform(lo=-0.1,hi=0.1)" or "zeros".
  std::string ToString() const;

  Kind kind() const { return kind_; }

 private:
  Initializer(Kind kind, double a, double b) : kind_(kind), a_(a), b_(b) {}

  Kind kind_ = Kind::kZeros;
  // constant: a_ = value. uniform: a_ = lo, b_ = hi. (truncated_)normal:
  // a_ = mean, b_ = std.
  double a_ = 0;
  double b_ = 0;
};

namespace spec_internal {

// The syntax of one spec, before its arguments are given meaning.
struct ParsedSpec {
  struct Argument {
    std::string key;  // Empty for a positional argument.
    std::string value;
  };
  std::string name;
  std::vector<Argument> arguments;
};

// Parses the grammar above. `what` ("initializer", "optimizer") starts the
// error messages. Returns kInvalidArgument on a syntax error.
StatusOr<ParsedSpec> ParseSpecSyntax(const std::string& spec, const char* what);

// One parameter a spec name accepts.
struct SpecParameter {
  enum class Type { kNumber, kBool };
  const char* name;
  const char* alias;  // Another accepted key, or nullptr.
  Type type;
  bool required;
  double default_value;  // For kBool: 0 or 1.
};

// Matches the arguments of `parsed` to `parameters` (positional ones by
// order, named ones by name or alias) and converts them: values->at(i) is the
// value of parameters[i], or its default. `context` (e.g. "optimizer
// 'sgd(x)'") starts the error messages. Returns kInvalidArgument for too many
// positional arguments, an unknown or repeated key, a missing required
// argument, or a value that is not a finite number (kNumber) or a boolean
// (kBool).
Status BindSpecArguments(const ParsedSpec& parsed,
                         const std::vector<SpecParameter>& parameters,
                         const std::string& context,
                         std::vector<double>* values);

// One name a spec may have, and the parameters it takes.
struct SpecForm {
  const char* name;
  std::vector<SpecParameter> parameters;
};

// A spec matched to one of its forms, with its arguments bound.
struct BoundSpec {
  size_t form = 0;             // The index of the form it names.
  std::vector<double> values;  // As BindSpecArguments gives them.
  std::string context;         // "<what> spec '<spec>'", for messages.
};

// ParseSpecSyntax, then the form of `forms` the spec names, then
// BindSpecArguments. Returns kInvalidArgument as those do, or for a name no
// form has (the message lists the forms' names).
StatusOr<BoundSpec> ParseSpec(const std::string& spec, const char* what,
                              const std::vector<SpecForm>& forms);

// The shortest decimal text that reads back as exactly `v`.
std::string FormatDouble(double v);
std::string FormatFloat(float v);

}  // namespace spec_internal

}  // namespace model
}  // namespace ps

#endif  // PS_MODEL_INITIALIZER_H_
