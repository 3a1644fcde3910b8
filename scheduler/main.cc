// ember_scheduler: the standalone scheduler. It takes its settings from the
// same environment as every node (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT,
// DMLC_NUM_SERVER, DMLC_NUM_WORKER) or from flags, forms the cluster, and
// exits once every node has finalized (0) or when the cluster fails
// (non-zero, with the reason on stderr).

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ps/ps.h"
#include "transport/zmq_van.h"

DEFINE_string(host, "", "Address to bind (default: DMLC_PS_ROOT_URI)");
DEFINE_int32(port, 0, "Port to bind (default: DMLC_PS_ROOT_PORT)");
DEFINE_int32(num_servers, 0, "Number of servers (default: DMLC_NUM_SERVER)");
DEFINE_int32(num_workers, 0, "Number of workers (default: DMLC_NUM_WORKER)");
DEFINE_string(make_curve_key, "",
              "Write a new CURVE key pair for EMBER_CURVE_KEY_FILE to this "
              "file (mode 0600; it must not exist) and exit");

int main(int argc, char* argv[]) {
  gflags::SetUsageMessage(
      "ember_scheduler: the Ember cluster's scheduler.\n"
      "Settings come from DMLC_* environment variables or these flags.");
  gflags::SetVersionString(ps::Version());
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (!FLAGS_make_curve_key.empty()) {
    ps::Status s = ps::ZmqVan::WriteCurveKeyFile(FLAGS_make_curve_key);
    if (!s.ok()) {
      std::fprintf(stderr, "ember_scheduler: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("wrote a CURVE key pair to %s\n", FLAGS_make_curve_key.c_str());
    return 0;
  }
  setenv("DMLC_ROLE", "scheduler", 1);
  if (!FLAGS_host.empty()) setenv("DMLC_PS_ROOT_URI", FLAGS_host.c_str(), 1);
  if (FLAGS_port > 0) {
    setenv("DMLC_PS_ROOT_PORT", std::to_string(FLAGS_port).c_str(), 1);
  }
  if (FLAGS_num_servers > 0) {
    setenv("DMLC_NUM_SERVER", std::to_string(FLAGS_num_servers).c_str(), 1);
  }
  if (FLAGS_num_workers > 0) {
    setenv("DMLC_NUM_WORKER", std::to_string(FLAGS_num_workers).c_str(), 1);
  }
  ps::Start(0, argv[0]);
  ps::Finalize(0, true);
  LOG(INFO) << "every node has finalized; the scheduler exits";
  return 0;
}
