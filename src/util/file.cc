#include "util/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

namespace ps {

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) close(fd_);
}

Status ScopedFd::Close(const std::string& what) {
  if (fd_ < 0) return Status::OK();
  const int fd = fd_;
  fd_ = -1;
  // Linux frees the descriptor even when close fails: never retry it.
  if (close(fd) != 0) return IoError("cannot close " + what, errno);
  return Status::OK();
}

Status IoError(const std::string& context, int err) {
  std::string message = context + ": " + std::strerror(err);
  if (err == ENOENT) return Status::NotFound(message);
  return Status::Unavailable(message);
}

std::string DirName(const std::string& path) {
  const size_t pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot write " + what, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

Status SyncDirectory(const std::string& dir) {
  ScopedFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return IoError("cannot open directory " + dir, errno);
  if (fsync(fd.get()) != 0 && errno != EINVAL) {
    return IoError("cannot fsync directory " + dir, errno);
  }
  return Status::OK();
}

Status WriteFileAtomically(const std::string& path,
                           const std::function<Status(int fd)>& write) {
  // Unique among this process's writers (pid) and its threads (counter).
  static std::atomic<uint64_t> counter{0};
  const std::string temp = path + ".tmp." + std::to_string(getpid()) + "." +
                           std::to_string(counter.fetch_add(1));
  ScopedFd fd(
      open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return IoError("cannot create " + temp, errno);
  Status status = write(fd.get());
  if (status.ok() && fsync(fd.get()) != 0) {
    status = IoError("cannot fsync " + temp, errno);
  }
  Status closed = fd.Close(temp);
  if (status.ok()) status = closed;
  if (status.ok() && std::rename(temp.c_str(), path.c_str()) != 0) {
    status = IoError("cannot rename " + temp + " to " + path, errno);
  }
  if (!status.ok()) {
    unlink(temp.c_str());
    return status;
  }
  return SyncDirectory(DirName(path));
}

Status WriteStringToFileAtomically(const std::string& path,
                                   const std::string& contents) {
  return WriteFileAtomically(path, [&](int fd) {
    return WriteAll(fd, contents.data(), contents.size(), path);
  });
}

Status ListDirectory(const std::string& dir, std::vector<std::string>* names) {
  names->clear();
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return IoError("cannot list " + dir, errno);
  for (;;) {
    errno = 0;
    struct dirent* e = readdir(d);
    if (e == nullptr) break;
    const std::string name = e->d_name;
    if (name != "." && name != "..") names->push_back(name);
  }
  const int err = errno;
  closedir(d);
  if (err != 0) return IoError("cannot list " + dir, err);
  std::sort(names->begin(), names->end());
  return Status::OK();
}

}  // namespace ps
