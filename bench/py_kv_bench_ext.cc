// _ember_bench: the C++ side of bench/py_kv_bench.py. Runs the same
// 1000-key push/pull round trips as the Python side, through ps-lite's C++
// API (KVWorker<float>::ZPush / ZPull over SArrays allocated once), in the
// same process and against the same servers, so the two are measured on one
// cluster in one run.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "ps/ps.h"

namespace py = pybind11;

namespace {

// `iterations` round trips (a push of `keys`' values, waited, then a pull
// of them into a buffer, waited); returns each one's duration in ns.
std::vector<int64_t> RoundTrips(ps::KVWorker<float>* worker,
                                const std::vector<uint64_t>& keys,
                                int iterations) {
  ps::SArray<ps::Key> k(keys);
  ps::SArray<float> vals(keys.size(), 1.0f);
  ps::SArray<float> out(keys.size(), 0.0f);
  std::vector<int64_t> ns;
  ns.reserve(iterations);
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    worker->Wait(worker->ZPush(k, vals));
    worker->Wait(worker->ZPull(k, &out));
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count());
  }
  return ns;
}

class CppWorker {
 public:
  CppWorker(int app_id, int customer_id) : worker_(app_id, customer_id) {}
  std::vector<int64_t> Run(const std::vector<uint64_t>& keys, int iterations) {
    py::gil_scoped_release nogil;
    return RoundTrips(&worker_, keys, iterations);
  }

 private:
  ps::KVWorker<float> worker_;
};

}  // namespace

PYBIND11_MODULE(_ember_bench, m) {
  py::class_<CppWorker>(m, "CppWorker")
      .def(py::init<int, int>(), py::arg("app_id"), py::arg("customer_id"))
      .def("round_trips", &CppWorker::Run, py::arg("keys"),
           py::arg("iterations"));
}
