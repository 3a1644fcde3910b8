// ModelClient: the workers' half of the model layer.

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <numeric>

#include "model/control_app.h"
#include "model/model_control.h"
#include "model/model_protocol.h"
#include "node/node.h"
#include "ps/kv_app.h"
#include "ps/model.h"
#include "ps/ps.h"
#include "util/mutex.h"

namespace ps {

using model::ControlOp;
using model::RowOp;

class ModelClient::Impl {
 public:
  Impl(Postoffice* postoffice, int customer_id)
      : postoffice_(postoffice ? postoffice : Postoffice::Get()),
        customer_id_(customer_id) {
    control_ = std::make_unique<model::ControlApp>(model::kControlApp,
                                                   customer_id, postoffice_);
    control_->set_response_handle([this](const SimpleData& res, SimpleApp*) {
      MutexLock lock(&mu_);
      answers_[res.timestamp].push_back(res.body);
    });
    control_->set_ring_handler([this] {
      MutexLock lock(&mu_);
      ring_changed_.notify_all();
    });
  }

  ~Impl() {
    control_.reset();
    MutexLock lock(&mu_);
    workers_.clear();
  }

  Status RegisterTable(const TableSpec& spec) {
    if (spec.name.empty()) {
      return Status::InvalidArgument("a table needs a name");
    }
    if (spec.dim < 1) {
      return Status::InvalidArgument("table '" + spec.name + "': dim " +
                                     std::to_string(spec.dim) + " < 1");
    }
    model::ControlRequest request;
    request.op = ControlOp::kRegisterTable;
    request.dim = spec.dim;
    request.initializer = spec.initializer;
    Info info;
    info.dim = spec.dim;
    return Register(&request, spec.name, spec.optimizer, spec.consistency,
                    &info);
  }

  Status RegisterDense(const DenseSpec& spec,
                       const std::vector<float>& initial) {
    if (spec.name.empty()) {
      return Status::InvalidArgument("a dense parameter needs a name");
    }
    int64_t numel = 1;
    for (int64_t d : spec.shape) {
      if (d < 1 || d > model::kMaxDenseElements / numel) {
        return Status::InvalidArgument("'" + spec.name + "': bad shape");
      }
      numel *= d;
    }
    if (static_cast<int64_t>(initial.size()) != numel) {
      return Status::InvalidArgument(
          "'" + spec.name + "': " + std::to_string(initial.size()) +
          " initial values for " + std::to_string(numel) + " elements");
    }
    model::ControlRequest request;
    request.op = ControlOp::kRegisterDense;
    request.shape = spec.shape;
    Info info;
    info.dense = true;
    info.numel = numel;
    info.dim = static_cast<int>(std::min<int64_t>(numel, model::kDenseChunk));
    PS_RETURN_IF_ERROR(
        Register(&request, spec.name, spec.optimizer, spec.consistency, &info));
    // Offer our values; servers keep the first they get.
    std::vector<Key> keys;
    std::vector<float> vals;
    DenseKeys(info, initial.data(), &keys, &vals);
    return info.kv->WaitStatus(info.kv->Push(
        keys, vals, {}, model::RowCmd(RowOp::kInitDense, info.id)));
  }

  Status PullDense(const std::string& name, std::vector<float>* values,
                   int64_t* version) {
    auto info = Lookup(name, true);
    if (!info.ok()) return info.status();
    std::vector<Key> keys;
    DenseKeys(*info, nullptr, &keys, nullptr);
    std::vector<float> chunks;
    PS_RETURN_IF_ERROR(info->kv->WaitStatus(info->kv->Pull(
        keys, &chunks, nullptr, model::RowCmd(RowOp::kPullDense, info->id))));
    Unchunk(*info, keys, chunks, values);
    if (version) PS_RETURN_IF_ERROR(Version(version));
    return Status::OK();
  }

