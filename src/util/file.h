// Files written atomically, and the small POSIX helpers around it.
//
// WriteFileAtomically is the one way Ember replaces a file that another
// process may read at any moment (a checkpoint shard, the scheduler's port
// file): readers see the old file or the complete new one, never a part.
//
// Thread safety: the functions are thread-safe; two concurrent writes of the
// same path both succeed and one of them wins.
#ifndef PS_UTIL_FILE_H_
#define PS_UTIL_FILE_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ps {

// Closes a file descriptor when it goes out of scope (if it is >= 0).
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  // Closes now; the error of close(2), as Status.
  [[nodiscard]] Status Close(const std::string& what);

 private:
  int fd_;
};

// "context: <strerror(err)>" as kNotFound for ENOENT, else kUnavailable.
Status IoError(const std::string& context, int err);

// The directory of `path` ("." for a bare name, "/" for "/name").
std::string DirName(const std::string& path);

// Writes all n bytes at data to fd, resuming after EINTR and short writes.
[[nodiscard]] Status WriteAll(int fd, const void* data, size_t n,
                              const std::string& what);

// fsyncs a directory, so that a rename in it is durable. File systems that
// cannot fsync a directory (EINVAL) count as success.
[[nodiscard]] Status SyncDirectory(const std::string& dir);

// Replaces `path` atomically: `write` fills a fresh temporary file
// "<path>.tmp.<pid>.<n>" in the same directory through the descriptor it is
// given (opened for writing, at offset 0; `write` must not close it), which
// is then fsynced and renamed over `path`, and the directory is fsynced.
// If `write` or any step fails, the temporary file is removed and whatever
// was at `path` is left untouched; the first error is returned (`write`'s
// own, or IoError's: kNotFound when the directory does not exist). Blocks
// on disk I/O.
[[nodiscard]] Status WriteFileAtomically(
    const std::string& path, const std::function<Status(int fd)>& write);

// The same with `contents` as the file's bytes.
[[nodiscard]] Status WriteStringToFileAtomically(const std::string& path,
                                                 const std::string& contents);

// The names in directory `dir`, without "." and "..", sorted; IoError's
// kNotFound when it does not exist.
[[nodiscard]] Status ListDirectory(const std::string& dir,
                                   std::vector<std::string>* names);

}  // namespace ps

#endif  // PS_UTIL_FILE_H_
