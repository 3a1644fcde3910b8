#!/usr/bin/python3
"""Layering: a file includes only from its own layer and the layers below it
(docs/design.md). Layers, bottom up: util, metrics, message, transport,
partition, node, consistency, app, model; beside them the leaf data (the
training data readers), which includes only util and which no other layer
includes. The public headers under include/ps/ belong to the layer that
implements them.

The test fails on any include from a higher layer, on a folder under src/
that is no layer, and on a public header that has no layer; the checker's
own tests run it on small trees made for the purpose, so it is known to
fail when it should."""

import os
import re
import shutil
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LAYERS = ["util", "metrics", "message", "transport", "partition", "node",
          "consistency", "app", "model", "data"]
RANK = {name: i for i, name in enumerate(LAYERS)}
# include/ps/<header> -> layer.
PUBLIC = {
    "base.h": "util", "status.h": "util", "sarray.h": "util",
    "range.h": "util", "internal/timestamp.h": "util",
    "internal/kv_request.h": "message",
    "consistency.h": "consistency",
    "internal/postoffice.h": "app", "internal/kv_core.h": "app",
    "kv_app.h": "app", "simple_app.h": "app", "ps.h": "app",
    "membership.h": "app",
    "model.h": "model",
    "data.h": "data",
}
# Leaves: layer -> the only layers it may include; no other layer includes
# a leaf.
LEAVES = {"data": {"util", "data"}}
# #include "path" and #include <ps/...>; a commented-out include does not
# match (the line must start with #).
INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"([^"]+)"|<(ps/[^>]+)>)', re.M)
SOURCE = (".h", ".cc")


class NoLayer(Exception):
    """An include names a public header that has no layer."""


def layer_of_include(path, public=None):
    """The layer an #include names, or None (system, generated or foreign).
    Raises NoLayer for a public header missing from `public`."""
    public = PUBLIC if public is None else public
    if path.startswith("ps/"):
        rest = path[3:]
        if rest not in public:
            raise NoLayer(path)
        return public[rest]
    head = path.split("/", 1)[0]
    return head if head in RANK else None


def files(root, public=None):
    """(path relative to root, its layer or None) for every source file of
    src/ and include/ps/."""
    public = PUBLIC if public is None else public
    src = os.path.join(root, "src")
    for d, dirs, names in os.walk(src):
        dirs.sort()
        for n in sorted(names):
            if not n.endswith(SOURCE):
                continue
            rel = os.path.relpath(os.path.join(d, n), root)
            top = os.path.relpath(os.path.join(d, n), src).split(os.sep)[0]
            yield rel, top if top in RANK else None
    inc = os.path.join(root, "include", "ps")
    for d, dirs, names in os.walk(inc):
        dirs.sort()
        for n in sorted(names):
            if not n.endswith(SOURCE):
                continue
            rel = os.path.relpath(os.path.join(d, n), inc).replace(os.sep, "/")
            yield os.path.join("include", "ps", rel), public.get(rel)


def violations(root=ROOT, public=None):
    """Every breach of the layering under `root`, one line each."""
    public = PUBLIC if public is None else public
    out = []
    for rel, layer in files(root, public):
        if layer is None:
            where = ("a public header with no layer (add it to PUBLIC)"
                     if rel.startswith("include") else
                     "not in a layer folder (%s)" % ", ".join(LAYERS))
            out.append("%s: %s" % (rel, where))
            continue
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        for quoted, angled in INCLUDE.findall(text):
            inc = quoted or angled
            try:
                target = layer_of_include(inc, public)
            except NoLayer:
                out.append("%s includes %s, a public header with no layer" %
                           (rel, inc))
                continue
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

    def test_every_layer_exists(self):
        for layer in LAYERS:
            self.assertTrue(os.path.isdir(os.path.join(ROOT, "src", layer)),
                            layer)


class CheckerTest(unittest.TestCase):
    """The checker on synthetic trees: it fails when it should."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ember_layers_test.")
        self.public = {"status.h": "util", "kv_app.h": "app"}
        # A clean tree: each file includes from its own layer or below.
        self.write("src/util/clock.h", '#include "ps/status.h"\n')
        self.write("src/node/node.h",
                   '#include <vector>\n#include "util/clock.h"\n'
                   '#include "meta.pb.h"\n')
        self.write("src/app/app.cc",
                   '#include "node/node.h"\n#include <ps/kv_app.h>\n')
        self.write("include/ps/status.h", "#include <string>\n")
        self.write("include/ps/kv_app.h", '#include "ps/status.h"\n')

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def check(self):
        return violations(self.root, self.public)

    def test_a_clean_tree_passes(self):
        self.assertEqual(self.check(), [])

    def test_an_upward_include_fails(self):
        self.write("src/node/options.h", '#include "app/app_impl.h"\n')
        self.assertEqual(self.check(), [
            "src/node/options.h (node) includes app/app_impl.h (app)"])

    def test_an_upward_include_of_a_public_header_fails(self):
        self.write("src/util/log.h", "  #  include <ps/kv_app.h>\n")
        self.write("include/ps/status.h", '#include "ps/kv_app.h"\n')
        self.assertEqual(self.check(), [
            "src/util/log.h (util) includes ps/kv_app.h (app)",
            "include/ps/status.h (util) includes ps/kv_app.h (app)"])

    def test_consistency_sits_between_node_and_app(self):
        self.write("src/consistency/controller.h",
                   '#include "node/node.h"\n#include "app/app.h"\n')
        self.assertEqual(self.check(), [
            "src/consistency/controller.h (consistency) includes "
            "app/app.h (app)"])

    def test_a_folder_that_is_no_layer_fails(self):
        self.write("src/scheduler/role.cc", '#include "util/clock.h"\n')
        found = self.check()
        self.assertEqual(len(found), 1)
        self.assertTrue(found[0].startswith(
            "src/scheduler/role.cc: not in a layer folder"), found)

    def test_a_public_header_without_a_layer_fails(self):
        self.write("include/ps/extra.h", "")
        self.write("src/model/m.cc", '#include "ps/other.h"\n')
        found = self.check()
        self.assertIn("include/ps/extra.h: a public header with no layer "
                      "(add it to PUBLIC)", found)
        self.assertIn("src/model/m.cc includes ps/other.h, a public header "
                      "with no layer", found)

    def test_a_leaf_includes_only_util_and_nothing_includes_it(self):
        self.write("src/data/reader.cc",
                   '#include "util/clock.h"\n#include "node/node.h"\n')
        self.write("src/model/m.cc", '#include "data/reader.h"\n')
        self.assertEqual(self.check(), [
            "src/data/reader.cc (data, a leaf) includes node/node.h (node)",
            "src/model/m.cc (model) includes the leaf data/reader.h (data)"])

    def test_commented_includes_and_other_files_are_ignored(self):
        self.write("src/util/notes.h", '// #include "model/m.h"\n')
        self.write("src/util/README.md", '#include "model/m.h"\n')
        self.assertEqual(self.check(), [])


if __name__ == "__main__":
    unittest.main()
