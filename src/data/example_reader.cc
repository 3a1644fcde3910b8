// The libsvm and Criteo readers (ps/data.h): line parsers and a streaming
// reader that keeps one line in memory at a time.
#include <glog/logging.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "ps/data.h"

namespace ps {
namespace data {
namespace {

std::string_view StripCarriageReturn(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
  });
}

// Quoted and shortened, for error messages.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "\"";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return out + "\"";
}

template <typename T>
bool ParseWhole(std::string_view s, T* out) {
  if (s.empty()) return false;
  // from_chars takes no '+': accept it as libsvm labels use it.
  if (s.front() == '+' && s.size() > 1 && s[1] != '-') s.remove_prefix(1);
  const auto [end, error] =
      std::from_chars(s.data(), s.data() + s.size(), *out);
  return error == std::errc() && end == s.data() + s.size();
}

bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return false;
    }
    v = v << 4 | static_cast<uint64_t>(digit);
  }
  *out = v;
  return true;
}

}  // namespace

uint64_t CriteoIntegerCode(int64_t v) {
  if (v <= 0) return static_cast<uint64_t>(std::max<int64_t>(v, -64));
  int log2 = 0;
  while (v >> (log2 + 1)) ++log2;
  return static_cast<uint64_t>(1 + log2);
}

Status ParseLibsvmLine(std::string_view line, Example* example) {
  line = StripCarriageReturn(line);
  example->ids.clear();
  example->values.clear();
  bool unit_values = true;
  size_t pos = 0;
  int token_index = -1;  // -1: the label.
  while (true) {
    pos = line.find_first_not_of(" \t", pos);
    if (pos == std::string_view::npos) break;
    size_t end = line.find_first_of(" \t", pos);
    if (end == std::string_view::npos) end = line.size();
    const std::string_view token = line.substr(pos, end - pos);
    pos = end;
    if (token_index++ < 0) {
      double label;
      if (!ParseWhole(token, &label) ||
          !(label == 1 || label == 0 || label == -1)) {
        return Status::InvalidArgument("label " + Quote(token) +
                                       " is not 0/1 or -1/+1");
      }
      example->label = label == 1 ? 1.0f : 0.0f;
      continue;
    }
    const size_t colon = token.find(':');
    const std::string_view id_text = token.substr(0, colon);
    uint64_t id;
    if (!ParseWhole(id_text, &id) || id_text.front() == '+') {
      return Status::InvalidArgument(
          "feature " + std::to_string(token_index) + " " + Quote(token) +
          ": id is not a decimal unsigned 64-bit integer");
    }
    float value = 1.0f;
    if (colon != std::string_view::npos) {
      const std::string_view value_text = token.substr(colon + 1);
      if (!ParseWhole(value_text, &value) || !std::isfinite(value)) {
        return Status::InvalidArgument(
            "feature " + std::to_string(token_index) + " " + Quote(token) +
            ": value is not a finite number");
      }
    }
    if (value != 1.0f && unit_values) {
      unit_values = false;
      example->values.assign(example->ids.size(), 1.0f);
    }
    example->ids.push_back(id);
    if (!unit_values) example->values.push_back(value);
  }
  if (token_index < 0) return Status::InvalidArgument("no label");
  return Status::OK();
}

Status ParseCriteoLine(std::string_view line, Example* example) {
  line = StripCarriageReturn(line);
  constexpr int kColumns = 1 + kCriteoIntegerFields + kCriteoCategoricalFields;
  example->ids.clear();
  example->values.clear();
  const size_t columns =
      1 + static_cast<size_t>(std::count(line.begin(), line.end(), '\t'));
  if (columns != static_cast<size_t>(kColumns)) {
    return Status::InvalidArgument("expected " + std::to_string(kColumns) +
                                   " tab-separated columns, got " +
                                   std::to_string(columns) +
                                   (columns == static_cast<size_t>(kColumns) - 1
                                        ? " (an unlabelled test file?)"
                                        : ""));
  }
  example->ids.reserve(kColumns - 1);
  size_t start = 0;
  for (int column = 0; column < kColumns; ++column) {
    const size_t tab = std::min(line.find('\t', start), line.size());
    const std::string_view cell = line.substr(start, tab - start);
    start = tab + 1;
    if (column == 0) {
      if (cell != "0" && cell != "1") {
        return Status::InvalidArgument("label " + Quote(cell) +
                                       " is not 0 or 1");
      }
      example->label = cell == "1" ? 1.0f : 0.0f;
      continue;
    }
    const uint32_t field = static_cast<uint32_t>(column - 1);
    uint64_t code = kMissingValue;
    if (!cell.empty()) {
      if (column <= kCriteoIntegerFields) {
        int64_t v;
        if (cell.front() == '+' || !ParseWhole(cell, &v)) {
          return Status::InvalidArgument(
              "integer column " + std::to_string(column) + " " + Quote(cell) +
              " is not a decimal 64-bit integer");
        }
        code = CriteoIntegerCode(v);
      } else if (!ParseHex(cell, &code)) {
        return Status::InvalidArgument(
            "categorical column " + std::to_string(column) + " " + Quote(cell) +
            " is not 1 to 16 hex digits");
      }
    }
    example->ids.push_back(FeatureId(field, code));
  }
  return Status::OK();
}

