// ember.KVWorker and ember.KVServer: ps-lite's key-value API over numpy
// arrays. Keys, values, outputs and lengths are shared with the C++ library
// through the buffer (no copy in either direction): a push sends the
// caller's arrays, a pull writes the answers straight into the caller's
// `out`. The arrays stay referenced until the library lets them go, and must
// not change until the request's wait() returns.
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <unordered_map>

#include "common.h"
#include "ps/kv_app.h"

namespace ember_py {
namespace {

class KVWorkerBase {
 public:
  virtual ~KVWorkerBase() = default;
  virtual int Push(const py::array& keys, const py::array& vals,
                   const py::object& lens, int cmd, int priority) = 0;
  virtual int Pull(const py::array& keys, const py::object& out,
                   const py::object& lens, int cmd, int priority) = 0;
  virtual int PushPull(const py::array& keys, const py::array& vals,
                       const py::array& out, const py::object& lens, int cmd,
                       int priority) = 0;
  // `timeout`: seconds, or None to wait until the request ends.
  virtual py::object Wait(int timestamp, std::optional<double> timeout) = 0;
  virtual int Clock() = 0;
  virtual int64_t CurrentClock() const = 0;
  virtual size_t Outstanding() = 0;
  virtual py::dtype dtype() const = 0;
};

ps::SArray<ps::Key> Keys(const py::array& keys) {
  if (keys.ndim() != 1) throw py::value_error("keys must be one-dimensional");
  return ShareArray<ps::Key>(keys, "keys", false);
}

ps::SArray<int> Lens(const py::object& lens, bool writable) {
  if (lens.is_none()) return {};
  return ShareArray<int>(py::array(lens), "lens", writable);
}

template <typename Val>
class KVWorkerImpl : public KVWorkerBase {
 public:
  KVWorkerImpl(int app_id, int customer_id)
      : worker_(std::make_unique<ps::KVWorker<Val>>(app_id, customer_id)) {}
  ~KVWorkerImpl() override {
    // Requests still in flight write into their pending outputs: let them
    // end, then stop the app (joining its thread), outside the GIL.
    py::gil_scoped_release nogil;
    std::vector<int> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& entry : pending_) left.push_back(entry.first);
    }
    for (int ts : left) (void)worker_->WaitStatus(ts);
    worker_.reset();
    pending_.clear();
  }

  int Push(const py::array& keys, const py::array& vals, const py::object& lens,
           int cmd, int priority) override {
    ReleasePins();
    auto pending = std::make_unique<Pending>();
    ps::SArray<ps::Key> k = Keys(keys);
    ps::SArray<Val> v = ShareArray<Val>(vals, "vals", false);
    ps::SArray<int> l = Lens(lens, false);
    int ts;
    {
      py::gil_scoped_release nogil;
      ts = worker_->ZPush(k, v, l, cmd, nullptr, priority);
    }
    return Track(ts, std::move(pending));
  }

  int Pull(const py::array& keys, const py::object& out, const py::object& lens,
           int cmd, int priority) override {
    ReleasePins();
    auto pending = std::make_unique<Pending>();
    pending->pull = true;
    ps::SArray<ps::Key> k = Keys(keys);
    if (!out.is_none()) {
      py::array array = py::array::ensure(out);
      if (!array) throw py::type_error("out must be a numpy array");
      pending->out = ShareArray<Val>(array, "out", true);
      pending->out_object = array.ptr();
      pending->out_pin = Pin(array);
      if (pending->out.empty() && !k.empty()) {
        throw py::value_error(
            "out is empty: give an array of the pulled size, or none");
      }
    }
    pending->lens = Lens(lens, true);
    ps::SArray<int>* lens_out = lens.is_none() ? nullptr : &pending->lens;
    int ts;
    {
      py::gil_scoped_release nogil;
      ts = worker_->ZPull(k, &pending->out, lens_out, cmd, nullptr, priority);
    }
    return Track(ts, std::move(pending));
  }

  int PushPull(const py::array& keys, const py::array& vals,
               const py::array& out, const py::object& lens, int cmd,
               int priority) override {
    ReleasePins();
    auto pending = std::make_unique<Pending>();
    ps::SArray<ps::Key> k = Keys(keys);
    ps::SArray<Val> v = ShareArray<Val>(vals, "vals", false);
    pending->pull = true;
    pending->out = ShareArray<Val>(out, "out", true);
    pending->out_object = out.ptr();
    pending->out_pin = Pin(out);
    pending->lens = Lens(lens, true);
    if (pending->out.size() != v.size()) {
      throw py::value_error("out must have as many elements as vals");
    }
    ps::SArray<int>* lens_out = lens.is_none() ? nullptr : &pending->lens;
    int ts;
    {
      py::gil_scoped_release nogil;
      ts = worker_->ZPushPull(k, v, &pending->out, lens_out, cmd, nullptr,
                              priority);
    }
    return Track(ts, std::move(pending));
  }

