#include "node/options.h"

#include <gflags/gflags.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "node/host_address.h"

namespace ps {

// Test failures name status codes instead of dumping their bytes.
inline void PrintTo(Status::Code code, std::ostream* os) {
  *os << Status::CodeName(code);
}

namespace {

using Code = Status::Code;

// Every variable FromEnvironment() reads.
const char* const kVariables[] = {
    "DMLC_ROLE",
    "DMLC_PS_ROOT_URI",
    "DMLC_PS_ROOT_PORT",
    "DMLC_NUM_SERVER",
    "DMLC_NUM_WORKER",
    "DMLC_NODE_HOST",
    "DMLC_INTERFACE",
    "PS_VERBOSE",
    "EMBER_RANK_HINT",
    "EMBER_HEARTBEAT_INTERVAL_MS",
    "EMBER_HEARTBEAT_TIMEOUT_MS",
    "EMBER_START_TIMEOUT",
    "EMBER_FINALIZE_TIMEOUT_MS",
    "EMBER_KEY_PLACEMENT",
    "EMBER_MALLOC_KEEP_MB",
    "EMBER_THREAD_POLICY",
    "EMBER_SPIN_US",
    "EMBER_CLUSTER_TOKEN",
    "EMBER_CLUSTER_TOKEN_FILE",
    "EMBER_MODEL_TIMEOUT",
    "EMBER_WAIT_LOG_INTERVAL_MS",
    "EMBER_REQUEST_TIMEOUT_MS",
    "EMBER_MAX_FRAME_MB",
    "EMBER_MAX_KEYS_PER_REQUEST",
    "EMBER_RECEIVE_QUEUE",
    "EMBER_CURVE",
    "EMBER_CURVE_KEY_FILE",
    "EMBER_SCHEDULER_WAIT_MS",
    "EMBER_SCHEDULER_RESTART",
    "EMBER_RUN_KEY_FILE",
    "DMLC_USE_KUBERNETES",
    "EMBER_BIND_HOST",
    "EMBER_JOIN",
};

// Clears the variables above for each test and restores the process's own
// values (and every gflag) afterwards.
class OptionsTest : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      if (value != nullptr) saved_[name] = value;
      unsetenv(name);
    }
    flags_ = std::make_unique<gflags::FlagSaver>();
  }

  void TearDown() override {
    flags_.reset();
    for (const char* name : kVariables) {
      auto it = saved_.find(name);
      if (it == saved_.end()) {
        unsetenv(name);
      } else {
        setenv(name, it->second.c_str(), 1);
      }
    }
  }

  static void Set(const char* name, const std::string& value) {
    setenv(name, value.c_str(), 1);
  }

  // The variables a node cannot start without.
  static void SetRequired() {
    Set("DMLC_ROLE", "worker");
    // On loopback: the node's own address then needs no route.
    Set("DMLC_PS_ROOT_URI", "127.0.0.1");
    Set("DMLC_PS_ROOT_PORT", "9091");
    Set("DMLC_NUM_SERVER", "2");
    Set("DMLC_NUM_WORKER", "3");
  }

  // Expects kInvalidArgument with a message that names `variable`.
  static void ExpectRejected(const char* variable) {
    StatusOr<Options> o = Options::FromEnvironment();
    ASSERT_FALSE(o.ok()) << variable;
    EXPECT_EQ(o.status().code(), Code::kInvalidArgument) << o.status();
    EXPECT_NE(o.status().message().find(variable), std::string::npos)
        << o.status();
  }

  // Sets `variable` to each of `values` on top of a valid environment and
  // expects each to be rejected; leaves `variable` unset.
  static void ExpectEachRejected(const char* variable,
                                 const std::vector<std::string>& values) {
    for (const std::string& value : values) {
      SCOPED_TRACE(std::string(variable) + "='" + value + "'");
      SetRequired();
      Set(variable, value);
      ExpectRejected(variable);
      unsetenv(variable);
    }
  }

 private:
  std::map<std::string, std::string> saved_;
  std::unique_ptr<gflags::FlagSaver> flags_;
};

