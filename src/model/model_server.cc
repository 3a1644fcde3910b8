// ModelServer: the servers' half of the model layer. One store of tables
// (embedding tables, and dense parameters kept as tables of chunks) shared
// by a KVServer per consistency mode and a control SimpleApp.

#include <glog/logging.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/checkpoint.h"
#include "model/control_app.h"
#include "model/embedding_table.h"
#include "model/model_control.h"
#include "model/model_protocol.h"
#include "node/node.h"
#include "partition/key_ring.h"
#include "ps/kv_app.h"
#include "ps/model.h"
#include "ps/ps.h"
#include "util/coding.h"
#include "util/file.h"
#include "util/mutex.h"

namespace ps {

using model::ControlOp;
using model::RowOp;

class ModelServer::Impl {
 public:
  explicit Impl(Postoffice* postoffice)
      : postoffice_(postoffice ? postoffice : Postoffice::Get()) {
    Node* node = postoffice_->node();
    std::shared_ptr<const KeyRing> joined =
        node ? node->joined_ring() : nullptr;
    if (joined) {
      // Apps made before the catalog is in wait for it (EnsureApp).
      MutexLock lock(&apps_mu_);
      joining_ = true;
    }
    control_ = std::make_unique<model::ControlApp>(
        model::kControlApp, model::kControlApp, postoffice_);
    control_->set_ring_handler([this] { AnswerCatalogs(); });
    control_->set_response_handle([this](const SimpleData& res, SimpleApp*) {
      MutexLock lock(&mu_);
      answers_[res.timestamp].push_back(res.body);
    });
    // Releases the app's messages: a registration that came before is
    // handled here, never by SimpleApp's default (an empty answer, which a
    // client would read as "registered").
    control_->set_request_handle([this](const SimpleData& req, SimpleApp* app) {
      std::string reply;
      if (Control(req, &reply)) app->Response(req, reply);
    });
    // Rows and bytes per table, read at each scrape (docs/operations.md).
    metrics_node_ = postoffice_->node();
    if (metrics_node_) {
      collector_ = metrics_node_->metrics()->AddCollector(
          [this](metrics::Writer* w) { CollectMetrics(w); });
    }
    if (joined) JoinRunningJob(*joined);
  }

  ~Impl() {
    if (metrics_node_) metrics_node_->metrics()->RemoveCollector(collector_);
    control_.reset();
    MutexLock lock(&apps_mu_);
    apps_.clear();
  }

  ModelServerStats stats() const {
    MutexLock lock(&mu_);
    ModelServerStats s = counters_;
    s.tables = tables_.size();
    for (const auto& t : tables_) {
      s.rows += t.second.table->size();
      s.memory_bytes += t.second.table->MemoryBytes();
      s.raw_bytes += t.second.table->RawBytes();
    }
    return s;
  }

 private:
  void CollectMetrics(metrics::Writer* w) const {
    MutexLock lock(&mu_);
    for (const auto& t : tables_) {
      const std::string l = metrics::Label("table", t.second.name);
      w->Gauge("ember_model_table_rows",
               "Rows of a model table on this server (dense: chunks), copies "
               "included",
               l, static_cast<double>(t.second.table->size()));
      w->Gauge("ember_model_table_bytes",
               "Memory of a model table on this server (arena and index)", l,
               static_cast<double>(t.second.table->MemoryBytes()));
    }
  }

  Node* metrics_node_ = nullptr;  // The node the collector is on.
  int collector_ = 0;

  struct Entry {
    std::string name;
    bool dense = false;
    int dim = 0;
    int64_t numel = 0;  // dense only
    std::vector<int64_t> shape;
    std::string initializer, optimizer, consistency;
    std::unique_ptr<model::EmbeddingTable> table;
    // bsp: the gradients of the current round, applied as one optimizer
    // step (see MergePush).
    bool merge_rounds = false;
    struct Round {
      int64_t clock = 0;
      // The pushes merged: (worker, whose data: KVMeta::replica_of, 0 for
      // this server's own).
      std::vector<std::pair<int, int>> senders;
      std::vector<uint64_t> ids;
      std::vector<float> grads;
    };
    Round round;
  };

  static std::string Reply(const Status& s, uint64_t version = 0,
                           uint64_t ring_epoch = 0) {
    model::ControlReply reply;
    reply.status = s;
    reply.version = version;
    reply.ring_epoch = ring_epoch;
    return model::EncodeControlReply(reply);
  }

  uint64_t RingEpoch() const {
    Node* node = postoffice_->node();
    return node ? node->ring_epoch() : 0;
  }

  // The answer to a control request in *reply; false if it is deferred (a
  // catalog asked under a ring this server has not reached yet).
  bool Control(const SimpleData& req, std::string* reply) {
    auto decoded = model::DecodeControlRequest(req.head, req.body);
    if (!decoded.ok()) {
      LOG(WARNING) << "model control request from node " << req.sender
                   << " refused: " << decoded.status();
      *reply = Reply(decoded.status());
      return true;
    }
    const model::ControlRequest& r = *decoded;
    if (r.op == ControlOp::kCatalog && RingEpoch() < r.ring_epoch) {
      // Answered once this server has switched to that ring
      // (AnswerCatalogs): the answer then holds every table registered
      // here before the switch.
      LOG(INFO) << "model server: node " << req.sender
                << " asks for the catalog under key ring epoch " << r.ring_epoch
                << "; this server has " << RingEpoch()
                << ": answered once it has that ring";
      MutexLock lock(&mu_);
      pending_catalogs_.emplace_back(r.ring_epoch, req);
      return false;
    }
    *reply = Control(r);
    return true;
  }

