// Ember's ps-lite-compatible entry point: include this, as with ps-lite.
//
// Start/Finalize/NumWorkers/... act on the process's default node, which is
// configured from the environment (DMLC_ROLE, DMLC_PS_ROOT_URI,
// DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER; see docs/protocol.md).
#ifndef PS_PS_H_
#define PS_PS_H_

#include <functional>

#include "ps/base.h"
#include "ps/internal/postoffice.h"
#include "ps/kv_app.h"
#include "ps/range.h"
#include "ps/sarray.h"
#include "ps/simple_app.h"
#include "ps/status.h"

namespace ps {

// Ember's version ("0.1.0"): that of the library the program runs with.
const char* Version();

inline int NumWorkers() { return Postoffice::Get()->num_workers(); }
inline int NumServers() { return Postoffice::Get()->num_servers(); }
inline bool IsWorker() { return Postoffice::Get()->is_worker(); }
inline bool IsServer() { return Postoffice::Get()->is_server(); }
inline bool IsScheduler() { return Postoffice::Get()->is_scheduler(); }
inline int MyRank() { return Postoffice::Get()->my_rank(); }

// Joins the cluster and waits for every node (a barrier). On failure (bad
// configuration, the cluster does not form in time) logs why and exits the
// process non-zero.
inline void Start(int customer_id, const char* argv0 = nullptr) {
  Postoffice::Get()->Start(customer_id, argv0, true);
}
// Joins without the barrier.
inline void StartAsync(int customer_id, const char* argv0 = nullptr) {
  Postoffice::Get()->Start(customer_id, argv0, false);
}
// A barrier over every node (unless do_barrier is false), then shutdown.
inline void Finalize(int customer_id, const bool do_barrier = true) {
  Postoffice::Get()->Finalize(customer_id, do_barrier);
}
inline void RegisterExitCallback(const std::function<void()>& cb) {
  Postoffice::Get()->RegisterExitCallback(cb);
}

}  // namespace ps

#endif  // PS_PS_H_
