#include "node/consistency_config.h"

#include <cerrno>
#include <cstdlib>

namespace ps {

namespace {

// The largest staleness accepted; a bound this loose is asp in all but name.
constexpr int64_t kMaxStaleness = 1 << 30;

Status ParseStaleness(const std::string& text, const std::string& source,
                      int64_t* out) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == text.c_str() || *end != '\0') {
    return Status::InvalidArgument(source + ": staleness '" + text +
                                   "' is not an integer");
  }
  if (v < 0 || v > kMaxStaleness) {
    return Status::InvalidArgument(source + ": staleness " + text +
                                   " is out of range [0, " +
                                   std::to_string(kMaxStaleness) + "]");
  }
  *out = v;
  return Status::OK();
}

}  // namespace

StatusOr<ConsistencyConfig> ConsistencyConfig::Parse(const std::string& spec) {
  const std::string source = "consistency '" + spec + "'";
  std::string name = spec;
  std::string arg;
  bool has_arg = false;
  size_t colon = spec.find(':');
  size_t paren = spec.find('(');
  if (colon != std::string::npos) {
    name = spec.substr(0, colon);
    arg = spec.substr(colon + 1);
    has_arg = true;
  } else if (paren != std::string::npos) {
    if (spec.back() != ')') {
      return Status::InvalidArgument(source + ": missing ')'");
    }
    name = spec.substr(0, paren);
    arg = spec.substr(paren + 1, spec.size() - paren - 2);
    has_arg = true;
  }
  return FromSettings(name, has_arg ? &arg : nullptr);
}

StatusOr<ConsistencyConfig> ConsistencyConfig::FromSettings(
    const std::string& mode, const std::string* staleness) {
  ConsistencyConfig c;
  if (mode == "asp") {
    c.mode = Mode::kAsp;
    c.staleness = kUnbounded;
  } else if (mode == "bsp") {
    c.mode = Mode::kBsp;
    c.staleness = 0;
  } else if (mode == "ssp") {
    c.mode = Mode::kSsp;
    if (staleness == nullptr) {
      return Status::InvalidArgument(
          "consistency ssp needs a staleness bound: EMBER_STALENESS=s or "
          "'ssp:s'");
    }
    PS_RETURN_IF_ERROR(ParseStaleness(*staleness, "ssp", &c.staleness));
    return c;
  } else {
    return Status::InvalidArgument("consistency '" + mode +
                                   "': expected asp, ssp or bsp");
  }
  if (staleness != nullptr) {
    return Status::InvalidArgument("a staleness bound ('" + *staleness +
                                   "') applies only to ssp, not to " + mode);
  }
  return c;
}

std::string ConsistencyConfig::ToString() const {
  switch (mode) {
    case Mode::kAsp:
      return "asp";
    case Mode::kBsp:
      return "bsp";
    case Mode::kSsp:
      return "ssp:" + std::to_string(staleness);
  }
  return "?";
}

}  // namespace ps