TEST_F(OptionsTest, ReadsFullValidEnvironment) {
  Set("DMLC_ROLE", "server");
  Set("DMLC_PS_ROOT_URI", "scheduler.example");
  Set("DMLC_PS_ROOT_PORT", "65535");
  Set("DMLC_NUM_SERVER", "4");
  Set("DMLC_NUM_WORKER", "16");
  Set("DMLC_NODE_HOST", "10.0.0.7");
  Set("PS_VERBOSE", "2");
  Set("EMBER_RANK_HINT", "3");
  Set("EMBER_HEARTBEAT_INTERVAL_MS", "100");
  Set("EMBER_HEARTBEAT_TIMEOUT_MS", "250");
  Set("EMBER_START_TIMEOUT", "30");
  Set("EMBER_FINALIZE_TIMEOUT_MS", "1500");
  Set("EMBER_KEY_PLACEMENT", "spread");
  Set("EMBER_MALLOC_KEEP_MB", "0");
  Set("EMBER_SPIN_US", "0");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  const Options& v = o.value();
  EXPECT_EQ(v.role, Role::kServer);
  EXPECT_EQ(v.scheduler_host, "scheduler.example");
  EXPECT_EQ(v.scheduler_port, 65535);
  EXPECT_EQ(v.num_servers, 4);
  EXPECT_EQ(v.num_workers, 16);
  EXPECT_EQ(v.node_host, "10.0.0.7");
  EXPECT_EQ(v.bind_host, "10.0.0.7");
  // Not resolved: the node's own address did not need the route.
  EXPECT_EQ(v.scheduler_address, "scheduler.example");
  EXPECT_EQ(v.verbose, 2);
  EXPECT_EQ(v.rank_hint, 3);
  EXPECT_EQ(v.heartbeat_interval_ms, 100);
  EXPECT_EQ(v.heartbeat_timeout_ms, 250);
  EXPECT_EQ(v.start_timeout_ms, 30000);  // Seconds in the environment.
  EXPECT_EQ(v.finalize_timeout_ms, 1500);
  EXPECT_EQ(v.placement, Placement::kSpread);
  EXPECT_EQ(v.malloc_keep_mb, 0);
  EXPECT_EQ(v.spin_us, 0);
  EXPECT_TRUE(v.Validate().ok());
}

TEST_F(OptionsTest, OptionalVariablesDefault) {
  SetRequired();
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  const Options& v = o.value();
  EXPECT_EQ(v.role, Role::kWorker);
  EXPECT_EQ(v.scheduler_host, "127.0.0.1");
  EXPECT_EQ(v.scheduler_port, 9091);
  EXPECT_EQ(v.num_servers, 2);
  EXPECT_EQ(v.num_workers, 3);
  // The scheduler is on loopback, so this node is too.
  EXPECT_EQ(v.node_host, "127.0.0.1");
  EXPECT_EQ(v.bind_host, "127.0.0.1");
  EXPECT_EQ(v.scheduler_address, "127.0.0.1");
  EXPECT_FALSE(v.use_kubernetes);
  EXPECT_EQ(v.verbose, 0);
  EXPECT_EQ(v.rank_hint, -1);
  EXPECT_EQ(v.heartbeat_interval_ms, 500);
  EXPECT_EQ(v.heartbeat_timeout_ms, 4000);
  EXPECT_EQ(v.start_timeout_ms, 60000);
  EXPECT_EQ(v.finalize_timeout_ms, 10000);
  EXPECT_EQ(v.placement, Placement::kRange);
  EXPECT_EQ(v.malloc_keep_mb, 256);
  EXPECT_EQ(v.spin_us, 200);
}

TEST_F(OptionsTest, TheSchedulerLeavesMallocAloneUnlessTold) {
  SetRequired();
  Set("DMLC_ROLE", "scheduler");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().malloc_keep_mb, 0);
  Set("EMBER_MALLOC_KEEP_MB", "64");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().malloc_keep_mb, 64);
  Set("DMLC_ROLE", "server");
  unsetenv("EMBER_MALLOC_KEEP_MB");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().malloc_keep_mb, 256);
}

