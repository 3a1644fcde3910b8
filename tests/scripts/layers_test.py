#!/usr/bin/python3
"""Layering: a file includes only from its own layer and the layers below it
(docs/design.md). Layers, bottom up: util, message, transport, partition,
node, consistency, app, model; beside them the leaf data (the training data
readers), which includes only util and which no other layer includes. The
public headers under include/ps/ belong to the layer that implements them."""

import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LAYERS = ["util", "message", "transport", "partition", "node", "consistency",
          "app", "model", "data"]
RANK = {name: i for i, name in enumerate(LAYERS)}
# include/ps/<header> -> layer.
PUBLIC = {
    "base.h": "util", "status.h": "util", "sarray.h": "util",
    "range.h": "util",
    "internal/kv_request.h": "message",
    "consistency.h": "consistency",
    "internal/postoffice.h": "app", "internal/kv_core.h": "app",
    "kv_app.h": "app", "simple_app.h": "app", "ps.h": "app",
    "model.h": "model",
    "data.h": "data",
}
# Leaves: layer -> the only layers it may include.
LEAVES = {"data": {"util", "data"}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_include(path):
    """The layer an #include "path" names, or None (generated or foreign)."""
    if path.startswith("ps/"):
        rest = path[3:]
        if rest not in PUBLIC:
            raise AssertionError("public header %s has no layer: add it to "
                                 "PUBLIC in %s" % (path, __file__))
        return PUBLIC[rest]
    head = path.split("/", 1)[0]
    return head if head in RANK else None


def files():
    """(path relative to ROOT, its layer) for every source file."""
    for layer in LAYERS:
        base = os.path.join(ROOT, "src", layer)
        for d, _, names in os.walk(base):
            for n in names:
                if n.endswith((".h", ".cc")):
                    yield os.path.relpath(os.path.join(d, n), ROOT), layer
    inc = os.path.join(ROOT, "include", "ps")
    for d, _, names in os.walk(inc):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), inc)
            yield os.path.join("include", "ps", rel), PUBLIC.get(rel)


def violations():
    out = []
    for rel, layer in files():
        if layer is None:
            out.append("%s: public header with no layer" % rel)
            continue
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            target = layer_of_include(inc)
            if target is None:
                continue
            leaf_ok = LEAVES.get(layer)
            if leaf_ok is not None and target not in leaf_ok:
                out.append("%s (%s, a leaf) includes %s (%s)" %
                           (rel, layer, inc, target))
            elif target in LEAVES and target != layer:
                out.append("%s (%s) includes the leaf %s (%s)" %
                           (rel, layer, inc, target))
            elif RANK[target] > RANK[layer]:
                out.append("%s (%s) includes %s (%s)" %
                           (rel, layer, inc, target))
    return out


class LayersTest(unittest.TestCase):
    def test_no_file_includes_from_a_higher_layer(self):
        found = violations()
        self.assertEqual(found, [], "\n" + "\n".join(found))

    def test_the_check_sees_an_upward_include(self):
        self.assertEqual(layer_of_include("model/embedding_table.h"), "model")
        self.assertEqual(layer_of_include("ps/kv_app.h"), "app")
        self.assertIsNone(layer_of_include("meta.pb.h"))
        self.assertGreater(RANK["app"], RANK["node"])


if __name__ == "__main__":
    unittest.main()
