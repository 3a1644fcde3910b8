// WakeFd: a blocking eventfd, for waking a thread that sleeps in poll(2)
// (a thread inside Van::CoReceive).
//
// The protocol that keeps it exact: a waker that decided to wake (under
// some lock or flag it shares with the sleeper) calls Signal() once; the
// sleeper, after waking up for any reason, learns from the same flag
// whether a Signal was decided and then calls Consume(), which blocks until
// that write has landed. So no stale count is ever left for the next sleep.
#ifndef PS_UTIL_WAKE_FD_H_
#define PS_UTIL_WAKE_FD_H_

namespace ps {

class WakeFd {
 public:
  WakeFd();
  ~WakeFd();
  WakeFd(const WakeFd&) = delete;
  WakeFd& operator=(const WakeFd&) = delete;

  // False if the eventfd could not be created (then do not sleep on it).
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Signal();
  void Consume();

  // This thread's own, created on first use and closed at thread exit;
  // nullptr if it could not be created.
  static WakeFd* ForThisThread();

 private:
  int fd_ = -1;
};

}  // namespace ps

#endif  // PS_UTIL_WAKE_FD_H_
