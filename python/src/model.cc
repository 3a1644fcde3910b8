// ember.ModelClient and ember.ModelServer: the model layer (ps/model.h).
// Rows and dense values come back as numpy arrays that own the library's
// result vectors (moved, not copied); ids and gradients are read from numpy
// arrays once, into the request. Every call that talks to the servers
// releases the GIL while it waits.
#include "ps/model.h"

#include <cstring>
#include <unordered_map>

#include "common.h"

namespace ember_py {
namespace {

template <typename T>
std::vector<T> ToVector(const py::array& array, const char* what) {
  py::array_t<T, py::array::c_style> a =
      py::array_t<T, py::array::c_style>::ensure(array);
  if (!a) throw py::type_error(std::string(what) + " is not numeric");
  std::vector<T> out(static_cast<size_t>(a.size()));
  if (!out.empty()) std::memcpy(out.data(), a.data(), out.size() * sizeof(T));
  return out;
}

// Ids as uint64: a uint64 array as is, an int64 array (torch's index type)
// by its bits.
std::vector<uint64_t> Ids(const py::array& ids) {
  if (ids.dtype().is(py::dtype::of<int64_t>())) {
    py::array_t<int64_t, py::array::c_style> a =
        py::array_t<int64_t, py::array::c_style>::ensure(ids);
    std::vector<uint64_t> out(static_cast<size_t>(a.size()));
    if (!out.empty()) std::memcpy(out.data(), a.data(), out.size() * 8);
    return out;
  }
  if (!ids.dtype().is(py::dtype::of<uint64_t>())) {
    throw py::type_error("ids must be uint64 (or int64), not " +
                         DtypeName(ids.dtype()));
  }
  return ToVector<uint64_t>(ids, "ids");
}

class Client {
 public:
  explicit Client(int customer_id)
      : client_(std::make_unique<ps::ModelClient>(nullptr, customer_id)) {}
  ~Client() {
    py::gil_scoped_release nogil;
    client_.reset();
  }

  void RegisterTable(const std::string& name, int dim,
                     const std::string& initializer,
                     const std::string& optimizer,
                     const std::string& consistency) {
    ps::TableSpec spec{name, dim, initializer, optimizer, consistency};
    ps::Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->RegisterTable(spec);
    }
    ThrowIfError(s);
  }

  void RegisterDense(const std::string& name, const py::array& initial,
                     const std::string& optimizer,
                     const std::string& consistency) {
    ps::DenseSpec spec;
    spec.name = name;
    for (py::ssize_t i = 0; i < initial.ndim(); ++i) {
      spec.shape.push_back(initial.shape(i));
    }
    if (spec.shape.empty()) spec.shape.push_back(1);
    spec.optimizer = optimizer;
    spec.consistency = consistency;
    std::vector<float> values = ToVector<float>(initial, "initial");
    ps::Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->RegisterDense(spec, values);
    }
    ThrowIfError(s);
    std::vector<py::ssize_t> shape;
    for (py::ssize_t i = 0; i < initial.ndim(); ++i) {
      shape.push_back(initial.shape(i));
    }
    std::lock_guard<std::mutex> lock(mu_);
    shapes_[name] = shape;
  }

  py::tuple PullDense(const std::string& name) {
    std::vector<float> values;
    int64_t version = 0;
    ps::Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->PullDense(name, &values, &version);
    }
    ThrowIfError(s);
    std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(values.size())};
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = shapes_.find(name);
      if (it != shapes_.end()) shape = it->second;
    }
    return py::make_tuple(OwningArray(std::move(values), shape), version);
  }

  py::array_t<float> PullRows(const std::string& table, const py::array& ids) {
    std::vector<uint64_t> keys = Ids(ids);
    std::vector<float> rows;
    ps::Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->PullRows(table, keys, &rows);
    }
    ThrowIfError(s);
    return Rows(table, keys.size(), std::move(rows));
  }

  int PullRowsAsync(const std::string& table, const py::array& ids) {
    std::vector<uint64_t> keys = Ids(ids);
    const size_t n = keys.size();
    int ticket;
    {
      py::gil_scoped_release nogil;
      ticket = client_->PullRowsAsync(table, keys);
    }
    std::lock_guard<std::mutex> lock(mu_);
    tickets_[ticket] = {table, n};
    return ticket;
  }

  py::array_t<float> WaitRows(int ticket) {
    Ticket t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = tickets_.find(ticket);
      if (it == tickets_.end()) {
        throw py::value_error("unknown or already waited ticket " +
                              std::to_string(ticket));
      }
      t = it->second;
      tickets_.erase(it);
    }
    std::vector<float> rows;
    ps::Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->WaitRows(ticket, &rows);
    }
    ThrowIfError(s);
    return Rows(t.table, t.ids, std::move(rows));
  }

  int64_t Push(const py::dict& dense, const py::list& sparse) {
    std::vector<ps::DenseGradient> d;
    for (const auto& item : dense) {
      d.push_back({py::cast<std::string>(item.first),
                   ToVector<float>(py::array(py::reinterpret_borrow<py::object>(
                                       item.second)),
                                   "dense gradient")});
    }
    std::vector<ps::SparseGradient> g;
    for (const auto& item : sparse) {
      py::tuple t = py::cast<py::tuple>(item);
      if (t.size() != 3) {
        throw py::value_error("sparse gradients are (table, ids, grads)");
      }
      g.push_back({py::cast<std::string>(t[0]), Ids(py::array(t[1])),
                   ToVector<float>(py::array(t[2]), "sparse gradient")});
    }
    int64_t version = 0;
    ps::Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->Push(d, g, &version);
    }
    ThrowIfError(s);
    return version;
  }

  void Clock() {
    Call([this] { return client_->Clock(); });
  }
  void Save(const std::string& dir) {
    Call([&] { return client_->Save(dir); });
  }
  void Load(const std::string& dir) {
    Call([&] { return client_->Load(dir); });
  }
  int Dim(const std::string& table) const { return client_->dim(table); }

 private:
  struct Ticket {
    std::string table;
    size_t ids = 0;
  };

  template <typename F>
  void Call(const F& f) {
    ps::Status s;
    {
      py::gil_scoped_release nogil;
      s = f();
    }
    ThrowIfError(s);
  }

  py::array_t<float> Rows(const std::string& table, size_t n,
                          std::vector<float>&& rows) {
    const py::ssize_t rows_n = static_cast<py::ssize_t>(n);
    const py::ssize_t dim = n == 0 ? std::max(1, client_->dim(table))
                                   : static_cast<py::ssize_t>(rows.size() / n);
    return OwningArray(std::move(rows), {rows_n, dim});
  }

  std::unique_ptr<ps::ModelClient> client_;
  std::mutex mu_;
  std::unordered_map<int, Ticket> tickets_;  // Guarded by mu_.
  std::unordered_map<std::string, std::vector<py::ssize_t>> shapes_;
};