  int PullRowsAsync(const std::string& table,
                    const std::vector<uint64_t>& ids) {
    auto p = std::make_shared<PendingRows>();
    auto info = Lookup(table, false);
    int ticket;
    {
      MutexLock lock(&mu_);
      ticket = next_ticket_++;
      rows_[ticket] = p;
    }
    if (!info.ok()) {
      p->status = info.status();
      p->done = true;
      return ticket;
    }
    p->info = *info;
    // One key per distinct ID, sorted; where each ID's row goes.
    std::vector<Key> all(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      all[i] = model::RowKey(info->id, ids[i]);
    }
    p->keys = all;
    std::sort(p->keys.begin(), p->keys.end());
    p->keys.erase(std::unique(p->keys.begin(), p->keys.end()), p->keys.end());
    p->slot.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      p->slot[i] = std::lower_bound(p->keys.begin(), p->keys.end(), all[i]) -
                   p->keys.begin();
    }
    p->ts = info->kv->Pull(p->keys, &p->vals, nullptr,
                           model::RowCmd(RowOp::kPull, info->id));
    return ticket;
  }

  Status WaitRows(int ticket, std::vector<float>* rows) {
    std::shared_ptr<PendingRows> p;
    {
      MutexLock lock(&mu_);
      auto it = rows_.find(ticket);
      if (it == rows_.end()) {
        return Status::InvalidArgument("unknown or already waited ticket " +
                                       std::to_string(ticket));
      }
      p = it->second;
      rows_.erase(it);
    }
    if (p->done) return p->status;
    PS_RETURN_IF_ERROR(p->info.kv->WaitStatus(p->ts));
    const size_t dim = static_cast<size_t>(p->info.dim);
    rows->resize(p->slot.size() * dim);
    for (size_t i = 0; i < p->slot.size(); ++i) {
      std::copy_n(p->vals.begin() + p->slot[i] * dim, dim,
                  rows->begin() + i * dim);
    }
    return Status::OK();
  }

