// ModelServer: the servers' half of the model layer. One store of tables
// (embedding tables, and dense parameters kept as tables of chunks) shared
// by a KVServer per consistency mode and a control SimpleApp.

#include <glog/logging.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "model/checkpoint.h"
#include "model/embedding_table.h"
#include "model/model_control.h"
#include "model/model_protocol.h"
#include "node/node.h"
#include "partition/key_ring.h"
#include "ps/kv_app.h"
#include "ps/model.h"
#include "ps/ps.h"
#include "util/coding.h"
#include "util/mutex.h"

namespace ps {

using model::ControlOp;
using model::RowOp;

class ModelServer::Impl {
 public:
  explicit Impl(Postoffice* postoffice)
      : postoffice_(postoffice ? postoffice : Postoffice::Get()) {
    control_ = std::make_unique<SimpleApp>(model::kControlApp,
                                           model::kControlApp, postoffice_);
    control_->set_request_handle([this](const SimpleData& req, SimpleApp* app) {
      app->Response(req, Control(req));
    });
    // Rows and bytes per table, read at each scrape (docs/operations.md).
    metrics_node_ = postoffice_->node();
    if (metrics_node_) {
      collector_ = metrics_node_->metrics()->AddCollector(
          [this](metrics::Writer* w) { CollectMetrics(w); });
    }
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
               "Rows of a model table on this server (dense: chunks)", l,
               static_cast<double>(t.second.table->size()));
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

  static std::string Reply(const Status& s, uint64_t version = 0) {
    model::ControlReply reply;
    reply.status = s;
    reply.version = version;
    return model::EncodeControlReply(reply);
  }

