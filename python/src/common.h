// Shared pieces of the ember Python extension (_ember): Status -> Python
// exceptions, numpy arrays pinned while C++ shares their memory, and arrays
// that own C++ vectors.
//
// Threading: the functions here run with the GIL held, except
// PinnedArray's release, which may run on any thread (a transport thread
// dropping the last reference to a sent buffer) and therefore only queues
// the Python reference; ReleasePins() drops the queued references later,
// with the GIL.
#ifndef PYTHON_SRC_COMMON_H_
#define PYTHON_SRC_COMMON_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ps/sarray.h"
#include "ps/status.h"

namespace ember_py {

namespace py = pybind11;

// "float32", ...
inline std::string DtypeName(const py::dtype& dtype) {
  return py::str(static_cast<const py::handle&>(dtype)).cast<std::string>();
}

// Creates ember.Error and its subclasses in `m` (once, at import).
void RegisterErrors(py::module_& m);

// Raises the Python exception of `status` (ember.InvalidArgumentError, ...)
// with its message; does nothing when ok. Needs the GIL.
void ThrowIfError(const ps::Status& status);

// Drops the Python references queued by released pins. Needs the GIL. Called
// by every entry point of the module and at finalize.
void ReleasePins();

// A keep-alive reference to `owner`, dropped (later, with the GIL) when the
// returned token goes away on whatever thread. Needs the GIL.
std::shared_ptr<void> Pin(const py::handle& owner);

// `array`'s memory as an SArray<T> without copying: T must be the array's
// dtype and the array one C-contiguous block, else TypeError / ValueError
// naming `what`. The array stays alive while any copy of the SArray exists.
// `writable`: the array must also be writable (an output).
template <typename T>
ps::SArray<T> ShareArray(const py::array& array, const char* what,
                         bool writable) {
  if (!array.dtype().is(py::dtype::of<T>())) {
    throw py::type_error(std::string(what) + " must have dtype " +
                         DtypeName(py::dtype::of<T>()) + ", not " +
                         DtypeName(array.dtype()) +
                         " (convert it once with numpy.asarray(x, dtype))");
  }
  if (!(array.flags() & py::array::c_style)) {
    throw py::value_error(std::string(what) +
                          " must be C-contiguous (numpy.ascontiguousarray)");
  }
  if (writable && !array.writeable()) {
    throw py::value_error(std::string(what) + " must be writable");
  }
  T* data = static_cast<T*>(const_cast<void*>(array.data()));
  std::shared_ptr<void> pin = Pin(array);
  ps::SArray<T> out;
  out.reset(data, static_cast<size_t>(array.size()),
            [pin](T*) mutable { pin.reset(); });
  return out;
}

// A numpy array that owns `values` (moved, not copied), with `shape`.
template <typename T>
py::array_t<T> OwningArray(std::vector<T>&& values,
                           std::vector<py::ssize_t> shape) {
  auto* held = new std::vector<T>(std::move(values));
  py::capsule owner(held,
                    [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(std::move(shape), held->data(), owner);
}

template <typename T>
py::array_t<T> OwningArray(std::vector<T>&& values) {
  const py::ssize_t n = static_cast<py::ssize_t>(values.size());
  return OwningArray(std::move(values), {n});
}

// Binders of the module's parts (kv.cc, model.cc, data.cc).
void BindKV(py::module_& m);
void BindModel(py::module_& m);
void BindData(py::module_& m);

}  // namespace ember_py

#endif  // PYTHON_SRC_COMMON_H_