TEST_F(OptionsTest, MessageThreadsAreBatchedExceptOnTheSchedulerUnlessTold) {
  SetRequired();
  for (const char* role : {"server", "worker"}) {
    Set("DMLC_ROLE", role);
    StatusOr<Options> o = Options::FromEnvironment();
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o.value().thread_policy, ThreadPolicy::kBatch) << role;
  }
  Set("DMLC_ROLE", "scheduler");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().thread_policy, ThreadPolicy::kNormal);
  Set("EMBER_THREAD_POLICY", "batch");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().thread_policy, ThreadPolicy::kBatch);
  Set("DMLC_ROLE", "worker");
  Set("EMBER_THREAD_POLICY", "normal");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().thread_policy, ThreadPolicy::kNormal);
}

// EMBER_JOIN: 0, 1, or replace (a server's only).
TEST_F(OptionsTest, JoinIsZeroOneOrReplaceForAServer) {
  SetRequired();
  Set("DMLC_ROLE", "server");
  for (const char* value : {"0", "1", "replace"}) {
    Set("EMBER_JOIN", value);
    StatusOr<Options> o = Options::FromEnvironment();
    ASSERT_TRUE(o.ok()) << value << ": " << o.status();
    EXPECT_EQ(o.value().join, std::string(value) == "1") << value;
    EXPECT_EQ(o.value().join_replace, std::string(value) == "replace") << value;
  }
  ExpectEachRejected("EMBER_JOIN", {"2", "yes", "", "Replace"});
  Set("DMLC_ROLE", "worker");
  Set("EMBER_JOIN", "replace");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find(
                "EMBER_JOIN=replace is for servers (a worker comes back into "
                "its rank with EMBER_WORKER_RANK)"),
            std::string::npos)
      << o.status();
}

TEST_F(OptionsTest, ParsesEveryRoleName) {
  SetRequired();
  const std::vector<std::pair<std::string, Role>> roles = {
      {"scheduler", Role::kScheduler},
      {"server", Role::kServer},
      {"worker", Role::kWorker}};
  for (const auto& r : roles) {
    Set("DMLC_ROLE", r.first);
    StatusOr<Options> o = Options::FromEnvironment();
    ASSERT_TRUE(o.ok()) << r.first << ": " << o.status();
    EXPECT_EQ(o.value().role, r.second) << r.first;
    Role parsed = Role::kWorker;
    ASSERT_TRUE(ParseRole(r.first, &parsed).ok());
    EXPECT_EQ(parsed, r.second);
  }
}

TEST_F(OptionsTest, MissingRoleIsInvalidArgument) {
  SetRequired();
  unsetenv("DMLC_ROLE");
  ExpectRejected("DMLC_ROLE");
}

TEST_F(OptionsTest, BadRoleNameIsInvalidArgument) {
  ExpectEachRejected("DMLC_ROLE", {"", "Worker", "servers", "client", " "});
  Role role = Role::kServer;
  EXPECT_EQ(ParseRole("master", &role).code(), Code::kInvalidArgument);
  EXPECT_EQ(role, Role::kServer);  // Untouched on error.
}

TEST_F(OptionsTest, MissingOrEmptyRootUriIsInvalidArgument) {
  SetRequired();
  unsetenv("DMLC_PS_ROOT_URI");
  ExpectRejected("DMLC_PS_ROOT_URI");
  ExpectEachRejected("DMLC_PS_ROOT_URI", {""});
}

TEST_F(OptionsTest, MissingRootPortIsInvalidArgument) {
  SetRequired();
  unsetenv("DMLC_PS_ROOT_PORT");
  ExpectRejected("DMLC_PS_ROOT_PORT");
}

TEST_F(OptionsTest, NonNumericRootPortIsInvalidArgument) {
  ExpectEachRejected("DMLC_PS_ROOT_PORT",
                     {"", "http", "80x", "8.0", "0x50", "9091 ", "--1"});
}

TEST_F(OptionsTest, OutOfRangeRootPortIsInvalidArgument) {
  ExpectEachRejected("DMLC_PS_ROOT_PORT", {"0", "-1", "65536", "4294967297",
                                           "99999999999999999999999"});
}