  Status Push(const std::vector<DenseGradient>& dense,
              const std::vector<SparseGradient>& sparse, int64_t* version) {
    struct Sent {
      KVWorker<float>* kv;
      int ts;
    };
    std::vector<Sent> sent;
    Status first;
    for (const DenseGradient& g : dense) {
      auto info = Lookup(g.name, true);
      if (!info.ok()) return info.status();
      if (static_cast<int64_t>(g.grads.size()) != info->numel) {
        return Status::InvalidArgument(
            "'" + g.name + "': gradient of " + std::to_string(g.grads.size()) +
            " values for " + std::to_string(info->numel) + " elements");
      }
    }
    for (const SparseGradient& g : sparse) {
      auto info = Lookup(g.table, false);
      if (!info.ok()) return info.status();
      if (g.grads.size() != g.ids.size() * info->dim) {
        return Status::InvalidArgument(
            "'" + g.table + "': " + std::to_string(g.grads.size()) +
            " gradient values for " + std::to_string(g.ids.size()) +
            " rows of dimension " + std::to_string(info->dim));
      }
    }
    // Everything checked: send it all, then wait for it all.
    for (const DenseGradient& g : dense) {
      Info info = *Lookup(g.name, true);
      std::vector<Key> keys;
      std::vector<float> vals;
      DenseKeys(info, g.grads.data(), &keys, &vals);
      sent.push_back(
          {info.kv, info.kv->Push(keys, vals, {},
                                  model::RowCmd(RowOp::kPush, info.id))});
    }
    for (const SparseGradient& g : sparse) {
      Info info = *Lookup(g.table, false);
      // Keys must be unique in a request: sum the rows of a repeated ID
      // here, in batch order (the server would merge them the same way).
      const size_t dim = static_cast<size_t>(info.dim);
      std::vector<Key> row_keys(g.ids.size());
      for (size_t i = 0; i < g.ids.size(); ++i) {
        row_keys[i] = model::RowKey(info.id, g.ids[i]);
      }
      std::vector<size_t> order(g.ids.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return row_keys[a] < row_keys[b];
      });
      std::vector<Key> keys;
      std::vector<float> vals;
      for (size_t i : order) {
        Key k = row_keys[i];
        if (keys.empty() || keys.back() != k) {
          keys.push_back(k);
          vals.insert(vals.end(), g.grads.begin() + i * dim,
                      g.grads.begin() + (i + 1) * dim);
        } else {
          float* row = vals.data() + vals.size() - dim;
          for (size_t j = 0; j < dim; ++j) row[j] += g.grads[i * dim + j];
        }
      }
      sent.push_back(
          {info.kv, info.kv->Push(keys, vals, {},
                                  model::RowCmd(RowOp::kPush, info.id))});
    }
    for (const Sent& s : sent) {
      Status st = s.kv->WaitStatus(s.ts);
      if (!st.ok() && first.ok()) first = st;
    }
    if (!first.ok()) return first;
    if (version) return Version(version);
    return Status::OK();
  }

  Status Clock() {
    std::vector<KVWorker<float>*> kvs;
    {
      MutexLock lock(&mu_);
      for (auto& w : workers_) kvs.push_back(w.second.get());
    }
    std::vector<int> ts;
    for (auto* kv : kvs) ts.push_back(kv->Clock());
    Status first;
    for (size_t i = 0; i < kvs.size(); ++i) {
      Status s = kvs[i]->WaitStatus(ts[i]);
      if (!s.ok() && first.ok()) first = s;
    }
    return first;
  }

  Status Save(const std::string& dir) {
    model::ControlRequest request;
    request.op = ControlOp::kSave;
    request.dir = dir;
    return Ask(request, nullptr);
  }
  // Two phases: every server reads and checks its shard, then all swap it
  // in; if any refuses, none does.
  Status Load(const std::string& dir) {
    model::ControlRequest request;
    request.op = ControlOp::kLoad;
    request.dir = dir;
    Status s = Ask(request, nullptr);
    if (!s.ok()) {
      request.op = ControlOp::kLoadAbort;
      Status abort = Ask(request, nullptr);
      if (!abort.ok()) LOG(WARNING) << "aborting the load: " << abort;
      return s;
    }
    request.op = ControlOp::kLoadCommit;
    return Ask(request, nullptr);
  }

  int dim(const std::string& table) const {
    MutexLock lock(&mu_);
    auto it = tables_.find(table);
    return it == tables_.end() ? 0 : it->second.dim;
  }

 private:
  struct Info {
    uint32_t id = 0;
    bool dense = false;
    int dim = 0;
    int64_t numel = 0;
    KVWorker<float>* kv = nullptr;
  };
  struct PendingRows {
    Info info;
    std::vector<Key> keys;
    std::vector<float> vals;
    std::vector<size_t> slot;  // row of ids[i] in vals
    int ts = -1;
    bool done = false;
    Status status;
  };

  StatusOr<Info> Lookup(const std::string& name, bool dense) const {
    MutexLock lock(&mu_);
    auto it = tables_.find(name);
    if (it == tables_.end()) {
      return Status::NotFound(std::string(dense ? "dense parameter" : "table") +
                              " '" + name +
                              "' is not registered through this client");
    }
    if (it->second.dense != dense) {
      return Status::InvalidArgument(
          "'" + name + "' is " +
          (it->second.dense ? "a dense parameter" : "an embedding table"));
    }
    return it->second;
  }

  KVWorker<float>* Worker(int app_id) {
    MutexLock lock(&mu_);
    auto& w = workers_[app_id];
    if (!w) {
      w = std::make_unique<KVWorker<float>>(app_id, customer_id_, postoffice_);
    }
    return w.get();
  }

  // Chunk keys (sorted) and, if `values` is given, the chunked values padded
  // to whole chunks.
  static void DenseKeys(const Info& info, const float* values,
                        std::vector<Key>* keys, std::vector<float>* out) {
    const int64_t dim = info.dim;
    const int64_t chunks = (info.numel + dim - 1) / dim;
    std::vector<std::pair<Key, int64_t>> order;
    for (int64_t c = 0; c < chunks; ++c) {
      order.push_back({model::DenseKey(info.id, c, chunks), c});
    }
    std::sort(order.begin(), order.end());
    for (const auto& o : order) {
      keys->push_back(o.first);
      if (!out) continue;
      int64_t begin = o.second * dim;
      int64_t end = std::min(info.numel, begin + dim);
      out->insert(out->end(), values + begin, values + end);
      out->resize(out->size() + (dim - (end - begin)), 0.0f);
    }
  }

  static void Unchunk(const Info& info, const std::vector<Key>& keys,
                      const std::vector<float>& chunks,
                      std::vector<float>* values) {
    const int64_t dim = info.dim;
    const uint64_t count = (info.numel + dim - 1) / dim;
    values->assign(info.numel, 0.0f);
    for (size_t i = 0; i < keys.size(); ++i) {
      int64_t c =
          static_cast<int64_t>(model::DenseChunk(info.id, keys[i], count));
      int64_t begin = c * dim;
      int64_t end = std::min(info.numel, begin + dim);
      std::copy(chunks.begin() + i * dim,
                chunks.begin() + i * dim + (end - begin),
                values->begin() + begin);
    }
  }

  // Completes *request (a registration) with what tables and dense
  // parameters share, registers it on every server, then records *info (its
  // id and worker filled in here) under `name`.
  Status Register(model::ControlRequest* request, const std::string& name,
                  const std::string& optimizer, const std::string& consistency,
                  Info* info) {
    auto app = model::KVAppFor(consistency);
    if (!app.ok()) return app.status();
    request->name = name;
    request->optimizer = optimizer;
    request->consistency = consistency;
    PS_RETURN_IF_ERROR(RegisterEverywhere(*request));
    info->id = model::TableId(name);
    info->kv = Worker(*app);
    MutexLock lock(&mu_);
    tables_[name] = *info;
    return Status::OK();
  }

  // A registration must reach every server that will see requests for the
  // table, a server that joins the running job meanwhile too
  // (docs/model.md, "Servers joining and leaving"). A newcomer learns the
  // tables its peers registered before they switched to its ring (their
  // catalogs); each server answers a registration with its ring's epoch,
  // read after it registered the table. If one answered under a newer ring
  // than the one this client sent under, it may have registered after the
  // switch, and a newcomer of that ring may lack the table: this client
  // waits until its own node has that ring and registers again, with the
  // servers of that ring (registering the same spec twice is fine).
  Status RegisterEverywhere(const model::ControlRequest& request) {
    Node* node = postoffice_->node();
    for (;;) {
      const uint64_t sent = node->ring_epoch();
      std::vector<model::ControlReply> replies;
      PS_RETURN_IF_ERROR(Ask(request, &replies));
      uint64_t newest = 0;
      for (const model::ControlReply& r : replies) {
        newest = std::max(newest, r.ring_epoch);
      }
      if (newest <= sent) return Status::OK();
      LOG(INFO) << "model: '" << request.name
                << "' was registered under key ring epoch " << newest
                << ", this client's is " << sent
                << ": registering again once this node has the newer ring";
      MutexLock lock(&mu_);
      const bool reached = ring_changed_.wait_for(
          lock.native(),
          std::chrono::milliseconds(node->options().model_timeout_ms),
          [&] { return node->ring_epoch() >= newest; });
      if (!reached) {
        return Status::DeadlineExceeded(
            "model " + std::string(model::OpName(request.op)) + " '" +
            request.name + "': a server answered under key ring epoch " +
            std::to_string(newest) + ", which this node has not received (" +
            "it has " + std::to_string(node->ring_epoch()) +
            ") (EMBER_MODEL_TIMEOUT)");
      }
    }
  }

  // Sends a control request to every server; fails with the first error
  // (the server's Status, its message prefixed with "server: "). *replies:
  // every server's answer.
  Status Ask(const model::ControlRequest& request,
             std::vector<model::ControlReply>* replies) {
    int head = 0;
    const std::string body = model::EncodeControlRequest(request, &head);
    int ts = control_->Request(head, body, kServerGroup);
    // Bounded: a server that never answers (its control thread stuck, say)
    // fails the call with the servers named, instead of hanging the caller.
    Status s = control_->WaitStatus(
        ts, postoffice_->node()->options().model_timeout_ms);
    if (s.code() == Status::Code::kDeadlineExceeded) {
      s = Status::DeadlineExceeded(std::string("model ") +
                                   model::OpName(request.op) + ": " +
                                   s.message() + " (EMBER_MODEL_TIMEOUT)");
    }
    std::vector<std::string> answers;
    {
      MutexLock lock(&mu_);
      answers = std::move(answers_[ts]);
      answers_.erase(ts);
    }
    if (!s.ok()) return s;
    for (const std::string& a : answers) {
      auto reply = model::DecodeControlReply(a);
      if (!reply.ok()) return reply.status();
      const Status& r = reply->status;
      if (!r.ok()) return Status(r.code(), "server: " + r.message());
      if (replies) replies->push_back(*reply);
    }
    return Status::OK();
  }

  Status Version(int64_t* version) {
    model::ControlRequest request;
    request.op = ControlOp::kVersion;
    std::vector<model::ControlReply> replies;
    PS_RETURN_IF_ERROR(Ask(request, &replies));
    uint64_t v = 0;
    for (const model::ControlReply& r : replies) v = std::max(v, r.version);
    *version = static_cast<int64_t>(v);
    return Status::OK();
  }

  Postoffice* const postoffice_;
  const int customer_id_;
  std::unique_ptr<model::ControlApp> control_;

  mutable Mutex mu_;
  // Notified on the control app's thread after each ring change.
  std::condition_variable ring_changed_;
  std::map<int, std::unique_ptr<KVWorker<float>>> workers_
      GUARDED_BY(mu_);  // by app id
  std::map<std::string, Info> tables_ GUARDED_BY(mu_);
  // Control answers, by timestamp.
  std::map<int, std::vector<std::string>> answers_ GUARDED_BY(mu_);
  std::map<int, std::shared_ptr<PendingRows>> rows_ GUARDED_BY(mu_);
  int next_ticket_ GUARDED_BY(mu_) = 1;
};

