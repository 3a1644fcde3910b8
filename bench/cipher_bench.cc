// cipher_bench: how fast one core encrypts and decrypts with the ciphers
// EMBER_CURVE could use, the per-core ceiling of its figures
// (docs/performance.md, "CURVE's ceiling").
//
//   cipher_bench [--bytes=4194304] [--rounds=5] [--seconds=0.5]
//
// Each cipher seals --bytes (one message) and opens it again, over and
// over on this thread, for --seconds per round; the figure is the median of
// --rounds rounds, in GB/s of plaintext, one way (sealing or opening). The
// ciphers are libsodium's (Debian's libzmq is built with it):
//   xsalsa20poly1305  crypto_box_easy_afternm / crypto_box_open_easy_afternm,
//                     what ZeroMQ's CURVE does to every frame (RFC 26)
//   aes256gcm         crypto_aead_aes256gcm (only where the CPU has AES-NI
//                     and PCLMUL: crypto_aead_aes256gcm_is_available())
//   chacha20poly1305  crypto_aead_chacha20poly1305_ietf
//   xchacha20poly1305 crypto_aead_xchacha20poly1305_ietf
//   memcpy            a plain copy of the same bytes, for scale
//
// Output, one line per cipher:
//   RESULT bench=cipher cipher=aes256gcm bytes=4194304 seal_gb_s=...
//          open_gb_s=...
#include <gflags/gflags.h>
#include <sodium.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

DEFINE_int64(bytes, 4 << 20, "bytes per message");
DEFINE_int32(rounds, 5, "rounds; the figure is their median");
DEFINE_double(seconds, 0.5, "seconds per round and direction");

namespace {

using Clock = std::chrono::steady_clock;

// GB/s of `bytes` per call of `f`, the median of --rounds rounds.
double Rate(const std::function<bool()>& f) {
  std::vector<double> rates;
  for (int r = 0; r < FLAGS_rounds; ++r) {
    const auto start = Clock::now();
    const auto stop = start + std::chrono::duration<double>(FLAGS_seconds);
    int64_t calls = 0;
    do {
      if (!f()) {
        std::fprintf(stderr, "cipher_bench: a message did not open\n");
        std::exit(1);
      }
      ++calls;
    } while (Clock::now() < stop);
    const double s =
        std::chrono::duration<double>(Clock::now() - start).count();
    rates.push_back(static_cast<double>(calls) * FLAGS_bytes / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

struct Cipher {
  const char* name;
  std::function<bool()> seal;  // plain -> sealed
  std::function<bool()> open;  // sealed -> opened, checking the tag
};

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_bytes < 1 || FLAGS_rounds < 1 || FLAGS_seconds <= 0) {
    std::fprintf(stderr, "cipher_bench: bad flags\n");
    return 1;
  }
  if (sodium_init() < 0) {
    std::fprintf(stderr, "cipher_bench: sodium_init failed\n");
    return 1;
  }
  const size_t n = static_cast<size_t>(FLAGS_bytes);
  std::vector<unsigned char> plain(n, 7), sealed(n + 64), opened(n + 64);
  unsigned char key[32], nonce[24], pk[32], sk[32], shared[32];
  // One key and one nonce for every message: this measures the ciphers'
  // speed and protects nothing (a real use never repeats a nonce).
  randombytes_buf(key, sizeof(key));
  randombytes_buf(nonce, sizeof(nonce));
  if (crypto_box_keypair(pk, sk) != 0 || crypto_box_beforenm(shared, pk, sk)) {
    std::fprintf(stderr, "cipher_bench: cannot make a key pair\n");
    return 1;
  }
  crypto_aead_aes256gcm_state aes;
  const bool have_aes = crypto_aead_aes256gcm_is_available() != 0;
  if (have_aes) crypto_aead_aes256gcm_beforenm(&aes, key);
  unsigned char* c = sealed.data();
  unsigned char* o = opened.data();
  const unsigned char* m = plain.data();
  unsigned long long len = 0;
  std::vector<Cipher> ciphers = {
      {"xsalsa20poly1305",
       [&] { return crypto_box_easy_afternm(c, m, n, nonce, shared) == 0; },
       [&] {
         return crypto_box_open_easy_afternm(o, c, n + crypto_box_MACBYTES,
                                             nonce, shared) == 0;
       }},
      {"chacha20poly1305",
       [&] {
         return crypto_aead_chacha20poly1305_ietf_encrypt(
                    c, &len, m, n, nullptr, 0, nullptr, nonce, key) == 0;
       },
       [&] {
         return crypto_aead_chacha20poly1305_ietf_decrypt(
                    o, &len, nullptr, c, n + 16, nullptr, 0, nonce, key) == 0;
       }},
      {"xchacha20poly1305",
       [&] {
         return crypto_aead_xchacha20poly1305_ietf_encrypt(
                    c, &len, m, n, nullptr, 0, nullptr, nonce, key) == 0;
       },
       [&] {
         return crypto_aead_xchacha20poly1305_ietf_decrypt(
                    o, &len, nullptr, c, n + 16, nullptr, 0, nonce, key) == 0;
       }},
      {"memcpy",
       [&] {
         std::memcpy(c, m, n);
         return true;
       },
       [&] {
         std::memcpy(o, c, n);
         return true;
       }},
  };
  if (have_aes) {
    ciphers.insert(
        ciphers.begin() + 1,
        {"aes256gcm",
         [&] {
           return crypto_aead_aes256gcm_encrypt_afternm(
                      c, &len, m, n, nullptr, 0, nullptr, nonce, &aes) == 0;
         },
         [&] {
           return crypto_aead_aes256gcm_decrypt_afternm(o, &len, nullptr, c,
                                                        n + 16, nullptr, 0,
                                                        nonce, &aes) == 0;
         }});
  } else {
    std::printf("aes256gcm: not available on this CPU (no AES-NI/PCLMUL)\n");
  }
  for (const Cipher& cipher : ciphers) {
    // Seal once first: opening needs a sealed message.
    cipher.seal();
    const double seal = Rate(cipher.seal);
    const double open = Rate(cipher.open);
    std::printf(
        "RESULT bench=cipher cipher=%s bytes=%lld seal_gb_s=%.2f "
        "open_gb_s=%.2f\n",
        cipher.name, static_cast<long long>(FLAGS_bytes), seal, open);
  }
  return 0;
}
