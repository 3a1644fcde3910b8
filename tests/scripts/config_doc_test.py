#!/usr/bin/python3
"""docs/configuration.md lists every setting the code reads: each EMBER_*,
DMLC_* and PS_* variable named in src/, include/ and scheduler/ (in
src/node/options.cc and anywhere else), every variable passed to getenv
there, each variable the launcher (scripts/ember_launch.py, and
scripts/local.sh around it) reads or sets, and every gflags flag defined in
src/ and scheduler/. The test fails naming the setting and the file that
reads it."""

import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "configuration.md")
VAR = re.compile(r'"((?:EMBER|DMLC|PS)_[A-Z0-9_]*[A-Z0-9])"')
SHELL_VAR = re.compile(r"\$\{?((?:EMBER|DMLC)_[A-Z0-9_]+)")
PY_VAR = re.compile(r"[\"']((?:EMBER|DMLC)_[A-Z0-9_]+)[\"']")
FLAG = re.compile(r"\bDEFINE_[a-z0-9]+\(\s*([a-z][a-z0-9_]*)")
GETENV = re.compile(r"\bgetenv\(\s*\"([A-Za-z_][A-Za-z0-9_]*)\"")


def sources(*dirs):
    for d in dirs:
        for base, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if f.endswith((".cc", ".h")):
                    yield os.path.join(base, f)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def documented(text=None):
    """Variables in the first cell of a table row, and flags (--name inside
    `code`) anywhere on the page."""
    names, flags = set(), set()
    for line in (read(DOC) if text is None else text).splitlines():
        m = re.match(r"\|\s*`([A-Z][A-Z0-9_]+)`", line)
        if m:
            names.add(m.group(1))
        for code in re.findall(r"`([^`]*)`", line):
            flags.update(re.findall(r"(?:^|\s)--([a-z][a-z0-9_]*)\b", code))
    return names, flags


def settings_read(text):
    """The variables a C++ source names (EMBER_*, DMLC_*, PS_* literals, and
    any literal passed to getenv) and the flags it defines."""
    return set(VAR.findall(text)) | set(GETENV.findall(text)), \
        set(FLAG.findall(text))


def unlisted(dirs, doc_text=None):
    """{setting: first file that reads it} of the settings that files under
    `dirs` read and the page does not list. A variable outside EMBER_,
    DMLC_ and PS_ (glog's) may be named anywhere on the page."""
    names, flags = documented(doc_text)
    page = read(DOC) if doc_text is None else doc_text
    missing = {}
    for path in sources(*dirs):
        variables, defined = settings_read(read(path))
        for v in variables:
            listed = v in names if VAR.match('"%s"' % v) else \
                "`%s`" % v in page
            if not listed:
                missing.setdefault(v, os.path.relpath(path, ROOT))
        for f in defined:
            if f not in flags:
                missing.setdefault("--" + f, os.path.relpath(path, ROOT))
    return missing


class ConfigDocTest(unittest.TestCase):
    def test_every_setting_the_code_reads_is_listed(self):
        self.assertEqual(unlisted(["src", "include", "scheduler"]), {},
                         "read by the code, not in docs/configuration.md")

    def test_the_scan_sees_the_settings(self):
        variables, flags = set(), set()
        for path in sources("src", "scheduler"):
            v, f = settings_read(read(path))
            variables |= v
            flags |= f
        for name in ("EMBER_SPIN_US", "DMLC_ROLE", "EMBER_CURVE_KEY_FILE",
                     "GLOG_log_dir", "PS_VERBOSE"):
            self.assertIn(name, variables)
        self.assertIn("ember_spin_us", flags)
        self.assertIn("make_curve_key", flags)

    def test_an_unlisted_setting_fails(self):
        names, flags = settings_read(
            'const char* v = std::getenv("EMBER_NEW_KNOB");\n'
            'const char* g = std::getenv("OTHER_THING");\n'
            'DEFINE_int32(ember_new_flag, 1, "");\n')
        self.assertEqual(names, {"EMBER_NEW_KNOB", "OTHER_THING"})
        self.assertEqual(flags, {"ember_new_flag"})
        listed, listed_flags = documented()
        self.assertNotIn("EMBER_NEW_KNOB", listed)
        self.assertNotIn("ember_new_flag", listed_flags)
        # A variable dropped from the page is reported with its reader.
        page = read(DOC).replace("| `EMBER_SPIN_US` |", "| spin |")
        self.assertEqual(unlisted(["src"], page).get("EMBER_SPIN_US"),
                         "src/node/options.cc")

    def test_every_variable_the_launcher_reads_is_listed(self):
        names, _ = documented()
        scripts = os.path.join(ROOT, "scripts")
        used = set(SHELL_VAR.findall(read(os.path.join(scripts, "local.sh"))))
        used |= set(PY_VAR.findall(read(os.path.join(scripts,
                                                     "ember_launch.py"))))
        self.assertIn("EMBER_TIMEOUT", used)  # The scan works.
        self.assertEqual(sorted(used - names), [],
                         "used by the launcher, not in docs/configuration.md")


if __name__ == "__main__":
    unittest.main()
