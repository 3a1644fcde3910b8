// The training data readers (ps/data.h) for Python: the synthetic CTR source
// and the streaming libsvm / Criteo readers. Examples cross into Python as
// batches in CSR form (ids, offsets, values, labels), the layout
// torch.nn.EmbeddingBag takes; python/ember/data.py wraps them. Generating
// and parsing run without the GIL, so a Python thread can prepare the next
// batch while another trains.
#include "ps/data.h"

#include <pybind11/stl.h>

#include "common.h"

namespace ember_py {
namespace {

namespace data = ps::data;

// (ids uint64 [nnz], offsets int64 [n + 1], values float32 [nnz] or None,
// labels float32 [n]).
py::tuple ToCsr(std::vector<data::Example>&& examples) {
  std::vector<uint64_t> ids;
  std::vector<int64_t> offsets;
  std::vector<float> values, labels;
  bool weighted = false;
  {
    py::gil_scoped_release nogil;
    size_t nnz = 0;
    for (const auto& e : examples) {
      nnz += e.ids.size();
      weighted = weighted || !e.values.empty();
    }
    ids.reserve(nnz);
    offsets.reserve(examples.size() + 1);
    labels.reserve(examples.size());
    if (weighted) values.reserve(nnz);
    offsets.push_back(0);
    for (const auto& e : examples) {
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
      offsets.push_back(static_cast<int64_t>(ids.size()));
      labels.push_back(e.label);
      if (!weighted) continue;
      if (e.values.empty()) {
        values.insert(values.end(), e.ids.size(), 1.0f);
      } else {
        values.insert(values.end(), e.values.begin(), e.values.end());
      }
    }
    examples.clear();
  }
  py::object vals = py::none();
  if (weighted) vals = OwningArray(std::move(values));
  return py::make_tuple(OwningArray(std::move(ids)),
                        OwningArray(std::move(offsets)), vals,
                        OwningArray(std::move(labels)));
}

// The examples of a CSR batch (for TruthLogit).
std::vector<data::Example> FromCsr(const py::array& ids_in,
                                   const py::array& offsets_in) {
  auto ids = py::array_t<uint64_t, py::array::c_style>::ensure(ids_in);
  auto offsets = py::array_t<int64_t, py::array::c_style>::ensure(offsets_in);
  if (!ids || !offsets || offsets.size() < 1) {
    throw py::value_error("a batch needs uint64 ids and int64 offsets");
  }
  const int64_t* o = offsets.data();
  const size_t n = static_cast<size_t>(offsets.size() - 1);
  std::vector<data::Example> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > ids.size()) {
      throw py::value_error("offsets do not describe the ids");
    }
    out[i].ids.assign(ids.data() + o[i], ids.data() + o[i + 1]);
  }
  return out;
}

data::ReadOptions::Split SplitOf(const std::string& split) {
  if (split == "all") return data::ReadOptions::Split::kAll;
  if (split == "train") return data::ReadOptions::Split::kTrain;
  if (split == "test") return data::ReadOptions::Split::kTest;
  throw py::value_error("split must be all, train or test, not '" + split +
                        "'");
}

data::Format FormatOf(const std::string& format) {
  if (format == "libsvm") return data::Format::kLibsvm;
  if (format == "criteo") return data::Format::kCriteo;
  throw py::value_error("format must be libsvm or criteo, not '" + format +
                        "'");
}

class Reader {
 public:
  explicit Reader(std::unique_ptr<data::ExampleReader> reader)
      : reader_(std::move(reader)) {}

  // The next batch of up to `max` examples, or None at the end.
  py::object ReadBatch(size_t max) {
    std::vector<data::Example> batch;
    {
      py::gil_scoped_release nogil;
      reader_->ReadBatch(max, &batch);
    }
    ThrowIfError(reader_->status());
    if (batch.empty()) return py::none();
    return ToCsr(std::move(batch));
  }

  py::dict Stats() const {
    const data::ReadStats& s = reader_->stats();
    py::dict d;
    d["lines"] = s.lines;
    d["examples"] = s.examples;
    d["blank"] = s.blank;
    d["malformed"] = s.malformed;
    d["first_errors"] = s.first_errors;
    return d;
  }

