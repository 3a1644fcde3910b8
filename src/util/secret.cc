#include "util/secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

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

}  // namespace ps
