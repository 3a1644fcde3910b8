// Names the calling thread (at most 15 characters are kept), so that top,
// perf and gdb tell Ember's threads apart: "ember-io" (a van's receive
// thread), "ember-app<id>" (a customer), "ember-heartbeat".
#ifndef PS_UTIL_THREAD_NAME_H_
#define PS_UTIL_THREAD_NAME_H_

#include <pthread.h>

#include <string>

namespace ps {

inline void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace ps

#endif  // PS_UTIL_THREAD_NAME_H_