  py::object Wait(int timestamp, std::optional<double> timeout) override {
    if (timeout && !(*timeout >= 0 && *timeout <= 86400.0)) {
      throw py::value_error("timeout must be None or 0 to 86400 seconds");
    }
    ps::Status s;
    std::unique_ptr<Pending> done;
    bool kept = false;
    {
      py::gil_scoped_release nogil;
      s = timeout ? worker_->WaitStatus(timestamp,
                                        static_cast<int64_t>(*timeout * 1000.0))
                  : worker_->WaitStatus(timestamp);
      // A bounded wait that gave up (kDeadlineExceeded means only that): the
      // request may be waited for again, so its outputs stay pinned.
      kept = timeout && s.code() == ps::Status::Code::kDeadlineExceeded;
      std::lock_guard<std::mutex> lock(mu_);
      auto it = kept ? pending_.end() : pending_.find(timestamp);
      if (it != pending_.end()) {
        done = std::move(it->second);
        pending_.erase(it);
      }
    }
    py::object result = py::none();
    if (s.ok() && done && done->pull) {
      if (done->out_object != nullptr) {
        // The caller's own array, now holding the values.
        result = py::reinterpret_borrow<py::object>(done->out_object);
      } else {
        // The received buffer itself (adopted when one server answered),
        // owned by the returned array: no copy.
        auto* held = new ps::SArray<Val>(std::move(done->out));
        py::capsule owner(
            held, [](void* p) { delete static_cast<ps::SArray<Val>*>(p); });
        result = py::array_t<Val>({static_cast<py::ssize_t>(held->size())},
                                  held->data(), owner);
      }
    }
    done.reset();
    ReleasePins();
    ThrowIfError(s);
    return result;
  }

  int Clock() override {
    py::gil_scoped_release nogil;
    return worker_->Clock();
  }
  int64_t CurrentClock() const override { return worker_->CurrentClock(); }
  size_t Outstanding() override {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_.size();
  }
  py::dtype dtype() const override { return py::dtype::of<Val>(); }

 private:
  // What a request shares until its wait: the pull's outputs, which the
  // library writes through these SArrays' addresses.
  struct Pending {
    bool pull = false;
    ps::SArray<Val> out;
    ps::SArray<int> lens;
    // The caller's output array, kept alive by out_pin.
    PyObject* out_object = nullptr;
    std::shared_ptr<void> out_pin;
  };

  int Track(int ts, std::unique_ptr<Pending> pending) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[ts] = std::move(pending);
    return ts;
  }

  std::unique_ptr<ps::KVWorker<Val>> worker_;
  std::mutex mu_;
  std::unordered_map<int, std::unique_ptr<Pending>> pending_;  // Guarded.
};

class KVServerBase {
 public:
  virtual ~KVServerBase() = default;
  virtual py::dtype dtype() const = 0;
  virtual py::dict consistency_stats() const = 0;
};

template <typename Val>
class KVServerImpl : public KVServerBase {
 public:
  KVServerImpl(int app_id, const std::string& consistency)
      : server_(std::make_unique<ps::KVServer<Val>>(app_id)) {
    if (!consistency.empty()) {
      ThrowIfError(server_->SetConsistency(consistency));
    }
    server_->set_request_handle(ps::KVServerDefaultHandle<Val>());
  }
  ~KVServerImpl() override {
    // Joins the app thread: outside the GIL.
    py::gil_scoped_release nogil;
    server_.reset();
  }
  py::dtype dtype() const override { return py::dtype::of<Val>(); }
  py::dict consistency_stats() const override {
    ps::ConsistencyStats s = server_->consistency_stats();
    py::dict d;
    d["pushes"] = s.pushes;
    d["pushes_deferred"] = s.pushes_deferred;
    d["pulls"] = s.pulls;
    d["pulls_waited"] = s.pulls_waited;
    d["pulls_failed"] = s.pulls_failed;
    return d;
  }

 private:
  std::unique_ptr<ps::KVServer<Val>> server_;
};

