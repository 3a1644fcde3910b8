#!/usr/bin/python3
"""docs/configuration.md lists every setting the code reads: each EMBER_*,
DMLC_* and PS_* variable named in src/, include/ and scheduler/, each
variable the launcher (scripts/ember_launch.py, and scripts/local.sh
around it) reads or sets, and each --ember_* flag."""

import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "configuration.md")
VAR = re.compile(r'"((?:EMBER|DMLC|PS)_[A-Z0-9_]*[A-Z0-9])"')
SHELL_VAR = re.compile(r"\$\{?((?:EMBER|DMLC)_[A-Z0-9_]+)")
PY_VAR = re.compile(r"[\"']((?:EMBER|DMLC)_[A-Z0-9_]+)[\"']")
FLAG = re.compile(r"\bDEFINE_[a-z0-9]+\(\s*(ember_[a-z0-9_]+)")


def sources(*dirs):
    for d in dirs:
        for base, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if f.endswith((".cc", ".h")):
                    yield os.path.join(base, f)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def documented():
    """Names in the first cell of a table row, and flags anywhere in a row."""
    names, flags = set(), set()
    for line in read(DOC).splitlines():
        m = re.match(r"\|\s*`([A-Z][A-Z0-9_]+)`", line)
        if m:
            names.add(m.group(1))
        flags.update(re.findall(r"`--(ember_[a-z0-9_]+)`", line))
    return names, flags


class ConfigDocTest(unittest.TestCase):
    def test_every_variable_the_code_reads_is_listed(self):
        names, _ = documented()
        read_by_code = {}
        for path in sources("src", "include", "scheduler"):
            for name in VAR.findall(read(path)):
                read_by_code.setdefault(name, os.path.relpath(path, ROOT))
        self.assertIn("EMBER_SPIN_US", read_by_code)  # The scan works.
        missing = {n: p for n, p in read_by_code.items() if n not in names}
        self.assertEqual(missing, {},
                         "read by the code, not in docs/configuration.md")

    def test_every_variable_the_launcher_reads_is_listed(self):
        names, _ = documented()
        scripts = os.path.join(ROOT, "scripts")
        used = set(SHELL_VAR.findall(read(os.path.join(scripts, "local.sh"))))
        used |= set(PY_VAR.findall(read(os.path.join(scripts,
                                                     "ember_launch.py"))))
        self.assertIn("EMBER_TIMEOUT", used)  # The scan works.
        self.assertEqual(sorted(used - names), [],
                         "used by the launcher, not in docs/configuration.md")

    def test_every_flag_is_listed(self):
        _, flags = documented()
        defined = set()
        for path in sources("src", "scheduler"):
            defined.update(FLAG.findall(read(path)))
        self.assertIn("ember_spin_us", defined)
        self.assertEqual(sorted(defined - flags), [],
                         "defined, not in docs/configuration.md")


if __name__ == "__main__":
    unittest.main()