  std::string Control(const SimpleData& req) {
    auto decoded = model::DecodeControlRequest(req.head, req.body);
    if (!decoded.ok()) {
      LOG(WARNING) << "model control request from node " << req.sender
                   << " refused: " << decoded.status();
      return Reply(decoded.status());
    }
    const model::ControlRequest& r = *decoded;
    switch (r.op) {
      case ControlOp::kRegisterTable:
      case ControlOp::kRegisterDense:
        return Reply(Register(r));
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
    return Reply(Status::InvalidArgument("unknown model control request " +
                                         std::to_string(req.head)));
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
    server->set_request_handle(
        [this](const KVMeta& meta, const KVPairs<float>& data,
               KVServer<float>* s) { Handle(meta, data, s); });
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
    apps_[app_id] = std::move(server);
    return Status::OK();
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
        ++counters_.updates;
        counters_.rows_updated += n;
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
  // copies"). A chunk holds rows of one table (weights and optimizer
  // slots), or the table's pending bsp round restricted to the keys copied:
  //   magic "EMM1", table id, kind (1 rows, 2 round) as 32-bit words; then
  //   rows:  count (64), row floats (32), the ids (64 each), the floats;
  //   round: whose id (32), clock (64), senders (32) and their (worker,
  //          whose) pairs (32 each), ids (64) and their ids, the gradients.
  // Little-endian (util/coding.h).
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

  // Checkpoint shards are per server rank (ShardPath). After a failover an
  // heir holds a dead server's rows beside its own and nobody has the dead
  // rank: a save would write a checkpoint that no cluster of this size can
  // load, and a load would leave the dead rank's shard out. Both are
  // refused, clearly, until a replacement server has joined.
  // NumServers() follows the ring; the ranks of its servers must be 0..n-1
  // with n at least DMLC_NUM_SERVER (a server that left leaves a gap too).
  Status CheckWholeRing(const char* what) const {
    Node* node = postoffice_->node();
    std::shared_ptr<const KeyRing> ring = node ? node->key_ring() : nullptr;
    if (!ring) return Status::OK();
    const int expected = node->options().num_servers;
    bool whole = ring->num_servers() >= expected;
    for (int id : ring->server_ids()) {
      whole = whole && Node::IdToRank(id) < ring->num_servers();
    }
    if (whole) return Status::OK();
    return Status::Unavailable(
        std::string("model ") + what + " refused: the ring (epoch " +
        std::to_string(ring->epoch()) + ") has " +
        std::to_string(ring->num_servers()) + " of the servers of ranks 0.." +
        std::to_string(std::max(expected, ring->num_servers()) - 1) +
        " (servers failed over or left) and checkpoint shards are per "
        "server rank");
  }

  std::string ShardPath(const std::string& dir) const {
    return dir + "/shard-" + std::to_string(postoffice_->my_rank()) + "-of-" +
           std::to_string(postoffice_->num_servers()) + ".ckpt";
  }

  // Writes this server's shard from a snapshot taken at the start, while
  // pushes and pulls go on: each table keeps the old contents of a row that a
  // push changes before it is written (EmbeddingTable::BeginSnapshot), and
  // the rest are copied a slice at a time under mu_ and written without it.
  // Extra memory is a bit per row plus a slice, not a copy of the tables.
  // Save, Load and registrations all run on the control app's thread, so
  // the tables and their specs stay put until the save ends.
  Status Save(const std::string& dir) {
    PS_RETURN_IF_ERROR(CheckWholeRing("save"));
    model::ModelShard head;
    std::vector<std::pair<uint32_t, const Entry*>> saving;
    {
      MutexLock lock(&mu_);
      head.version = static_cast<int64_t>(counters_.updates);
      head.server_rank = postoffice_->my_rank();
      head.num_servers = postoffice_->num_servers();
      for (auto& it : tables_) PS_RETURN_IF_ERROR(FlushRound(it.second));
      for (auto& it : tables_) {
        it.second.table->BeginSnapshot();
        saving.emplace_back(it.first, &it.second);
      }
    }
    Status s = model::WriteCheckpointStream(
        ShardPath(dir), head, [&](model::CheckpointSink* sink) {
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

  // Reads and checks this server's shard and stages its tables; a commit
  // (once every server staged its shard) swaps them in, so a load refused
  // by any server changes nothing anywhere.
  Status Load(const std::string& dir) {
    PS_RETURN_IF_ERROR(CheckWholeRing("load"));
    auto shard = model::ReadCheckpoint(ShardPath(dir));
    if (!shard.ok()) return shard.status();
    MutexLock lock(&mu_);
    // Check everything first: a refused load changes nothing.
    std::map<uint32_t, std::unique_ptr<model::EmbeddingTable>> fresh;
    auto make = [&](Entry& e) -> StatusOr<model::EmbeddingTable*> {
      uint32_t id = model::TableId(e.name);
      auto& slot = fresh[id];
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
    for (const model::TableShard& ts : shard->tables) {
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
        PS_RETURN_IF_ERROR((*t)->InsertRow(
            ts.ids[i], ts.weights.data() + i * ts.dim,
            ts.slot_floats ? ts.slots.data() + i * ts.slot_floats : nullptr));
      }
    }
    for (const model::DenseShard& d : shard->dense) {
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
      std::copy(d.values.begin(), d.values.end(), row.begin());
      PS_RETURN_IF_ERROR((*t)->InsertRow(
          d.chunk, row.data(), d.slots.empty() ? nullptr : d.slots.data()));
    }
    staged_ = std::make_unique<Staged>();
    staged_->tables = std::move(fresh);
    staged_->version = static_cast<uint64_t>(shard->version);
    return Status::OK();
  }

  Postoffice* const postoffice_;
  std::unique_ptr<SimpleApp> control_;

  Mutex apps_mu_;
  std::map<int, std::unique_ptr<KVServer<float>>> apps_ GUARDED_BY(apps_mu_);

  struct Staged {
    std::map<uint32_t, std::unique_ptr<model::EmbeddingTable>> tables;
    uint64_t version = 0;
  };

  mutable Mutex mu_;
  std::map<uint32_t, Entry> tables_ GUARDED_BY(mu_);
  std::unique_ptr<Staged> staged_ GUARDED_BY(mu_);  // A load to commit.
  ModelServerStats counters_ GUARDED_BY(mu_);
};

ModelServer::ModelServer(Postoffice* postoffice)
    : impl_(std::make_unique<Impl>(postoffice)) {}
ModelServer::~ModelServer() = default;
ModelServerStats ModelServer::stats() const { return impl_->stats(); }

}  // namespace ps
