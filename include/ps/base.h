// Basic types of Ember's ps-lite-compatible API: the key type, node groups and
// the LL logging macro.
#ifndef PS_BASE_H_
#define PS_BASE_H_

#include <glog/logging.h>

#include <cstdint>
#include <limits>

// ps-lite's headers bring these in transitively, and programs written
// against it rely on that (std::thread, strcmp, ...).
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ps {

// Keys are 64-bit unless USE_KEY32 is defined (as in ps-lite).
#if USE_KEY32
using Key = uint32_t;
#else
using Key = uint64_t;
#endif

// The largest key.
static const Key kMaxKey = std::numeric_limits<Key>::max();

// Node groups. A node id below 8 names a group; the scheduler's id is 1.
// Groups combine by addition: kServerGroup + kWorkerGroup is every server and
// every worker.
static const int kScheduler = 1;
static const int kServerGroup = 2;
static const int kWorkerGroup = 4;

}  // namespace ps

// ps-lite's short logging macro.
#ifndef LL
#define LL LOG(ERROR)
#endif

#endif  // PS_BASE_H_
