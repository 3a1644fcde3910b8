// Secrets of a run: random keys that prove membership (docs/protocol.md,
// "Authentication"), and a comparison that takes the same time wherever
// the first difference is.
//
// Keys come from the kernel's random source (getrandom(2)); 16 bytes cannot
// be guessed by a process that was never given them. Comparing takes time
// independent of the contents, so a peer cannot learn a key byte by byte
// from how fast its guesses are refused.
//
// Thread safety: pure functions.
#ifndef PS_UTIL_SECRET_H_
#define PS_UTIL_SECRET_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "ps/status.h"

namespace ps {

// Bytes in a key made by NewSecret.
constexpr size_t kSecretBytes = 16;

// `bytes` random bytes from the kernel; kInternal if it cannot give them.
[[nodiscard]] StatusOr<std::string> NewSecret(size_t bytes = kSecretBytes);

// Whether `a` equals `b`, in time that depends only on their sizes. Two
// empty strings are not a match: an empty key proves nothing.
bool SecretsEqual(const std::string& a, const std::string& b);

// A key of kSecretBytes as two words, as message headers carry it: fixed
// size, so a header needs no allocation for it. All zero: no key.
struct Key128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool empty() const { return (lo | hi) == 0; }
};

// The words of a kSecretBytes key; an empty Key128 for any other size.
Key128 ToKey128(const std::string& key);

// Whether `a` equals `b`, in constant time; false if either is empty.
inline bool KeysEqual(const Key128& a, const Key128& b) {
  const uint64_t diff = (a.lo ^ b.lo) | (a.hi ^ b.hi);
  return diff == 0 && !a.empty();
}

// A key kept in a file for a process that starts later (the run's key, for
// a restarted scheduler; docs/security.md): `key` as hex digits and a
// newline, written atomically with mode 0600.
[[nodiscard]] Status WriteSecretFile(const std::string& path,
                                     const std::string& key);
// The key WriteSecretFile wrote to `path`. kInvalidArgument if the file is
// not such a key or others than its owner may read or write it; an I/O
// error (kNotFound, kUnavailable) if it cannot be read. The message names
// the path.
[[nodiscard]] StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace ps

#endif  // PS_UTIL_SECRET_H_
