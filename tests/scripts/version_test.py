#!/usr/bin/python3
"""Ember's version is written in CMakeLists.txt (the library's ps::Version(),
the CMake package and ember.pc), in each tool of scripts/ that prints one
(`VERSION = "..."`: ember-launch --version, ember_status.py --version) and in
CHANGELOG.md. They must agree."""

import glob
import os
import re
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


class VersionTest(unittest.TestCase):
    def test_every_place_names_the_same_version(self):
        cmake = re.search(r"project\(Ember VERSION (\S+)", read("CMakeLists.txt"))
        launch = re.search(r'^VERSION = "([^"]+)"', read("scripts/ember_launch.py"),
                           re.M)
        changelog = re.search(r"^## (\S+)", read("CHANGELOG.md"), re.M)
        self.assertTrue(cmake and launch and changelog)
        self.assertEqual(launch.group(1), cmake.group(1))
        self.assertEqual(changelog.group(1), cmake.group(1))

    def test_every_tool_names_it(self):
        cmake = re.search(r"project\(Ember VERSION (\S+)", read("CMakeLists.txt"))
        tools = 0
        for path in sorted(glob.glob(os.path.join(ROOT, "scripts", "*.py"))):
            with open(path) as f:
                found = re.search(r'^VERSION = "([^"]+)"', f.read(), re.M)
            if found:
                tools += 1
                self.assertEqual(found.group(1), cmake.group(1), path)
        self.assertGreaterEqual(tools, 2)  # ember_launch.py, ember_status.py

    def test_ember_launch_prints_it(self):
        out = subprocess.run(
            ["/usr/bin/python3", os.path.join(ROOT, "scripts", "ember_launch.py"),
             "--version"], stdout=subprocess.PIPE, check=True, timeout=30)
        self.assertRegex(out.stdout.decode(), r"^ember-launch \(Ember\) \d+\.\d+")

    def test_there_is_a_license(self):
        self.assertIn("Apache License", read("LICENSE"))
        self.assertIn("Version 2.0", read("LICENSE"))


if __name__ == "__main__":
    unittest.main()