 private:
  std::unique_ptr<data::ExampleReader> reader_;
};

}  // namespace

void BindData(py::module_& m) {
  py::class_<data::SyntheticConfig>(m, "SyntheticConfig")
      .def(py::init<>())
      .def_readwrite("seed", &data::SyntheticConfig::seed)
      .def_readwrite("fields", &data::SyntheticConfig::fields)
      .def_readwrite("ids_per_field", &data::SyntheticConfig::ids_per_field)
      .def_readwrite("zipf", &data::SyntheticConfig::zipf)
      .def_readwrite("fm_dim", &data::SyntheticConfig::fm_dim)
      .def_readwrite("w_std", &data::SyntheticConfig::w_std)
      .def_readwrite("v_std", &data::SyntheticConfig::v_std)
      .def_readwrite("bias", &data::SyntheticConfig::bias)
      .def_readwrite("head", &data::SyntheticConfig::head)
      .def_readwrite("fm_head", &data::SyntheticConfig::fm_head)
      .def_readwrite("decay", &data::SyntheticConfig::decay);

  py::class_<data::SyntheticSource>(m, "_SyntheticSource")
      .def(py::init([](const data::SyntheticConfig& config) {
        auto source = data::SyntheticSource::Create(config);
        ThrowIfError(source.status());
        return std::move(source).value();
      }))
      .def_property_readonly_static(
          "TEST_STREAM",
          [](const py::object&) { return data::SyntheticSource::kTestStream; })
      .def_static("train_stream", &data::SyntheticSource::TrainStream,
                  py::arg("worker"))
      .def(
          "generate",
          [](const data::SyntheticSource& source, uint64_t stream,
             uint64_t first, size_t count) {
            std::vector<data::Example> examples;
            {
              py::gil_scoped_release nogil;
              examples = source.Generate(stream, first, count);
            }
            return ToCsr(std::move(examples));
          },
          py::arg("stream"), py::arg("first"), py::arg("count"))
      .def(
          "truth_logits",
          [](const data::SyntheticSource& source, const py::array& ids,
             const py::array& offsets) {
            std::vector<data::Example> examples = FromCsr(ids, offsets);
            const int fields = source.config().fields;
            for (const auto& e : examples) {
              if (static_cast<int>(e.ids.size()) != fields) {
                throw py::value_error("not an example of this source");
              }
            }
            std::vector<double> out(examples.size());
            {
              py::gil_scoped_release nogil;
              for (size_t i = 0; i < examples.size(); ++i) {
                out[i] = source.TruthLogit(examples[i]);
              }
            }
            return OwningArray(std::move(out));
          },
          py::arg("ids"), py::arg("offsets"))
      .def_property_readonly("config", &data::SyntheticSource::config);

  py::class_<Reader>(m, "_ExampleReader")
      .def(py::init([](const std::string& path, const std::string& format,
                       const std::string& split, uint64_t test_every, int shard,
                       int num_shards, int max_logged_errors) {
             data::ReadOptions options;
             options.split = SplitOf(split);
             options.test_every = test_every;
             options.shard = shard;
             options.num_shards = num_shards;
             options.max_logged_errors = max_logged_errors;
             auto reader =
                 data::ExampleReader::Open(path, FormatOf(format), options);
             ThrowIfError(reader.status());
             return std::make_unique<Reader>(std::move(reader).value());
           }),
           py::arg("path"), py::arg("format") = "libsvm",
           py::arg("split") = "all", py::arg("test_every") = 10,
           py::arg("shard") = 0, py::arg("num_shards") = 1,
           py::arg("max_logged_errors") = 5)
      .def("read_batch", &Reader::ReadBatch, py::arg("max"))
      .def("stats", &Reader::Stats);

  m.def("feature_id", &data::FeatureId, py::arg("field"), py::arg("value"),
        "The id of `value` in `field`'s hashed space (ps::data::FeatureId).");
  m.def("feature_value", &data::FeatureValue, py::arg("field"), py::arg("id"));
}

}  // namespace ember_py
