#!/usr/bin/python3
"""Ember's version is written in three places: CMakeLists.txt (the library's
ps::Version(), the CMake package and ember.pc), scripts/ember_launch.py
(ember-launch --version) and CHANGELOG.md. They must agree."""

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