class Server {
 public:
  Server() : server_(std::make_unique<ps::ModelServer>()) {}
  ~Server() {
    py::gil_scoped_release nogil;
    server_.reset();
  }
  py::dict Stats() const {
    ps::ModelServerStats s = server_->stats();
    py::dict d;
    d["tables"] = s.tables;
    d["rows"] = s.rows;
    d["memory_bytes"] = s.memory_bytes;
    d["raw_bytes"] = s.raw_bytes;
    d["updates"] = s.updates;
    d["rows_pulled"] = s.rows_pulled;
    d["rows_updated"] = s.rows_updated;
    return d;
  }

 private:
  std::unique_ptr<ps::ModelServer> server_;
};

}  // namespace

void BindModel(py::module_& m) {
  py::class_<Client>(m, "ModelClient", R"doc(
A worker's client of the model layer (ps::ModelClient): embedding tables and
dense parameters that live on the servers, updated there by optimizers.
Create it after ember.start() and keep it until ember.finalize() returned.
Every call that talks to the servers blocks without the GIL and raises
ember.Error (InvalidArgumentError for bad arguments, UnavailableError when a
server died, ...) with the C++ message.)doc")
      .def(py::init<int>(), py::arg("customer_id") = 0)
      .def("register_table", &Client::RegisterTable, py::arg("name"),
           py::arg("dim") = 8, py::arg("initializer") = "normal(0,0.01)",
           py::arg("optimizer") = "adagrad(lr=0.05)",
           py::arg("consistency") = "asp",
           "Registers an embedding table on every server (rows created on "
           "first pull from the initializer, seeded by (table, id)).")
      .def("register_dense", &Client::RegisterDense, py::arg("name"),
           py::arg("initial"), py::arg("optimizer") = "sgd(lr=0.01)",
           py::arg("consistency") = "asp",
           "Registers a dense float32 parameter with the shape of `initial`; "
           "the first registration's values initialise it.")
      .def("pull_dense", &Client::PullDense, py::arg("name"),
           "(values, version): the parameter's values (float32, its shape) "
           "and the model version.")
      .def("pull_rows", &Client::PullRows, py::arg("table"), py::arg("ids"),
           "The rows of `ids` (uint64; any order, duplicates allowed) as a "
           "float32 array of shape (len(ids), dim).")
      .def("pull_rows_async", &Client::PullRowsAsync, py::arg("table"),
           py::arg("ids"),
           "Starts pull_rows (prefetch); wait_rows(ticket) returns the rows. "
           "Each ticket is waited once.")
      .def("wait_rows", &Client::WaitRows, py::arg("ticket"))
      .def("push", &Client::Push, py::arg("dense") = py::dict(),
           py::arg("sparse") = py::list(),
           "Pushes dense gradients {name: grads} and sparse gradients "
           "[(table, ids, grads)] in one call (duplicate ids are summed on "
           "the server); returns the new model version.")
      .def("clock", &Client::Clock, "Ends this worker's iteration.")
      .def("save", &Client::Save, py::arg("dir"),
           "Every server writes its shard under `dir`.")
      .def("load", &Client::Load, py::arg("dir"),
           "Every server reads its shard back from `dir`.")
      .def("dim", &Client::Dim, py::arg("table"));

  py::class_<Server>(m, "ModelServer", R"doc(
A server's half of the model layer (ps::ModelServer): serves every
ModelClient. Create it after ember.start() on servers and keep it until
ember.finalize() has returned.)doc")
      .def(py::init<>())
      .def("stats", &Server::Stats);
}

}  // namespace ember_py