TEST_F(OptionsTest, RootPortBoundsAreAccepted) {
  for (const char* port : {"1", "65535"}) {
    SetRequired();
    Set("DMLC_PS_ROOT_PORT", port);
    StatusOr<Options> o = Options::FromEnvironment();
    ASSERT_TRUE(o.ok()) << port << ": " << o.status();
    EXPECT_EQ(o.value().scheduler_port, std::atoi(port));
  }
}

TEST_F(OptionsTest, MissingServerOrWorkerCountIsInvalidArgument) {
  SetRequired();
  unsetenv("DMLC_NUM_SERVER");
  ExpectRejected("DMLC_NUM_SERVER");
  SetRequired();
  unsetenv("DMLC_NUM_WORKER");
  ExpectRejected("DMLC_NUM_WORKER");
}

TEST_F(OptionsTest, NonNumericServerCountIsInvalidArgument) {
  ExpectEachRejected("DMLC_NUM_SERVER", {"", "two", "2servers", "1e3"});
}

TEST_F(OptionsTest, OutOfRangeServerCountIsInvalidArgument) {
  ExpectEachRejected("DMLC_NUM_SERVER", {"0", "-3", "4097", "2147483648"});
}

TEST_F(OptionsTest, BadWorkerCountIsInvalidArgument) {
  ExpectEachRejected("DMLC_NUM_WORKER", {"x", "0", "65537"});
}

TEST_F(OptionsTest, OutOfRangeOptionalIntegersAreInvalidArgument) {
  ExpectEachRejected("PS_VERBOSE", {"4", "-1", "loud"});
  ExpectEachRejected("EMBER_RANK_HINT", {"-2", "rank"});
  ExpectEachRejected("EMBER_HEARTBEAT_INTERVAL_MS", {"-1", "600001"});
  ExpectEachRejected("EMBER_HEARTBEAT_TIMEOUT_MS", {"0", "3600001"});
  ExpectEachRejected("EMBER_START_TIMEOUT", {"0", "86401", "60s"});
  ExpectEachRejected("EMBER_FINALIZE_TIMEOUT_MS", {"0", "soon"});
  ExpectEachRejected("EMBER_KEY_PLACEMENT", {"", "hash", "Range"});
  ExpectEachRejected("EMBER_MALLOC_KEEP_MB", {"-1", "1048577", "lots"});
  ExpectEachRejected("EMBER_THREAD_POLICY", {"", "fifo", "Batch"});
  ExpectEachRejected("EMBER_SPIN_US", {"-1", "1000001", "200us"});
  ExpectEachRejected("EMBER_MODEL_TIMEOUT", {"0", "86401"});
  ExpectEachRejected("EMBER_WAIT_LOG_INTERVAL_MS", {"-1", "3600001"});
  ExpectEachRejected("EMBER_REQUEST_TIMEOUT_MS", {"-1", "86400001", "5s"});
  ExpectEachRejected("EMBER_MAX_FRAME_MB", {"0", "1048577", "1G"});
  ExpectEachRejected("EMBER_MAX_KEYS_PER_REQUEST", {"0", "2147483648"});
  ExpectEachRejected("EMBER_RECEIVE_QUEUE", {"-1", "16777217"});
}

TEST_F(OptionsTest, HeartbeatTimeoutBelowTwiceIntervalIsInvalidArgument) {
  SetRequired();
  Set("EMBER_HEARTBEAT_INTERVAL_MS", "1000");
  Set("EMBER_HEARTBEAT_TIMEOUT_MS", "1999");
  ExpectRejected("EMBER_HEARTBEAT_TIMEOUT_MS");
  // The default timeout (4000) is too short for a 2001 ms interval too.
  unsetenv("EMBER_HEARTBEAT_TIMEOUT_MS");
  Set("EMBER_HEARTBEAT_INTERVAL_MS", "2001");
  ExpectRejected("EMBER_HEARTBEAT_TIMEOUT_MS");
}

