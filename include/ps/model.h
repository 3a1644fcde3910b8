// Ember's model layer: named dense parameters and embedding tables stored on
// the servers, updated there by optimizers, reached from workers through a
// ModelClient (the seeds' parameter-server service).
//
// - An embedding table has a name, a dimension, an initializer
//   ("normal(0,0.01)", "uniform(-0.1,0.1)", "zeros", "constant(v)",
//   "truncated_normal(m,s)") and an optimizer ("sgd(lr=0.1)",
//   "momentum(lr=0.1,momentum=0.9,nesterov=true)", "adagrad(lr=0.05)",
//   "adam(lr=0.001)", "ftrl(alpha=0.05,beta=1,l1=0,l2=0)"). Rows are keyed by
//   arbitrary 64-bit IDs, spread over the servers by the key ring, and
//   created on first pull from the initializer seeded by (table, ID), so a
//   row's first value never depends on which server made it or when.
// - A dense parameter is a float tensor cut into chunks spread over the
//   servers; the first worker to register it supplies its initial value.
// - Each table or dense parameter has a consistency mode ("asp", "ssp:s",
//   "bsp"; see ps/consistency.h). ModelClient::Clock() ends an iteration.
//
// Servers run a ModelServer; workers a ModelClient. Create them after
// ps::Start and keep them until ps::Finalize has returned, as with KVServer.
// Calls that talk to the servers block and return a Status: kInvalidArgument
// for bad arguments (an unknown table, a wrong gradient size), kUnavailable
// when a server died, kAborted when the cluster failed; a server's refusal
// keeps the server's code (kCorruption for a damaged checkpoint, say) with
// its message after "server: ". Thread-safe: any worker
// thread may call.
#ifndef PS_MODEL_H_
#define PS_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ps {

class Postoffice;

struct TableSpec {
  std::string name;
  int dim = 8;
  std::string initializer = "normal(0,0.01)";
  std::string optimizer = "adagrad(lr=0.05)";
  std::string consistency = "asp";
};

struct DenseSpec {
  std::string name;
  std::vector<int64_t> shape;  // elements = product of the shape
  std::string optimizer = "sgd(lr=0.01)";
  std::string consistency = "asp";
};

// One table's share of a gradient push: rows named by ID (duplicates are
// summed on the server before the update), dim floats each.
struct SparseGradient {
  std::string table;
  std::vector<uint64_t> ids;
  std::vector<float> grads;  // ids.size() * dim
};

struct DenseGradient {
  std::string name;
  std::vector<float> grads;  // the parameter's element count
};

// What a server stores, for logs and the memory figures.
struct ModelServerStats {
  size_t tables = 0;
  // What the server stores: embedding rows plus dense chunks, the copies it
  // holds of other servers' rows (EMBER_REPLICAS) included.
  size_t rows = 0;
  size_t memory_bytes = 0;  // arena plus index, every table
  size_t raw_bytes = 0;     // rows * (dim + optimizer slots) * 4
  // Gradient pushes of the server's own rows applied (the model version),
  // and their rows; copies of other servers' pushes are not counted.
  uint64_t updates = 0;
  uint64_t rows_pulled = 0;
  uint64_t rows_updated = 0;
};

// The servers' half. Serves every ModelClient of the cluster; stops with the
// object. The app ids it takes are ModelClient::kAppBase (control), + 1
// (asp), + 2 (bsp) and + 3 + s (ssp:s). On a server that joined the running
// job (or took a vacant slot) the constructor first asks every other server
// for the tables and dense parameters registered there, waiting up to
// EMBER_MODEL_TIMEOUT per server (docs/model.md, "Servers joining and
// leaving").
class ModelServer {
 public:
  // `postoffice` null: the default node.
  explicit ModelServer(Postoffice* postoffice = nullptr);
  ~ModelServer();
  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;

  ModelServerStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

class ModelClient {
 public:
  static constexpr int kAppBase = 1000;

  // `postoffice` null: the default node. `customer_id` as for KVWorker.
  explicit ModelClient(Postoffice* postoffice = nullptr, int customer_id = 0);
  ~ModelClient();
  ModelClient(const ModelClient&) = delete;
  ModelClient& operator=(const ModelClient&) = delete;

  // Registers a table on every server. Registering the same spec again (from
  // another worker) is fine; a different spec under the same name, or a bad
  // initializer/optimizer/consistency spec, is kInvalidArgument.
  [[nodiscard]] Status RegisterTable(const TableSpec& spec);
  // Registers a dense parameter. The first registration's `initial` values
  // (size = element count) initialise it; later ones keep the stored values.
  [[nodiscard]] Status RegisterDense(const DenseSpec& spec,
                                     const std::vector<float>& initial);

  // The parameter's current values, and the model version (gradient pushes
  // applied by the servers holding it, the largest of them).
  [[nodiscard]] Status PullDense(const std::string& name,
                                 std::vector<float>* values,
                                 int64_t* version = nullptr);

  // Rows of `ids` (any order, duplicates allowed: each ID goes to its
  // server once) into *rows, ids.size() * dim floats, in the order of ids.
  [[nodiscard]] Status PullRows(const std::string& table,
                                const std::vector<uint64_t>& ids,
                                std::vector<float>* rows);
  // The same, started now (prefetch the next mini-batch's rows while this
  // one computes); WaitRows returns its result. Each ticket is waited once.
  int PullRowsAsync(const std::string& table, const std::vector<uint64_t>& ids);
  [[nodiscard]] Status WaitRows(int ticket, std::vector<float>* rows);

  // Pushes dense and sparse gradients in one call; returns once every
  // server has applied or (bsp) accepted them. *version: the new model
  // version. On error nothing is known to be applied.
  [[nodiscard]] Status Push(const std::vector<DenseGradient>& dense,
                            const std::vector<SparseGradient>& sparse,
                            int64_t* version = nullptr);

  // Ends this worker's iteration for every consistency mode.
  [[nodiscard]] Status Clock();

  // Every server writes its shard to dir/shard-<rank>-of-<n>.ckpt (atomic,
  // checksummed), or reads it back, replacing what it holds.
  [[nodiscard]] Status Save(const std::string& dir);
  [[nodiscard]] Status Load(const std::string& dir);

  // A table's dimension (0 if not registered through this client).
  int dim(const std::string& table) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_MODEL_H_