  std::string Control(const model::ControlRequest& r) {
    switch (r.op) {
      case ControlOp::kRegisterTable:
      case ControlOp::kRegisterDense: {
        const Status s = Register(r);
        // Read after the table and its app exist: a client that sent the
        // registration under an older ring asks again under this one
        // (ModelClient), so that a server that joined meanwhile has it.
        return Reply(s, 0, RingEpoch());
      }
      case ControlOp::kCatalog:
        return Catalog();
      case ControlOp::kVersion: {
        MutexLock lock(&mu_);
        return Reply(Status::OK(), counters_.updates);
      }
      case ControlOp::kSave:
        return Reply(Save(r.dir));
      case ControlOp::kLoad:
        return Reply(Load(r.dir));
      case ControlOp::kLoadCommit:
      case ControlOp::kLoadAbort: {
        MutexLock lock(&mu_);
        if (r.op == ControlOp::kLoadCommit) {
          if (!staged_) {
            return Reply(Status::InvalidArgument("no checkpoint load staged"));
          }
          for (auto& t : staged_->tables) {
            // A pending round belongs to the model being replaced.
            tables_[t.first].table = std::move(t.second);
            tables_[t.first].round = Entry::Round();
          }
          counters_.updates = staged_->version;
        }
        staged_.reset();
        return Reply(Status::OK());
      }
    }
    return Reply(
        Status::InvalidArgument("unknown model control request " +
                                std::to_string(static_cast<int>(r.op))));
  }

  // --- Servers joining a running job (docs/model.md, "Servers joining and
  // leaving"). A newcomer learns every registration before it serves or
  // loads the state of any table: its ModelServer asks each other server
  // of the ring it joined under for its catalog, and each answers once it
  // has switched to that ring, so the answers hold every table registered
  // before any of them switched; a table registered later reaches the
  // newcomer directly (ModelClient registers again when a server answered
  // under a newer ring than the client's). The apps made meanwhile are
  // created first and started only once every catalog is in, so none of
  // them serves, or takes a hand-over chunk, before the tables are known,
  // and the node reports the hand-over done only once every app has its
  // state (Node::HandoverDone).

  // Every registration held here, and the model version.
  std::string Catalog() {
    model::ControlReply reply;
    reply.ring_epoch = RingEpoch();
    MutexLock lock(&mu_);
    reply.version = counters_.updates;
    for (const auto& t : tables_) {
      reply.registrations.push_back(Registration(t.second));
    }
    return model::EncodeControlReply(reply);
  }

  static model::ControlRequest Registration(const Entry& e) {
    model::ControlRequest r;
    r.op = e.dense ? ControlOp::kRegisterDense : ControlOp::kRegisterTable;
    r.name = e.name;
    r.optimizer = e.optimizer;
    r.consistency = e.consistency;
    if (e.dense) {
      r.shape = e.shape;
    } else {
      r.dim = e.dim;
      r.initializer = e.initializer;
    }
    return r;
  }