Status ReadOptions::Validate() const {
  if (num_shards < 1 || shard < 0 || shard >= num_shards) {
    return Status::InvalidArgument("shard " + std::to_string(shard) + " of " +
                                   std::to_string(num_shards) +
                                   ": need 0 <= shard < num_shards");
  }
  if (split != Split::kAll && test_every == 0) {
    return Status::InvalidArgument(
        "a train or test split needs test_every > 0");
  }
  if (max_logged_errors < 0) {
    return Status::InvalidArgument("max_logged_errors must be >= 0");
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<ExampleReader>> ExampleReader::Open(
    const std::string& path, Format format, const ReadOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  auto in = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!in->is_open()) {
    const int error = errno;
    const std::string message =
        "cannot open " + path + ": " + std::strerror(error);
    if (error == ENOENT) return Status::NotFound(message);
    return Status::Unavailable(message);
  }
  return std::unique_ptr<ExampleReader>(
      new ExampleReader(std::move(in), path, format, options));
}

StatusOr<std::unique_ptr<ExampleReader>> ExampleReader::FromStream(
    std::unique_ptr<std::istream> in, std::string name, Format format,
    const ReadOptions& options) {
  CHECK(in != nullptr);
  PS_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<ExampleReader>(
      new ExampleReader(std::move(in), std::move(name), format, options));
}

ExampleReader::ExampleReader(std::unique_ptr<std::istream> in, std::string name,
                             Format format, const ReadOptions& options)
    : in_(std::move(in)),
      name_(std::move(name)),
      format_(format),
      options_(options) {}

bool ExampleReader::Keep(uint64_t line_no) {
  if (options_.split != ReadOptions::Split::kAll) {
    const bool held_out =
        line_no % options_.test_every == options_.test_every - 1;
    if (held_out != (options_.split == ReadOptions::Split::kTest)) {
      return false;
    }
  }
  return split_ordinal_++ % static_cast<uint64_t>(options_.num_shards) ==
         static_cast<uint64_t>(options_.shard);
}

void ExampleReader::RecordError(uint64_t line_no, const Status& error) {
  ++stats_.malformed;
  if (stats_.malformed > static_cast<uint64_t>(options_.max_logged_errors)) {
    return;
  }
  // Line numbers in messages count from 1, as editors do.
  std::string message =
      name_ + ":" + std::to_string(line_no + 1) + ": " + error.message();
  LOG(WARNING) << "skipping malformed line " << message
               << (stats_.malformed ==
                           static_cast<uint64_t>(options_.max_logged_errors)
                       ? " (further malformed lines are only counted)"
                       : "");
  stats_.first_errors.push_back(std::move(message));
}

bool ExampleReader::Next(Example* example) {
  if (!status_.ok()) return false;
  while (std::getline(*in_, line_)) {
    const uint64_t line_no = stats_.lines++;
    if (!Keep(line_no)) continue;
    if (IsBlank(line_)) {
      ++stats_.blank;
      continue;
    }
    const Status parsed = format_ == Format::kLibsvm
                              ? ParseLibsvmLine(line_, example)
                              : ParseCriteoLine(line_, example);
    if (!parsed.ok()) {
      RecordError(line_no, parsed);
      continue;
    }
    ++stats_.examples;
    return true;
  }
  if (in_->bad()) {
    status_ = Status::Unavailable("read error in " + name_ + " after " +
                                  std::to_string(stats_.lines) + " lines");
  }
  return false;
}

size_t ExampleReader::ReadBatch(size_t max, std::vector<Example>* out) {
  size_t n = 0;
  Example example;
  while (n < max && Next(&example)) {
    out->push_back(std::move(example));
    ++n;
  }
  return n;
}

Status ReadExamples(const std::string& path, Format format,
                    const ReadOptions& options, std::vector<Example>* examples,
                    ReadStats* stats) {
  auto reader = ExampleReader::Open(path, format, options);
  if (!reader.ok()) return reader.status();
  reader.value()->ReadBatch(std::numeric_limits<size_t>::max(), examples);
  if (stats != nullptr) *stats = reader.value()->stats();
  return reader.value()->status();
}

}  // namespace data
}  // namespace ps
