// Fuzz target: a checkpoint file. With the input's first byte even, the
// input is the whole file (header checks); otherwise the rest of the input is
// the payload under a valid header, checksums included, so the fuzzer reaches
// the payload parser and the shard's validation.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "model/checkpoint.h"
#include "util/coding.h"
#include "util/crc32c.h"

namespace {

// The first 12 bytes (magic and format version) of a real checkpoint.
std::string RealHeaderStart() {
  char dir[] = "/tmp/ember-fuzz.XXXXXX";
  if (mkdtemp(dir) == nullptr) return std::string();
  std::string path = std::string(dir) + "/shard";
  ps::model::ModelShard shard;
  std::string start;
  if (ps::model::WriteCheckpoint(path, shard).ok()) {
    FILE* f = std::fopen(path.c_str(), "rb");
    char buf[12];
    if (f != nullptr && std::fread(buf, 1, sizeof(buf), f) == sizeof(buf)) {
      start.assign(buf, sizeof(buf));
    }
    if (f != nullptr) std::fclose(f);
  }
  unlink(path.c_str());
  rmdir(dir);
  return start;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kStart = RealHeaderStart();
  if (size == 0 || kStart.size() != 12) return 0;
  std::string file;
  if (data[0] % 2 == 0) {
    file.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  } else {
    const char* payload = reinterpret_cast<const char*>(data + 1);
    const size_t n = size - 1;
    char header[ps::model::kCheckpointHeaderSize] = {};
    std::memcpy(header, kStart.data(), 12);
    ps::EncodeFixed64(header + 16, n);
    ps::EncodeFixed32(header + 24, ps::Crc32c(0, payload, n));
    ps::EncodeFixed32(header + 28, ps::Crc32c(0, header, 28));
    file.assign(header, sizeof(header));
    file.append(payload, n);
  }
  // An in-memory file: ReadCheckpoint opens it by its /proc path.
  int fd = memfd_create("ember-fuzz-checkpoint", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (write(fd, file.data(), file.size()) ==
      static_cast<ssize_t>(file.size())) {
    auto shard =
        ps::model::ReadCheckpoint("/proc/self/fd/" + std::to_string(fd));
    if (shard.ok()) (void)ps::model::ValidateShard(shard.value());
  }
  close(fd);
  return 0;
}