// The heartbeat thread checks the request deadline: without heartbeats it
// would never fire, so asking for one is refused.
TEST_F(OptionsTest, RequestTimeoutIsReadAndNeedsHeartbeats) {
  SetRequired();
  StatusOr<Options> plain = Options::FromEnvironment();
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain.value().request_timeout_ms, 0);
  Set("EMBER_REQUEST_TIMEOUT_MS", "30000");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().request_timeout_ms, 30000);
  Set("EMBER_HEARTBEAT_INTERVAL_MS", "0");
  ExpectRejected("EMBER_REQUEST_TIMEOUT_MS needs heartbeats");
}

TEST_F(OptionsTest, HeartbeatTimeoutOfExactlyTwiceIntervalIsAccepted) {
  SetRequired();
  Set("EMBER_HEARTBEAT_INTERVAL_MS", "1000");
  Set("EMBER_HEARTBEAT_TIMEOUT_MS", "2000");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().heartbeat_timeout_ms, 2000);
}

TEST_F(OptionsTest, ZeroHeartbeatIntervalDisablesTimeoutCheck) {
  SetRequired();
  Set("EMBER_HEARTBEAT_INTERVAL_MS", "0");
  Set("EMBER_HEARTBEAT_TIMEOUT_MS", "1");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().heartbeat_interval_ms, 0);
}

// Lost messages of a membership change (docs/replication.md): the resend
// timeout defaults to three heartbeats, none without heartbeats.
TEST_F(OptionsTest, MigrationResendSetting) {
  SetRequired();
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().migration_resend_ms, 0);
  EXPECT_EQ(o.value().MigrationResendMs(), 3 * o.value().heartbeat_interval_ms);
  Set("EMBER_MIGRATION_RESEND_MS", "250");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().MigrationResendMs(), 250);
  Set("EMBER_MIGRATION_RESEND_MS", "0");
  Set("EMBER_HEARTBEAT_INTERVAL_MS", "0");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().MigrationResendMs(), -1);
  ExpectEachRejected("EMBER_MIGRATION_RESEND_MS", {"-2", "x"});
}

// Scheduler restart (docs/replication.md): the wait for a silent scheduler,
// and a restart that needs the run's key file.
TEST_F(OptionsTest, SchedulerRestartSettings) {
  SetRequired();
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().scheduler_wait_ms, 60000);
  EXPECT_FALSE(o.value().scheduler_restart);
  Set("EMBER_SCHEDULER_WAIT_MS", "90000");
  Set("EMBER_RUN_KEY_FILE", "/some/run.key");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().scheduler_wait_ms, 90000);
  EXPECT_EQ(o.value().run_key_file, "/some/run.key");
  ExpectEachRejected("EMBER_SCHEDULER_WAIT_MS", {"-1", "x"});
  ExpectEachRejected("EMBER_SCHEDULER_RESTART", {"2", "yes"});
  // A restarted scheduler without the key file cannot authenticate.
  Set("DMLC_ROLE", "scheduler");
  Set("EMBER_SCHEDULER_RESTART", "1");
  unsetenv("EMBER_RUN_KEY_FILE");
  o = Options::FromEnvironment();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("EMBER_RUN_KEY_FILE"), std::string::npos)
      << o.status();
}

TEST_F(OptionsTest, ClusterTokenComesFromTheVariableOrAFile) {
  SetRequired();
  StatusOr<Options> none = Options::FromEnvironment();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none.value().cluster_token, "");

  Set("EMBER_CLUSTER_TOKEN", "open sesame");
  StatusOr<Options> direct = Options::FromEnvironment();
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct.value().cluster_token, "open sesame");
  unsetenv("EMBER_CLUSTER_TOKEN");

  std::string path = testing::TempDir() + "/ember_token";
  {
    std::ofstream f(path);
    f << "from a file\n";
  }
  Set("EMBER_CLUSTER_TOKEN_FILE", path);
  StatusOr<Options> file = Options::FromEnvironment();
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file.value().cluster_token, "from a file");
  std::remove(path.c_str());
}