template <template <typename> class Impl, typename Base, typename... Args>
std::unique_ptr<Base> Make(const py::dtype& dtype, Args... args) {
  if (dtype.is(py::dtype::of<float>())) {
    return std::make_unique<Impl<float>>(args...);
  }
  if (dtype.is(py::dtype::of<double>())) {
    return std::make_unique<Impl<double>>(args...);
  }
  if (dtype.is(py::dtype::of<int32_t>())) {
    return std::make_unique<Impl<int32_t>>(args...);
  }
  if (dtype.is(py::dtype::of<int64_t>())) {
    return std::make_unique<Impl<int64_t>>(args...);
  }
  if (dtype.is(py::dtype::of<uint64_t>())) {
    return std::make_unique<Impl<uint64_t>>(args...);
  }
  if (dtype.is(py::dtype::of<uint8_t>())) {
    return std::make_unique<Impl<uint8_t>>(args...);
  }
  throw py::type_error("unsupported dtype " + DtypeName(dtype) +
                       " (float32, float64, int32, int64, uint64, uint8)");
}

}  // namespace

void BindKV(py::module_& m) {
  py::class_<KVWorkerBase>(m, "KVWorker", R"doc(
A worker's key-value client (ps-lite's KVWorker<Val>) for app `app_id`.

Keys are a 1-D numpy uint64 array, sorted and unique; values, outputs and
lens (int32, values per key) are numpy arrays of the worker's dtype, shared
with the library without copies. push/pull/push_pull return a timestamp at
once; wait(timestamp) blocks (without the GIL) until every server has
answered, raises ember.Error with the C++ message if the request failed, and
returns a pull's values: `out` itself when given (written in place), else a
new array that owns the received buffer (no copy when one server answered).
Each timestamp must be waited once; the arrays must stay unchanged until
then.)doc")
      .def(py::init([](int app_id, int customer_id, const py::object& dtype) {
             return Make<KVWorkerImpl, KVWorkerBase>(
                 py::dtype::from_args(dtype), app_id, customer_id);
           }),
           py::arg("app_id") = 0, py::arg("customer_id") = 0,
           py::arg("dtype") = "float32")
      .def("push", &KVWorkerBase::Push, py::arg("keys"), py::arg("vals"),
           py::arg("lens") = py::none(), py::arg("cmd") = 0,
           py::arg("priority") = 0)
      .def("pull", &KVWorkerBase::Pull, py::arg("keys"),
           py::arg("out") = py::none(), py::arg("lens") = py::none(),
           py::arg("cmd") = 0, py::arg("priority") = 0)
      .def("push_pull", &KVWorkerBase::PushPull, py::arg("keys"),
           py::arg("vals"), py::arg("out"), py::arg("lens") = py::none(),
           py::arg("cmd") = 0, py::arg("priority") = 0)
      .def("wait", &KVWorkerBase::Wait, py::arg("timestamp"),
           py::arg("timeout") = py::none(),
           "Blocks until the request ends; returns a pull's values. With a "
           "timeout (seconds), raises DeadlineExceededError if it has not "
           "ended by then; the request stays outstanding and may be waited "
           "for again.")
      .def("clock", &KVWorkerBase::Clock,
           "Ends this worker's iteration (consistency modes); returns a "
           "timestamp to wait on.")
      .def_property_readonly("current_clock", &KVWorkerBase::CurrentClock)
      .def_property_readonly("outstanding", &KVWorkerBase::Outstanding,
                             "Requests issued and not yet waited for.")
      .def_property_readonly("dtype", &KVWorkerBase::dtype);

  py::class_<KVServerBase>(m, "KVServer", R"doc(
A server's key-value store for app `app_id` (ps-lite's KVServer<Val> with
the summing KVServerDefaultHandle): a push adds to the stored values, a
pull returns them. `consistency`: "asp", "ssp:s" or "bsp" (empty: the
node's, EMBER_CONSISTENCY). Keep it until ember.finalize() has returned.)doc")
      .def(py::init([](int app_id, const py::object& dtype,
                       const std::string& consistency) {
             return Make<KVServerImpl, KVServerBase>(
                 py::dtype::from_args(dtype), app_id, consistency);
           }),
           py::arg("app_id") = 0, py::arg("dtype") = "float32",
           py::arg("consistency") = "")
      .def_property_readonly("dtype", &KVServerBase::dtype)
      .def("consistency_stats", &KVServerBase::consistency_stats);
}

}  // namespace ember_py
