// The ember extension module (_ember): errors, pins, the process's life
// (start, finalize, rank, barriers), and the parts bound in kv.cc, model.cc
// and data.cc. The Python package `ember` (python/ember/__init__.py)
// re-exports it.
#include <glog/logging.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "common.h"
#include "ps/ps.h"

namespace ember_py {
namespace {

// Python exception types, one per Status code; created at import, never
// freed (as the module's own types).
PyObject* g_error = nullptr;
PyObject* g_code_errors[8] = {};

// References whose pins were released off the GIL, to drop with it.
std::mutex g_pins_mu;
std::vector<PyObject*>* g_pending_pins = new std::vector<PyObject*>();

PyObject* NewError(py::module_& m, const char* name, PyObject* bases,
                   const char* doc) {
  std::string qualified = std::string("ember.") + name;
  PyObject* type =
      PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.attr(name) = py::handle(type);
  return type;
}

// As ps::Start does: glog to stderr (the launchers collect it) unless the
// user configured glog, and PS_VERBOSE raises the verbosity.
void EnsureLogging() {
  if (google::IsGoogleLoggingInitialized()) return;
  if (std::getenv("GLOG_logtostderr") == nullptr &&
      std::getenv("GLOG_log_dir") == nullptr) {
    FLAGS_logtostderr = true;
  }
  if (const char* v = std::getenv("PS_VERBOSE")) {
    FLAGS_v = std::max(FLAGS_v, std::atoi(v));
  }
  google::InitGoogleLogging("ember");
}

int Group(const std::string& name) {
  if (name == "scheduler") return ps::kScheduler;
  if (name == "servers") return ps::kServerGroup;
  if (name == "workers") return ps::kWorkerGroup;
  if (name == "all") {
    return ps::kScheduler + ps::kServerGroup + ps::kWorkerGroup;
  }
  if (name == "servers+workers") return ps::kServerGroup + ps::kWorkerGroup;
  throw py::value_error("unknown group '" + name +
                        "' (scheduler, servers, workers, servers+workers, "
                        "all)");
}

}  // namespace

void RegisterErrors(py::module_& m) {
  g_error = NewError(m, "Error", PyExc_RuntimeError,
                     "An Ember call failed; the message is the C++ Status's.");
  struct Kind {
    ps::Status::Code code;
    const char* name;
    PyObject* builtin;
  };
  const Kind kinds[] = {
      {ps::Status::Code::kInvalidArgument, "InvalidArgumentError",
       PyExc_ValueError},
      {ps::Status::Code::kNotFound, "NotFoundError", PyExc_LookupError},
      {ps::Status::Code::kUnavailable, "UnavailableError",
       PyExc_ConnectionError},
      {ps::Status::Code::kDeadlineExceeded, "DeadlineExceededError",
       PyExc_TimeoutError},
      {ps::Status::Code::kAborted, "AbortedError", nullptr},
      {ps::Status::Code::kCorruption, "CorruptionError", nullptr},
      {ps::Status::Code::kInternal, "InternalError", nullptr},
  };
  for (const Kind& kind : kinds) {
    py::tuple bases =
        kind.builtin != nullptr
            ? py::make_tuple(py::handle(g_error), py::handle(kind.builtin))
            : py::make_tuple(py::handle(g_error));
    g_code_errors[static_cast<int>(kind.code)] =
        NewError(m, kind.name, bases.ptr(), nullptr);
  }
}

void ThrowIfError(const ps::Status& status) {
  if (status.ok()) return;
  PyObject* type = g_code_errors[static_cast<int>(status.code())];
  if (type == nullptr) type = g_error;
  PyErr_SetString(type, status.ToString().c_str());
  throw py::error_already_set();
}

void ReleasePins() {
  std::vector<PyObject*> drop;
  {
    std::lock_guard<std::mutex> lock(g_pins_mu);
    if (g_pending_pins->empty()) return;
    drop.swap(*g_pending_pins);
  }
  for (PyObject* p : drop) Py_DECREF(p);
}

std::shared_ptr<void> Pin(const py::handle& owner) {
  PyObject* p = owner.ptr();
  Py_INCREF(p);
  return std::shared_ptr<void>(p, [](void* q) {
    std::lock_guard<std::mutex> lock(g_pins_mu);
    g_pending_pins->push_back(static_cast<PyObject*>(q));
  });
}

}  // namespace ember_py

PYBIND11_MODULE(_ember, m) {
  namespace py = pybind11;
  using namespace ember_py;  // NOLINT: the module's own names.
  m.doc() = "Ember's C++ library, bound for Python (use the ember package).";
  RegisterErrors(m);

  m.def(
      "version", [] { return std::string(ps::Version()); },
      "Ember's version (that of the C++ library in use).");
  m.def(
      "start",
      [](int customer_id, bool barrier) {
        ReleasePins();
        EnsureLogging();
        ps::Status s;
        {
          py::gil_scoped_release nogil;
          s = ps::Postoffice::Get()->StartStatus(customer_id, barrier);
        }
        ThrowIfError(s);
      },
      py::arg("customer_id") = 0, py::arg("barrier") = true,
      "Joins the cluster described by the DMLC_* environment (role, "
      "scheduler address, counts) and, with barrier, waits for every node. "
      "Raises ember.Error (the C++ Status) if the cluster does not form.");
  m.def(
      "finalize",
      [](int customer_id, bool barrier) {
        ps::Status s;
        {
          py::gil_scoped_release nogil;
          s = ps::Postoffice::Get()->FinalizeStatus(customer_id, barrier);
        }
        ReleasePins();
        ThrowIfError(s);
      },
      py::arg("customer_id") = 0, py::arg("barrier") = true,
      "A barrier over every node (unless barrier is False), then leaves the "
      "cluster. Keep KV and model objects alive until it has returned.");
  m.def(
      "barrier",
      [](const std::string& group, int customer_id) {
        ReleasePins();
        const int g = Group(group);
        ps::Status s;
        {
          py::gil_scoped_release nogil;
          s = ps::Postoffice::Get()->BarrierStatus(customer_id, g);
        }
        ThrowIfError(s);
      },
      py::arg("group") = "all", py::arg("customer_id") = 0,
      "Blocks until every node of the group ('workers', 'servers', "
      "'servers+workers', 'all') has called it.");
  m.def(
      "rank", [] { return ps::MyRank(); }, "This node's rank in its role.");
  m.def("num_workers", [] { return ps::NumWorkers(); });
  m.def("num_servers", [] { return ps::NumServers(); });
  m.def("is_worker", [] { return ps::IsWorker(); });
  m.def("is_server", [] { return ps::IsServer(); });
  m.def("is_scheduler", [] { return ps::IsScheduler(); });
  m.def(
      "role",
      [] {
        if (ps::IsScheduler()) return "scheduler";
        if (ps::IsServer()) return "server";
        return "worker";
      },
      "'worker', 'server' or 'scheduler' (from DMLC_ROLE).");
  m.def("_release_pins", &ReleasePins,
        "Drops the references of arrays the library no longer shares.");

  BindKV(m);
  BindModel(m);
  BindData(m);
}