TEST_F(OptionsTest, BadClusterTokensAreInvalidArgument) {
  ExpectEachRejected("EMBER_CLUSTER_TOKEN", {"", std::string(4097, 't')});
  ExpectEachRejected("EMBER_CLUSTER_TOKEN_FILE", {"/no/such/token/file"});
  std::string path = testing::TempDir() + "/ember_empty_token";
  { std::ofstream f(path); }
  ExpectEachRejected("EMBER_CLUSTER_TOKEN_FILE", {path});
  std::remove(path.c_str());
  // Both at once: which would win is not obvious, so neither does.
  SetRequired();
  Set("EMBER_CLUSTER_TOKEN", "a");
  Set("EMBER_CLUSTER_TOKEN_FILE", "/tmp/x");
  ExpectRejected("EMBER_CLUSTER_TOKEN_FILE");
}

TEST_F(OptionsTest, CurveNeedsAKeyFileWithTwoKeys) {
  ExpectEachRejected("EMBER_CURVE", {"2", "yes"});
  SetRequired();
  Set("EMBER_CURVE", "1");
  ExpectRejected("EMBER_CURVE_KEY_FILE");  // Not set.
  Set("EMBER_CURVE_KEY_FILE", "/no/such/key");
  ExpectRejected("EMBER_CURVE_KEY_FILE");
  std::string path = testing::TempDir() + "/ember_curve_key";
  {
    std::ofstream f(path);
    f << "short\n";
  }
  Set("EMBER_CURVE_KEY_FILE", path);
  ExpectRejected("EMBER_CURVE_KEY_FILE");
  {
    std::ofstream f(path);
    f << std::string(40, 'a') << "\n" << std::string(40, 'b') << "\n";
  }
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o.value().curve);
  EXPECT_EQ(o.value().curve_secret_key, std::string(40, 'b'));
  std::remove(path.c_str());
}

TEST_F(OptionsTest, NodeHostWinsOverInterface) {
  SetRequired();
  Set("DMLC_NODE_HOST", "192.168.1.9");
  Set("DMLC_INTERFACE", "no-such-interface0");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().node_host, "192.168.1.9");
}

TEST_F(OptionsTest, UnknownInterfaceIsInvalidArgument) {
  SetRequired();
  Set("DMLC_INTERFACE", "no-such-interface0");
  ExpectRejected("DMLC_INTERFACE");
}

TEST_F(OptionsTest, InterfaceGivesItsIPv4Address) {
  SetRequired();
  Set("DMLC_INTERFACE", "lo");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().node_host, "127.0.0.1");
  EXPECT_EQ(o.value().bind_host, "127.0.0.1");
}

TEST_F(OptionsTest, WorkerAnnouncesTheAddressOnTheRouteToTheScheduler) {
  // A scheduler at one of this host's own non-loopback addresses is
  // reached through that address, never through loopback.
  StatusOr<std::string> mine = FirstNonLoopbackAddress(AF_INET);
  if (!mine.ok()) GTEST_SKIP() << mine.status();
  SetRequired();
  Set("DMLC_PS_ROOT_URI", *mine);
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().node_host, *mine);
  EXPECT_EQ(o.value().bind_host, *mine);
  EXPECT_FALSE(IsLoopbackAddress(o.value().node_host));
}

TEST_F(OptionsTest, SchedulerNameIsResolvedToFindTheRouteAndToConnect) {
  SetRequired();
  Set("DMLC_PS_ROOT_URI", "localhost");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().scheduler_host, "localhost");
  EXPECT_TRUE(IsLoopbackAddress(o.value().scheduler_address))
      << o.value().scheduler_address;
  EXPECT_EQ(o.value().node_host, o.value().scheduler_address);
}

TEST_F(OptionsTest, SchedulerBindsTheNumericAddressOfItsName) {
  SetRequired();
  Set("DMLC_ROLE", "scheduler");
  Set("DMLC_PS_ROOT_URI", "localhost");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().node_host, "localhost");  // Announced as given.
  EXPECT_TRUE(IsLoopbackAddress(o.value().bind_host)) << o.value().bind_host;
}

