#include "util/wake_fd.h"

#include <glog/logging.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace ps {

WakeFd::WakeFd() : fd_(eventfd(0, EFD_CLOEXEC)) {
  if (fd_ < 0) {
    LOG(WARNING) << "eventfd failed: " << std::strerror(errno);
  }
}

WakeFd::~WakeFd() {
  if (fd_ >= 0) close(fd_);
}

void WakeFd::Signal() {
  uint64_t one = 1;
  while (write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void WakeFd::Consume() {
  uint64_t count;
  while (read(fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

WakeFd* WakeFd::ForThisThread() {
  thread_local WakeFd wake;
  return wake.ok() ? &wake : nullptr;
}

}  // namespace ps