  // On the control app's thread, after a ring change: the catalogs asked
  // under a ring this server has now reached.
  void AnswerCatalogs() {
    const uint64_t epoch = RingEpoch();
    std::vector<SimpleData> ready;
    {
      MutexLock lock(&mu_);
      for (auto it = pending_catalogs_.begin();
           it != pending_catalogs_.end();) {
        if (it->first <= epoch) {
          ready.push_back(it->second);
          it = pending_catalogs_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const SimpleData& req : ready) control_->Response(req, Catalog());
  }

  // On the constructor's thread of a server that joined the running job.
  void JoinRunningJob(const KeyRing& joined) {
    Node* node = postoffice_->node();
    const int me = node->my_id();
    model::ControlRequest ask;
    ask.op = ControlOp::kCatalog;
    ask.ring_epoch = joined.epoch();
    int head = 0;
    const std::string body = model::EncodeControlRequest(ask, &head);
    std::vector<std::pair<int, int>> asked;  // (server, timestamp)
    for (int id : joined.server_ids()) {
      if (id != me) asked.emplace_back(id, control_->Request(head, body, id));
    }
    std::vector<model::ControlRequest> registrations;
    uint64_t version = 0;
    int answered = 0;
    for (const auto& a : asked) {
      Status s =
          control_->WaitStatus(a.second, node->options().model_timeout_ms);
      std::vector<std::string> answers;
      {
        MutexLock lock(&mu_);
        answers = std::move(answers_[a.second]);
        answers_.erase(a.second);
      }
      if (s.ok() && answers.size() != 1) {
        s = Status::Corruption(std::to_string(answers.size()) + " answers");
      }
      StatusOr<model::ControlReply> reply =
          s.ok() ? model::DecodeControlReply(answers[0])
                 : StatusOr<model::ControlReply>(s);
      if (reply.ok() && !reply->status.ok()) reply = reply->status;
      if (!reply.ok()) {
        LOG(ERROR) << "model server: the catalog of " << node->Describe(a.first)
                   << " did not come (" << reply.status()
                   << "); the tables registered only there are unknown here";
        continue;
      }
      ++answered;
      version = std::max(version, reply->version);
      for (auto& r : reply->registrations) {
        registrations.push_back(std::move(r));
      }
    }
    std::set<std::string> names;
    for (const model::ControlRequest& r : registrations) {
      Status s = Register(r);
      if (!s.ok()) {
        LOG(ERROR) << "model server: '" << r.name
                   << "' from a peer's catalog: " << s;
      }
      names.insert(r.name);
    }
    {
      MutexLock lock(&mu_);
      counters_.updates = std::max(counters_.updates, version);
    }
    StartDeferredApps();
    // With no table anywhere no app awaits a hand-over: the node reports
    // its join done now (with apps it waits for them; HandoverDone).
    node->HandoverDone(model::kControlApp);
    LOG(INFO) << "model server: joined the running job with " << names.size()
              << " table(s) and dense parameter(s) from the catalogs of "
              << answered << " of " << asked.size() << " server(s)";
  }

  // Starts the apps made while the catalog was awaited.
  void StartDeferredApps() {
    MutexLock lock(&apps_mu_);
    joining_ = false;
    for (int app_id : deferred_) StartApp(apps_[app_id].get());
    deferred_.clear();
  }

  // A table or dense parameter, as DecodeControlRequest checked it.
  Status Register(const model::ControlRequest& r) {
    Entry e;
    e.name = r.name;
    e.dense = r.op == ControlOp::kRegisterDense;
    e.optimizer = r.optimizer;
    e.consistency = r.consistency;
    if (e.dense) {
      e.numel = model::DenseElements(r.shape);
      e.dim = static_cast<int>(std::min<int64_t>(e.numel, model::kDenseChunk));
      e.initializer = "zeros";
      e.shape = r.shape;
    } else {
      if (r.dim > model::EmbeddingTable::kMaxDim) {
        return Status::InvalidArgument("'" + e.name + "': dim " +
                                       std::to_string(r.dim) + " is too large");
      }
      e.dim = static_cast<int>(r.dim);
      e.initializer = r.initializer;
    }
    auto app = model::KVAppFor(e.consistency);
    if (!app.ok()) return app.status();
    auto init = model::Initializer::Parse(e.initializer);
    if (!init.ok()) return init.status();
    auto opt = model::Optimizer::Parse(e.optimizer);
    if (!opt.ok()) return opt.status();
    const uint32_t id = model::TableId(e.name);
    {
      MutexLock lock(&mu_);
      auto it = tables_.find(id);
      if (it != tables_.end()) {
        const Entry& o = it->second;
        if (o.name != e.name) {
          return Status::InvalidArgument("'" + e.name + "' and '" + o.name +
                                         "' hash to the same table id; "
                                         "rename one");
        }
        if (o.dense != e.dense || o.dim != e.dim || o.numel != e.numel ||
            o.initializer != e.initializer || o.optimizer != e.optimizer ||
            o.consistency != e.consistency) {
          return Status::InvalidArgument(
              "'" + e.name + "' is already registered with another spec");
        }
        return Status::OK();
      }
      auto table = model::EmbeddingTable::Create(
          e.name, id, e.dim, std::move(init.value()), std::move(opt.value()));
      if (!table.ok()) return table.status();
      e.table = std::move(table.value());
      e.merge_rounds = e.consistency == "bsp";
      tables_.emplace(id, std::move(e));
    }
    return EnsureApp(*app, r.consistency);
  }

  // The KVServer of a consistency mode, created at its first table. Requests
  // that arrive before it exists wait on the node (see Node's early queue).
  Status EnsureApp(int app_id, const std::string& consistency) {
    MutexLock lock(&apps_mu_);
    if (apps_.count(app_id)) return Status::OK();
    auto server = std::make_unique<KVServer<float>>(app_id, postoffice_);
    PS_RETURN_IF_ERROR(server->SetConsistency(consistency));
    server->set_state_handle(
        [this, app_id](const std::function<bool(Key)>& want, size_t max_bytes,
                       std::vector<std::string>* chunks) {
          return DumpState(app_id, want, max_bytes, chunks);
        },
        [this, app_id](const char* data, size_t size) {
          return LoadState(app_id, data, size);
        },
        [this, app_id](const std::function<bool(Key)>& in_range) {
          DropPending(app_id, in_range);
        });
    if (joining_) {
      deferred_.push_back(app_id);  // StartDeferredApps starts it.
    } else {
      StartApp(server.get());
    }
    apps_[app_id] = std::move(server);
    return Status::OK();
  }

  // Starts delivery to a KV app: its state handle is in place.
  void StartApp(KVServer<float>* server) {
    server->set_request_handle(
        [this](const KVMeta& meta, const KVPairs<float>& data,
               KVServer<float>* s) { Handle(meta, data, s); });
  }

  void Handle(const KVMeta& meta, const KVPairs<float>& data,
              KVServer<float>* server) {
    const RowOp op = model::CmdOp(meta.cmd);
    const uint32_t tid = model::CmdTable(meta.cmd);
    const size_t n = data.keys.size();
    KVPairs<float> res;
    Status s;
    {
      MutexLock lock(&mu_);
      auto it = tables_.find(tid);
      if (it == tables_.end()) {
        s = Status::NotFound("no table or dense parameter with id " +
                             std::to_string(tid) +
                             " on this server: register it first");
      } else {
        s = Apply(op, it->second, meta, data, &res);
      }
    }
    if (!s.ok()) {
      server->ResponseError(meta, s);
      return;
    }
    (void)n;
    server->Response(meta, res);
  }

  Status Apply(RowOp op, Entry& e, const KVMeta& meta,
               const KVPairs<float>& data, KVPairs<float>* res) REQUIRES(mu_) {
    model::EmbeddingTable& t = *e.table;
    const size_t n = data.keys.size();
    const size_t dim = static_cast<size_t>(e.dim);
    const uint32_t tid = t.table_id();
    std::vector<uint64_t> ids(n);
    if (e.dense) {
      const uint64_t chunks = (e.numel + dim - 1) / dim;
      for (size_t i = 0; i < n; ++i) {
        ids[i] = model::DenseChunk(tid, data.keys[i], chunks);
        if (ids[i] >= chunks) {
          return Status::InvalidArgument("'" + e.name +
                                         "' has no chunk at key " +
                                         std::to_string(data.keys[i]));
        }
      }
    } else {
      for (size_t i = 0; i < n; ++i) ids[i] = model::RowId(tid, data.keys[i]);
    }
    const bool wants_rows = op == RowOp::kPull || op == RowOp::kPullDense;
    if (wants_rows != meta.pull || (!wants_rows && !meta.push)) {
      return Status::InvalidArgument("bad request kind for model op " +
                                     std::to_string(static_cast<int>(op)));
    }
    if (!wants_rows && data.vals.size() != n * dim) {
      return Status::InvalidArgument(
          "'" + e.name + "': " + std::to_string(data.vals.size()) +
          " values for " + std::to_string(n) + " rows of dimension " +
          std::to_string(dim));
    }
    switch (op) {
      case RowOp::kPull:
      case RowOp::kPullDense: {
        if ((op == RowOp::kPullDense) != e.dense) {
          return Status::InvalidArgument(
              "'" + e.name + "' is " +
              (e.dense ? "a dense parameter" : "an embedding table"));
        }
        PS_RETURN_IF_ERROR(FlushRound(e));
        res->keys = data.keys;
        res->vals.resize(n * dim);
        if (e.dense) {
          std::vector<size_t> missing;
          t.Find(ids.data(), n, res->vals.data(), &missing);
          if (!missing.empty()) {
            return Status::NotFound("dense parameter '" + e.name +
                                    "' is not initialised");
          }
        } else {
          PS_RETURN_IF_ERROR(t.Lookup(ids.data(), n, res->vals.data()));
        }
        counters_.rows_pulled += n;
        return Status::OK();
      }
      case RowOp::kPush: {
        if (e.merge_rounds) {
          PS_RETURN_IF_ERROR(MergePush(e, meta, ids, data.vals.data()));
        } else {
          PS_RETURN_IF_ERROR(t.ApplyGradients(ids.data(), n, data.vals.data()));
        }
        // A copy of another server's push (EMBER_REPLICAS) is not a
        // gradient push of this server's: counted, the version would grow
        // with the number of copies.
        if (meta.replica_of == 0) {
          ++counters_.updates;
          counters_.rows_updated += n;
        }
        return Status::OK();
      }
      case RowOp::kInitDense: {
        if (!e.dense) {
          return Status::InvalidArgument("'" + e.name +
                                         "' is not a dense parameter");
        }
        PS_RETURN_IF_ERROR(FlushRound(e));
        for (size_t i = 0; i < n; ++i) {
          if (t.Contains(ids[i])) continue;  // The first worker's values win.
          PS_RETURN_IF_ERROR(
              t.InsertRow(ids[i], data.vals.data() + i * dim, nullptr));
        }
        return Status::OK();
      }
    }
    return Status::InvalidArgument("unknown model op " +
                                   std::to_string(static_cast<int>(op)));
  }

  // bsp tables take one optimizer step per round with the sum of the
  // round's gradients, as one process would with the union of the workers'
  // mini-batches (Paddle's synchronous mode). The consistency controller
  // applies a round's pushes one after another, in worker-rank order, and
  // answers no pull of the table until the round is complete; so a round
  // here is the run of pushes from distinct workers at one clock. A push
  // from a worker already in the round, or at another clock, starts the
  // next round; a pull, an initialisation or a save of the table ends it.
  // Gradients are checked on arrival, so a bad push is refused alone.
  //
  // With replicas (EMBER_REPLICAS) a server also applies copies of other
  // servers' pushes (KVMeta::replica_of): a worker's push to this server
  // and the copy of its push to another touch distinct rows, so a worker is
  // in the round once per whose data it pushes. After a failover the heir gets
  // one round's pushes for the dead server's rows in several forms: copies
  // the dead server forwarded, resends (replica_of: the dead server) and
  // direct pushes (replica_of 0); they are one round, applied as one step,
  // exactly as on the dead server.
  Status MergePush(Entry& e, const KVMeta& meta,
                   const std::vector<uint64_t>& ids, const float* grads)
      REQUIRES(mu_) {
    const size_t dim = static_cast<size_t>(e.dim);
    PS_RETURN_IF_ERROR(e.table->CheckGradients(ids.data(), ids.size(), grads));
    Entry::Round& r = e.round;
    const std::pair<int, int> sender(meta.sender, meta.replica_of);
    if (!r.senders.empty() &&
        (r.clock != meta.clock || std::find(r.senders.begin(), r.senders.end(),
                                            sender) != r.senders.end())) {
      PS_RETURN_IF_ERROR(FlushRound(e));
    }
    r.clock = meta.clock;
    r.senders.push_back(sender);
    r.ids.insert(r.ids.end(), ids.begin(), ids.end());
    r.grads.insert(r.grads.end(), grads, grads + ids.size() * dim);
    return Status::OK();
  }

  // --- Copies of this server's state (docs/replication.md, "Restoring
  // copies", and the hand-overs of "Joining" and "Leaving"). A chunk holds
  // a table's registration, rows of one table (weights and optimizer
  // slots), or the table's pending bsp round restricted to the keys copied:
  //   magic "EMM1", table id, kind (1 rows, 2 round, 3 registration) as
  //   32-bit words; then
  //   rows:  count (64), row floats (32), the ids (64 each), the floats;
  //   round: whose id (32), clock (64), senders (32) and their (worker,
  //          whose) pairs (32 each), ids (64) and their ids, the gradients;
  //   registration: the sender's model version (64), the head (32) and
  //          body of the table's RegisterTable or RegisterDense request
  //          (model/model_control.h).
  // Little-endian (util/coding.h). Each table's registration comes first,
  // so a server that receives rows of a table it has not registered (one
  // that joined) registers it from the same app's messages, in order.
  static constexpr uint32_t kStateMagic = 0x314d4d45;  // "EMM1"

  // The ring key of row (or dense chunk) `id` of table entry `e`.
  static uint64_t KeyOf(const Entry& e, uint64_t id) {
    const uint32_t tid = e.table->table_id();
    if (!e.dense) return model::RowKey(tid, id);
    return model::DenseKey(tid, id, (e.numel + e.dim - 1) / e.dim);
  }

  static bool InApp(const Entry& e, int app_id) {
    auto app = model::KVAppFor(e.consistency);
    return app.ok() && *app == app_id;
  }

  Status DumpState(int app_id, const std::function<bool(Key)>& want,
                   size_t max_bytes, std::vector<std::string>* chunks) {
    Node* node = postoffice_->node();
    const int me = node ? node->my_id() : 0;
    MutexLock lock(&mu_);
    for (const auto& t : tables_) {
      const Entry& e = t.second;
      if (!InApp(e, app_id)) continue;
      chunks->push_back(RegistrationChunk(t.first, e, counters_.updates));
      const size_t row_floats = e.dim + e.table->slot_floats();
      std::vector<uint64_t> ids;
      std::vector<float> floats;
      e.table->ForEachRow([&](uint64_t id, const float* w, const float* sl) {
        if (!want(KeyOf(e, id))) return;
        ids.push_back(id);
        floats.insert(floats.end(), w, w + e.dim);
        floats.insert(floats.end(), sl, sl + e.table->slot_floats());
        if (ids.size() * (8 + row_floats * 4) >= max_bytes) {
          chunks->push_back(RowsChunk(t.first, row_floats, ids, floats));
          ids.clear();
          floats.clear();
        }
      });
      if (!ids.empty()) {
        chunks->push_back(RowsChunk(t.first, row_floats, ids, floats));
      }
      if (e.merge_rounds) {
        chunks->push_back(RoundChunk(t.first, e, me, want));
      }
    }
    return Status::OK();
  }

  static std::string RegistrationChunk(uint32_t tid, const Entry& e,
                                       uint64_t version) {
    int head = 0;
    const std::string body =
        model::EncodeControlRequest(Registration(e), &head);
    std::string c(24, '\0');
    EncodeFixed32(&c[0], kStateMagic);
    EncodeFixed32(&c[4], tid);
    EncodeFixed32(&c[8], 3);
    EncodeFixed64(&c[12], version);
    EncodeFixed32(&c[20], static_cast<uint32_t>(head));
    return c + body;
  }

  static std::string RowsChunk(uint32_t tid, size_t row_floats,
                               const std::vector<uint64_t>& ids,
                               const std::vector<float>& floats) {
    std::string c(24 + ids.size() * 8, '\0');
    EncodeFixed32(&c[0], kStateMagic);
    EncodeFixed32(&c[4], tid);
    EncodeFixed32(&c[8], 1);
    EncodeFixed64(&c[12], ids.size());
    EncodeFixed32(&c[20], static_cast<uint32_t>(row_floats));
    for (size_t i = 0; i < ids.size(); ++i) {
      EncodeFixed64(&c[24 + 8 * i], ids[i]);
    }
    std::string f;
    EncodeFloats(floats.data(), floats.size(), &f);
    return c + f;
  }

  // The pending bsp round of table `e`, restricted to the keys copied.
  static std::string RoundChunk(uint32_t tid, const Entry& e, int me,
                                const std::function<bool(Key)>& want) {
    const Entry::Round& r = e.round;
    const size_t dim = e.dim;
    std::vector<uint64_t> ids;
    std::vector<float> grads;
    for (size_t i = 0; i < r.ids.size(); ++i) {
      if (!want(KeyOf(e, r.ids[i]))) continue;
      ids.push_back(r.ids[i]);
      grads.insert(grads.end(), r.grads.begin() + i * dim,
                   r.grads.begin() + (i + 1) * dim);
    }
    std::string c(12 + 4 + 8 + 4 + r.senders.size() * 8 + 8 + ids.size() * 8,
                  '\0');
    char* p = &c[0];
    EncodeFixed32(p, kStateMagic);
    EncodeFixed32(p + 4, tid);
    EncodeFixed32(p + 8, 2);
    EncodeFixed32(p + 12, static_cast<uint32_t>(me));
    EncodeFixed64(p + 16, static_cast<uint64_t>(r.clock));
    EncodeFixed32(p + 24, static_cast<uint32_t>(r.senders.size()));
    p += 28;
    for (const auto& sw : r.senders) {
      // This server's own pushes reach a copy as copies of its data.
      EncodeFixed32(p, static_cast<uint32_t>(sw.first));
      EncodeFixed32(p + 4,
                    static_cast<uint32_t>(sw.second != 0 ? sw.second : me));
      p += 8;
    }
    EncodeFixed64(p, ids.size());
    p += 8;
    for (uint64_t id : ids) {
      EncodeFixed64(p, id);
      p += 8;
    }
    std::string f;
    EncodeFloats(grads.data(), grads.size(), &f);
    return c + f;
  }

  Status LoadState(int app_id, const char* data, size_t size) {
    if (size < 12 || DecodeFixed32(data) != kStateMagic) {
      return Status::Corruption("a model state chunk without its header");
    }
    const uint32_t tid = DecodeFixed32(data + 4);
    const uint32_t kind = DecodeFixed32(data + 8);
    if (kind == 3) return LoadRegistration(app_id, tid, data, size);
    MutexLock lock(&mu_);
    auto it = tables_.find(tid);
    if (it == tables_.end() || !InApp(it->second, app_id)) {
      return Status::NotFound("a copy of model table " + std::to_string(tid) +
                              ", which is not registered here");
    }
    Entry& e = it->second;
    if (kind == 1) return LoadRows(e, data, size);
    if (kind == 2) return LoadRound(e, data, size);
    return Status::Corruption("a model state chunk of kind " +
                              std::to_string(kind));
  }

  // A table's registration, ahead of its rows: registered here if it is
  // not yet (the same spec is fine; another is refused), and the model
  // version becomes at least the sender's.
  Status LoadRegistration(int app_id, uint32_t tid, const char* data,
                          size_t size) {
    if (size < 24) return Status::Corruption("a short model registration");
    const uint64_t version = DecodeFixed64(data + 12);
    const int head = static_cast<int>(DecodeFixed32(data + 20));
    auto r =
        model::DecodeControlRequest(head, std::string(data + 24, size - 24));
    if (!r.ok()) return r.status();
    if ((r->op != ControlOp::kRegisterTable &&
         r->op != ControlOp::kRegisterDense) ||
        model::TableId(r->name) != tid) {
      return Status::Corruption("a model registration chunk for table " +
                                std::to_string(tid) + " holds another");
    }
    auto app = model::KVAppFor(r->consistency);
    if (!app.ok()) return app.status();
    if (*app != app_id) {
      return Status::Corruption("'" + r->name + "' reached app " +
                                std::to_string(app_id) + ", not its own");
    }
    PS_RETURN_IF_ERROR(Register(*r));
    MutexLock lock(&mu_);
    counters_.updates = std::max(counters_.updates, version);
    return Status::OK();
  }

  Status LoadRows(Entry& e, const char* data, size_t size) REQUIRES(mu_) {
    const size_t row_floats = e.dim + e.table->slot_floats();
    if (size < 24 || DecodeFixed32(data + 20) != row_floats) {
      return Status::Corruption("'" + e.name + "': rows of another size");
    }
    const uint64_t n = DecodeFixed64(data + 12);
    const size_t per_row = 8 + row_floats * 4;
    if (n > (size - 24) / per_row || size - 24 != n * per_row) {
      return Status::Corruption("'" + e.name + "': " + std::to_string(n) +
                                " rows in " + std::to_string(size) + " bytes");
    }
    std::vector<float> floats;
    AppendFloats(std::string(data + 24 + n * 8, n * row_floats * 4), &floats);
    for (uint64_t i = 0; i < n; ++i) {
      const float* row = floats.data() + i * row_floats;
      PS_RETURN_IF_ERROR(
          e.table->PutRow(DecodeFixed64(data + 24 + 8 * i), row, row + e.dim));
    }
    return Status::OK();
  }

  // A copy of another server's data (bsp) begins: the rounds of the app's
  // tables drop their gradients for the keys copied, before any chunk of it
  // lands. Were they still pending when a pull or a push of this server's
  // own rows flushed a round between the copy's rows and its round, they
  // would be applied onto the copied rows, which hold them already, or
  // again beside the copied round.
  void DropPending(int app_id, const std::function<bool(Key)>& in_range) {
    MutexLock lock(&mu_);
    for (auto& t : tables_) {
      Entry& e = t.second;
      if (!InApp(e, app_id) || !e.merge_rounds) continue;
      Entry::Round& r = e.round;
      const size_t dim = e.dim;
      size_t kept = 0;
      for (size_t i = 0; i < r.ids.size(); ++i) {
        if (in_range(KeyOf(e, r.ids[i]))) continue;
        r.ids[kept] = r.ids[i];
        std::copy(r.grads.begin() + i * dim, r.grads.begin() + (i + 1) * dim,
                  r.grads.begin() + kept * dim);
        ++kept;
      }
      r.ids.resize(kept);
      r.grads.resize(kept * dim);
      if (r.ids.empty()) r.senders.clear();
    }
  }

  // The copied round replaces what this server's round holds for the keys
  // of the server it came from (copies of some of the same pushes).
  Status LoadRound(Entry& e, const char* data, size_t size) REQUIRES(mu_) {
    if (size < 28) return Status::Corruption("a short model round chunk");
    const int whose = static_cast<int>(DecodeFixed32(data + 12));
    const int64_t clock = static_cast<int64_t>(DecodeFixed64(data + 16));
    const uint64_t senders = DecodeFixed32(data + 24);
    if (senders > (size - 28) / 8 || size - 28 - senders * 8 < 8) {
      return Status::Corruption("a model round chunk of bad size");
    }
    const char* p = data + 28;
    std::vector<std::pair<int, int>> from(senders);
    for (auto& sw : from) {
      sw.first = static_cast<int>(DecodeFixed32(p));
      sw.second = static_cast<int>(DecodeFixed32(p + 4));
      p += 8;
    }
    const uint64_t n = DecodeFixed64(p);
    p += 8;
    const size_t dim = e.dim;
    const size_t rest = size - (p - data);
    if (n > rest / 8 || rest != n * 8 + n * dim * 4) {
      return Status::Corruption("a model round chunk of bad size");
    }
    Node* node = postoffice_->node();
    std::shared_ptr<const KeyRing> ring = node ? node->key_ring() : nullptr;
    if (!ring) return Status::Unavailable("no ring yet");
    Entry::Round& r = e.round;
    // Drop what this round holds of the sender's keys (the copy's rows hold
    // those the sender has applied) before anything of the round is
    // applied: flushed onto the copied rows, they would count twice.
    Entry::Round kept;
    kept.clock = r.clock;
    for (size_t i = 0; i < r.ids.size(); ++i) {
      if (ring->Owner(KeyOf(e, r.ids[i])) == whose) continue;
      kept.ids.push_back(r.ids[i]);
      kept.grads.insert(kept.grads.end(), r.grads.begin() + i * dim,
                        r.grads.begin() + (i + 1) * dim);
    }
    for (const auto& sw : r.senders) {
      if (std::find(from.begin(), from.end(), sw) == from.end() &&
          sw.second != whose) {
        kept.senders.push_back(sw);
      }
    }
    if (kept.ids.empty()) kept.senders.clear();
    if (!kept.senders.empty() && kept.clock != clock && n > 0) {
      // The rest of this server's round is of another clock: applied first.
      r = std::move(kept);
      PS_RETURN_IF_ERROR(FlushRound(e));
      kept = Entry::Round();
    }
    if (n > 0) {
      kept.clock = clock;
      for (const auto& sw : from) kept.senders.push_back(sw);
      for (uint64_t i = 0; i < n; ++i) {
        kept.ids.push_back(DecodeFixed64(p + 8 * i));
      }
      AppendFloats(std::string(p + 8 * n, n * dim * 4), &kept.grads);
    }
    if (kept.ids.empty()) kept.senders.clear();
    r = std::move(kept);
    return Status::OK();
  }

  // Applies the table's pending round, if any.
  Status FlushRound(Entry& e) REQUIRES(mu_) {
    Entry::Round& r = e.round;
    if (r.senders.empty()) return Status::OK();
    Status s =
        e.table->ApplyGradients(r.ids.data(), r.ids.size(), r.grads.data());
    if (!s.ok()) {
      LOG(ERROR) << "'" << e.name << "': a round of " << r.senders.size()
                 << " pushes was not applied: " << s;
    }
    r = Entry::Round();
    return s;
  }

  // A checkpoint has a shard per server on the key ring when it was saved,
  // shard-<i>-of-<n>.ckpt for the server at index i of the ring's n, and
  // each shard records that ring. A server writes every row it stores (its
  // copies of other servers' rows too); a loader takes each row from the
  // shard of the server that owned it under the recorded ring, and keeps
  // the rows it holds under its own ring. So a checkpoint saved after a
  // failover or a join loads into any cluster (docs/model.md).
  static std::string ShardPath(const std::string& dir, int index, int count) {
    return dir + "/shard-" + std::to_string(index) + "-of-" +
           std::to_string(count) + ".ckpt";
  }

  // Fills the head's place and ring; false if this server is on no ring
  // (it holds nothing to save).
  bool PlaceShard(model::ModelShard* head) const {
    Node* node = postoffice_->node();
    std::shared_ptr<const KeyRing> ring = node ? node->key_ring() : nullptr;
    if (!ring) {  // No ring yet: place by rank.
      head->server_rank = postoffice_->my_rank();
      head->num_servers = postoffice_->num_servers();
      return true;
    }
    const int index = ring->IndexOf(node->my_id());
    if (index < 0) return false;
    const RingInfo info = ring->ToInfo();
    head->server_rank = index;
    head->num_servers = ring->num_servers();
    head->ring_epoch = info.epoch;
    head->ring_server_ids = info.server_ids;
    head->ring_placement = info.placement;
    head->ring_begins = info.begins;
    head->ring_owners = info.owners;
    head->ring_replicas = info.replicas;
    return true;
  }

  // The shards of the checkpoint in `dir`: their count, all present.
  static StatusOr<int> CountShards(const std::string& dir) {
    std::vector<std::string> names;
    PS_RETURN_IF_ERROR(ListDirectory(dir, &names));
    int count = -1;
    std::set<int> found;
    for (const std::string& name : names) {
      int index = -1, of = -1, used = 0;
      if (std::sscanf(name.c_str(), "shard-%d-of-%d.ckpt%n", &index, &of,
                      &used) != 2 ||
          used != static_cast<int>(name.size()) || index < 0 || of < 1 ||
          index >= of) {
        continue;
      }
      if (count >= 0 && of != count) {
        return Status::InvalidArgument(
            dir + " holds shards of two checkpoints, of " +
            std::to_string(count) + " and " + std::to_string(of) + " servers");
      }
      count = of;
      found.insert(index);
    }
    if (count < 0) {
      return Status::NotFound(dir + " holds no checkpoint shard");
    }
    for (int i = 0; i < count; ++i) {
      if (!found.count(i)) {
        return Status::NotFound(ShardPath(dir, i, count) + " is missing");
      }
    }
    return count;
  }

  // Writes this server's shard from a snapshot taken at the start, while
  // pushes and pulls go on: each table keeps the old contents of a row that a
  // push changes before it is written (EmbeddingTable::BeginSnapshot), and
  // the rest are copied a slice at a time under mu_ and written without it.
  // Extra memory is a bit per row plus a slice, not a copy of the tables.
  // Save, Load and registrations all run on the control app's thread, so
  // the tables and their specs stay put until the save ends.
  Status Save(const std::string& dir) {
    model::ModelShard head;
    std::vector<std::pair<uint32_t, const Entry*>> saving;
    {
      MutexLock lock(&mu_);
      if (!PlaceShard(&head)) {
        LOG(INFO) << "model save: this server is on no key ring and holds "
                     "no keys; it writes no shard";
        return Status::OK();
      }
      head.version = static_cast<int64_t>(counters_.updates);
      for (auto& it : tables_) PS_RETURN_IF_ERROR(FlushRound(it.second));
      for (auto& it : tables_) {
        it.second.table->BeginSnapshot();
        saving.emplace_back(it.first, &it.second);
      }
    }
    Status s = model::WriteCheckpointStream(
        ShardPath(dir, head.server_rank, head.num_servers), head,
        [&](model::CheckpointSink* sink) {
          for (const auto& t : saving) {
            PS_RETURN_IF_ERROR(WriteSnapshot(t.first, *t.second, sink));
          }
          return Status::OK();
        });
    MutexLock lock(&mu_);
    for (const auto& t : saving) t.second->table->EndSnapshot();
    return s;
  }

  // Index slots per slice of a snapshot (about 1 MiB of rows of dim 16 with
  // Adagrad): what one hold of mu_ copies.
  static constexpr size_t kSnapshotSlice = 16384;

  Status WriteSnapshot(uint32_t id, const Entry& e,
                       model::CheckpointSink* sink) {
    model::EmbeddingTable& t = *e.table;
    model::TableShard part;
    part.name = e.name;
    part.table_id = id;
    part.dim = e.dim;
    part.initializer = e.initializer;
    part.optimizer = e.optimizer;
    part.slot_floats = t.slot_floats();
    const size_t dim = static_cast<size_t>(e.dim);
    const size_t slot_floats = static_cast<size_t>(t.slot_floats());
    uint64_t rows;
    {
      MutexLock lock(&mu_);
      rows = t.snapshot_rows();
    }
    model::EmbeddingTable::RowBatch batch;
    bool more = true;
    while (more) {
      batch.Clear();
      {
        MutexLock lock(&mu_);
        t.TakePreservedRows(&batch);
        more = t.NextSnapshotRows(kSnapshotSlice, &batch);
      }
      if (!e.dense) {
        part.ids.swap(batch.ids);
        part.weights.swap(batch.weights);
        part.slots.swap(batch.slots);
        Status s = sink->AddTableRows(part, rows);
        part.ids.swap(batch.ids);
        part.weights.swap(batch.weights);
        part.slots.swap(batch.slots);
        PS_RETURN_IF_ERROR(s);
        continue;
      }
      for (size_t i = 0; i < batch.ids.size(); ++i) {
        model::DenseShard d;
        d.name = e.name;
        d.shape = e.shape;
        d.chunk = batch.ids[i];
        d.offset = batch.ids[i] * dim;
        const size_t len = std::min<int64_t>(dim, e.numel - d.offset);
        d.values.assign(batch.weights.begin() + i * dim,
                        batch.weights.begin() + i * dim + len);
        d.optimizer = e.optimizer;
        d.slots.assign(batch.slots.begin() + i * slot_floats,
                       batch.slots.begin() + (i + 1) * slot_floats);
        PS_RETURN_IF_ERROR(sink->AddDense(d));
      }
    }
    return Status::OK();
  }

  // Reads and checks every shard of the checkpoint, one at a time, and
  // stages the rows this server holds under its ring, each taken from the
  // shard of the server that owned it under the recorded ring; a commit
  // (once every server staged) swaps them in, so a load refused by any
  // server changes nothing anywhere.
  Status Load(const std::string& dir) {
    StatusOr<int> count = CountShards(dir);
    if (!count.ok()) return count.status();
    Node* node = postoffice_->node();
    std::shared_ptr<const KeyRing> ring = node ? node->key_ring() : nullptr;
    const int me = ring ? ring->IndexOf(node->my_id()) : -1;
    // Whether this server stores `key` now: it owns it or keeps a copy.
    auto holds = [&](uint64_t key) {
      if (!ring) return true;
      if (me < 0) return false;
      const std::vector<int> holders = ring->Successors(
          ring->RangeAt(ring->PositionOf(key)), ring->replicas() + 1);
      return std::find(holders.begin(), holders.end(), me) != holders.end();
    };
    std::map<uint32_t, std::unique_ptr<model::EmbeddingTable>> fresh;
    uint64_t version = 0;
    uint64_t saved_epoch = 0;
    bool rings_seen = false;
    for (int i = 0; i < *count; ++i) {
      const std::string path = ShardPath(dir, i, *count);
      auto shard = model::ReadCheckpoint(path);
      if (!shard.ok()) return shard.status();
      if (shard->server_rank != i || shard->num_servers != *count) {
        return Status::Corruption(path + " says it is shard " +
                                  std::to_string(shard->server_rank) + " of " +
                                  std::to_string(shard->num_servers));
      }
      // Which of its rows the shard is the source of: those its server
      // owned (it holds copies of others' too). A shard without a ring (an
      // older checkpoint) is the source of every row not loaded yet.
      std::function<bool(uint64_t)> owned = [](uint64_t) { return true; };
      std::optional<KeyRing> saved;
      if (!shard->ring_begins.empty()) {
        RingInfo info;
        info.epoch = shard->ring_epoch;
        info.placement = shard->ring_placement;
        info.server_ids = shard->ring_server_ids;
        info.begins = shard->ring_begins;
        info.owners = shard->ring_owners;
        info.replicas = shard->ring_replicas;
        auto parsed = KeyRing::FromInfo(info);
        if (!parsed.ok()) {
          return Status::Corruption(
              path + ": its key ring: " + parsed.status().message());
        }
        if (rings_seen && parsed->epoch() != saved_epoch) {
          return Status::Corruption(
              dir + ": shards written under rings of epochs " +
              std::to_string(saved_epoch) + " and " +
              std::to_string(parsed->epoch()) + "; save again");
        }
        if (i >= parsed->num_servers()) {
          return Status::Corruption(path + ": its ring has " +
                                    std::to_string(parsed->num_servers()) +
                                    " servers");
        }
        rings_seen = true;
        saved_epoch = parsed->epoch();
        saved = std::move(parsed.value());
        const int owner = saved->server_ids()[i];
        owned = [&saved, owner](uint64_t key) {
          return saved->Owner(key) == owner;
        };
      }
      version = std::max(version, static_cast<uint64_t>(shard->version));
      MutexLock lock(&mu_);
      PS_RETURN_IF_ERROR(StageShard(*shard, owned, holds, &fresh));
    }
    MutexLock lock(&mu_);
    staged_ = std::make_unique<Staged>();
    staged_->tables = std::move(fresh);
    staged_->version = version;
    return Status::OK();
  }

  // Adds to `fresh` the rows of `shard` that it is the source of (`owned`)
  // and this server holds (`holds`), checked against the registered specs.
  Status StageShard(
      const model::ModelShard& shard,
      const std::function<bool(uint64_t)>& owned,
      const std::function<bool(uint64_t)>& holds,
      std::map<uint32_t, std::unique_ptr<model::EmbeddingTable>>* fresh)
      REQUIRES(mu_) {
    auto make = [&](Entry& e) -> StatusOr<model::EmbeddingTable*> {
      uint32_t id = model::TableId(e.name);
      auto& slot = (*fresh)[id];
      if (!slot) {
        auto init = model::Initializer::Parse(e.initializer);
        auto opt = model::Optimizer::Parse(e.optimizer);
        if (!init.ok() || !opt.ok()) return Status::Internal("bad spec");
        auto t = model::EmbeddingTable::Create(
            e.name, id, e.dim, std::move(init.value()), std::move(opt.value()));
        if (!t.ok()) return t.status();
        slot = std::move(t.value());
      }
      return slot.get();
    };
    for (const model::TableShard& ts : shard.tables) {
      auto it = tables_.find(model::TableId(ts.name));
      if (it == tables_.end() || it->second.dense || it->second.dim != ts.dim ||
          it->second.optimizer != ts.optimizer) {
        return Status::InvalidArgument(
            "checkpoint table '" + ts.name +
            "' is not registered here with the same dimension and optimizer");
      }
      auto t = make(it->second);
      if (!t.ok()) return t.status();
      if (ts.slot_floats != (*t)->slot_floats()) {
        return Status::Corruption("'" + ts.name + "': optimizer state size");
      }
      for (size_t i = 0; i < ts.ids.size(); ++i) {
        const uint64_t key = KeyOf(it->second, ts.ids[i]);
        if (!owned(key) || !holds(key) || (*t)->Contains(ts.ids[i])) continue;
        PS_RETURN_IF_ERROR((*t)->InsertRow(
            ts.ids[i], ts.weights.data() + i * ts.dim,
            ts.slot_floats ? ts.slots.data() + i * ts.slot_floats : nullptr));
      }
    }
    for (const model::DenseShard& d : shard.dense) {
      auto it = tables_.find(model::TableId(d.name));
      if (it == tables_.end() || !it->second.dense ||
          it->second.optimizer != d.optimizer) {
        return Status::InvalidArgument("checkpoint dense parameter '" + d.name +
                                       "' is not registered here");
      }
      auto t = make(it->second);
      if (!t.ok()) return t.status();
      std::vector<float> row(it->second.dim, 0.0f);
      if (d.values.size() > row.size() ||
          d.slots.size() != static_cast<size_t>((*t)->slot_floats())) {
        return Status::Corruption("'" + d.name + "': chunk size");
      }
      const uint64_t chunks =
          (it->second.numel + it->second.dim - 1) / it->second.dim;
      if (d.chunk >= chunks) {
        return Status::Corruption("'" + d.name + "' has no chunk " +
                                  std::to_string(d.chunk));
      }
      const uint64_t key = KeyOf(it->second, d.chunk);
      if (!owned(key) || !holds(key) || (*t)->Contains(d.chunk)) continue;
      std::copy(d.values.begin(), d.values.end(), row.begin());
      PS_RETURN_IF_ERROR((*t)->InsertRow(
          d.chunk, row.data(), d.slots.empty() ? nullptr : d.slots.data()));
    }
    return Status::OK();
  }

  Postoffice* const postoffice_;
  std::unique_ptr<model::ControlApp> control_;

  Mutex apps_mu_;
  std::map<int, std::unique_ptr<KVServer<float>>> apps_ GUARDED_BY(apps_mu_);
  // A server that joined the running job: its apps wait (deferred_) until
  // the catalogs are in (JoinRunningJob).
  bool joining_ GUARDED_BY(apps_mu_) = false;
  std::vector<int> deferred_ GUARDED_BY(apps_mu_);

  struct Staged {
    std::map<uint32_t, std::unique_ptr<model::EmbeddingTable>> tables;
    uint64_t version = 0;
  };

  mutable Mutex mu_;
  std::map<uint32_t, Entry> tables_ GUARDED_BY(mu_);
  std::unique_ptr<Staged> staged_ GUARDED_BY(mu_);  // A load to commit.
  ModelServerStats counters_ GUARDED_BY(mu_);
  // Catalogs asked under a ring this server has not reached: (epoch,
  // request). Answers to this server's own catalog requests, by timestamp.
  std::vector<std::pair<uint64_t, SimpleData>> pending_catalogs_
      GUARDED_BY(mu_);
  std::map<int, std::vector<std::string>> answers_ GUARDED_BY(mu_);
};

ModelServer::ModelServer(Postoffice* postoffice)
    : impl_(std::make_unique<Impl>(postoffice)) {}
ModelServer::~ModelServer() = default;
ModelServerStats ModelServer::stats() const { return impl_->stats(); }

}  // namespace ps