TEST_F(OptionsTest, KubernetesSchedulerBindsEverythingAndAnnouncesRootUri) {
  SetRequired();
  Set("DMLC_ROLE", "scheduler");
  // A Service's name, resolvable only inside the cluster: it is not
  // resolved at all.
  Set("DMLC_PS_ROOT_URI", "ember-scheduler.default.svc.cluster.local");
  Set("DMLC_USE_KUBERNETES", "1");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o.value().use_kubernetes);
  EXPECT_EQ(o.value().bind_host, "0.0.0.0");
  EXPECT_EQ(o.value().node_host, "ember-scheduler.default.svc.cluster.local");
}

TEST_F(OptionsTest, KubernetesPodBindsEverythingAndAnnouncesItsAddress) {
  SetRequired();
  Set("DMLC_USE_KUBERNETES", "1");
  Set("DMLC_NODE_HOST", "10.244.1.7");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().node_host, "10.244.1.7");
  EXPECT_EQ(o.value().bind_host, "0.0.0.0");
  Set("DMLC_NODE_HOST", "fd00:10:244::7");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().bind_host, "::");
  // ps-lite reads any integer; 0 is off.
  Set("DMLC_USE_KUBERNETES", "0");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o.value().use_kubernetes);
  EXPECT_EQ(o.value().bind_host, "fd00:10:244::7");
}

TEST_F(OptionsTest, BindHostDiffersFromTheAnnouncedAddress) {
  SetRequired();
  Set("DMLC_NODE_HOST", "203.0.113.9");  // Say, a NAT's public address.
  Set("EMBER_BIND_HOST", "0.0.0.0");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().node_host, "203.0.113.9");
  EXPECT_EQ(o.value().bind_host, "0.0.0.0");
  Set("EMBER_BIND_HOST", "*");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().bind_host, "0.0.0.0");
  Set("EMBER_BIND_HOST", "[::]");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().bind_host, "::");
  // The scheduler too.
  Set("DMLC_ROLE", "scheduler");
  Set("EMBER_BIND_HOST", "127.0.0.1");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().bind_host, "127.0.0.1");
}

TEST_F(OptionsTest, IPv6AddressesLoseTheirBrackets) {
  SetRequired();
  Set("DMLC_PS_ROOT_URI", "[::1]");
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().scheduler_host, "::1");
  Set("DMLC_NODE_HOST", "[fd00::7]");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().node_host, "fd00::7");
}

TEST_F(OptionsTest, BadAddressesAreInvalidArgumentNamingTheVariable) {
  ExpectEachRejected("DMLC_NODE_HOST", {"", "two words", "10.0.0.1:9000",
                                        "[10.0.0.1]", "a/b", "fd00::zz"});
  ExpectEachRejected("DMLC_PS_ROOT_URI",
                     {"two words", "host:9000", "[not-ipv6]"});
  ExpectEachRejected("EMBER_BIND_HOST", {"", "bad host", "::g"});
  ExpectEachRejected("DMLC_USE_KUBERNETES", {"yes", "-1", "1.5"});
  ExpectEachRejected("DMLC_INTERFACE", {""});
}

TEST_F(OptionsTest, CommandLineFlagWinsOverEnvironment) {
  SetRequired();
  Set("EMBER_KEY_PLACEMENT", "spread");
  Set("EMBER_START_TIMEOUT", "5");
  ASSERT_FALSE(
      gflags::SetCommandLineOption("ember_key_placement", "range").empty());
  ASSERT_FALSE(
      gflags::SetCommandLineOption("ember_start_timeout", "7").empty());
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o.value().placement, Placement::kRange);
  EXPECT_EQ(o.value().start_timeout_ms, 7000);
}

TEST_F(OptionsTest, OutOfRangeCommandLineFlagIsInvalidArgument) {
  SetRequired();
  ASSERT_FALSE(gflags::SetCommandLineOption("ember_heartbeat_interval_ms", "-1")
                   .empty());
  StatusOr<Options> o = Options::FromEnvironment();
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), Code::kInvalidArgument);
  // Named as the flag or as its variable.
  std::string message = o.status().message();
  for (char& c : message) c = static_cast<char>(std::tolower(c));
  EXPECT_NE(message.find("heartbeat_interval_ms"), std::string::npos)
      << o.status();
}

}  // namespace
}  // namespace ps
