#include "util/secret.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/file.h"

namespace ps {

StatusOr<std::string> NewSecret(size_t bytes) {
  std::string key(bytes, '\0');
  size_t have = 0;
  while (have < bytes) {
    ssize_t n = getrandom(&key[have], bytes - have, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Internal(std::string("getrandom failed: ") +
                              std::strerror(errno));
    }
    have += static_cast<size_t>(n);
  }
  return key;
}

Key128 ToKey128(const std::string& key) {
  Key128 k;
  if (key.size() != kSecretBytes) return k;
  std::memcpy(&k.lo, key.data(), 8);
  std::memcpy(&k.hi, key.data() + 8, 8);
  return k;
}

bool SecretsEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || a.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

Status WriteSecretFile(const std::string& path, const std::string& key) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : key) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  hex += '\n';
  return WriteFileAtomically(path, [&](int fd) -> Status {
    // Before the key is in it: nobody else may ever read it.
    if (fchmod(fd, 0600) != 0) return IoError("chmod " + path, errno);
    return WriteAll(fd, hex.data(), hex.size(), path);
  });
}

StatusOr<std::string> ReadSecretFile(const std::string& path) {
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return IoError("cannot open " + path, errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return IoError("cannot stat " + path, errno);
  if ((st.st_mode & 077) != 0) {
    return Status::InvalidArgument(
        path + " may be read or written by others than its owner (mode " +
        std::to_string(st.st_mode & 0777) +
        " in decimal); a key file must have mode 0600");
  }
  char buf[2 * 64 + 2];
  ssize_t n;
  do {
    n = read(fd.get(), buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return IoError("cannot read " + path, errno);
  std::string text(buf, static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
    text.pop_back();
  }
  auto value = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string key;
  for (size_t i = 0; i + 1 < text.size(); i += 2) {
    const int hi = value(text[i]), lo = value(text[i + 1]);
    if (hi < 0 || lo < 0) break;
    key += static_cast<char>(hi * 16 + lo);
  }
  if (text.size() != 2 * kSecretBytes || key.size() != kSecretBytes) {
    return Status::InvalidArgument(path + " does not hold a key (" +
                                   std::to_string(2 * kSecretBytes) +
                                   " hex digits)");
  }
  return key;
}

}  // namespace ps