ModelClient::ModelClient(Postoffice* postoffice, int customer_id)
    : impl_(std::make_unique<Impl>(postoffice, customer_id)) {}
ModelClient::~ModelClient() = default;
Status ModelClient::RegisterTable(const TableSpec& spec) {
  return impl_->RegisterTable(spec);
}
Status ModelClient::RegisterDense(const DenseSpec& spec,
                                  const std::vector<float>& initial) {
  return impl_->RegisterDense(spec, initial);
}
Status ModelClient::PullDense(const std::string& name,
                              std::vector<float>* values, int64_t* version) {
  return impl_->PullDense(name, values, version);
}
Status ModelClient::PullRows(const std::string& table,
                             const std::vector<uint64_t>& ids,
                             std::vector<float>* rows) {
  return impl_->WaitRows(impl_->PullRowsAsync(table, ids), rows);
}
int ModelClient::PullRowsAsync(const std::string& table,
                               const std::vector<uint64_t>& ids) {
  return impl_->PullRowsAsync(table, ids);
}
Status ModelClient::WaitRows(int ticket, std::vector<float>* rows) {
  return impl_->WaitRows(ticket, rows);
}
Status ModelClient::Push(const std::vector<DenseGradient>& dense,
                         const std::vector<SparseGradient>& sparse,
                         int64_t* version) {
  return impl_->Push(dense, sparse, version);
}
Status ModelClient::Clock() { return impl_->Clock(); }
Status ModelClient::Save(const std::string& dir) { return impl_->Save(dir); }
Status ModelClient::Load(const std::string& dir) { return impl_->Load(dir); }
int ModelClient::dim(const std::string& table) const {
  return impl_->dim(table);
}

}  // namespace ps
