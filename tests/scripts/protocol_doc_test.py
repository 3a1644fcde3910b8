#!/usr/bin/python3
"""docs/protocol.md is true to proto/meta.proto: every field of every message
is documented in a table row, MetaPb's rows carry their field numbers, and
no row names a MetaPb field that the proto does not have."""

import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PROTO = os.path.join(ROOT, "proto", "meta.proto")
DOC = os.path.join(ROOT, "docs", "protocol.md")
FIELD = re.compile(r"^\s*(?:repeated\s+)?[A-Za-z0-9_.]+\s+([a-z_][a-z0-9_]*)"
                   r"\s*=\s*(\d+)\s*;")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def proto_fields(text):
    """{message: {field name: number}} of a .proto text (flat messages)."""
    out, current = {}, None
    for line in text.splitlines():
        line = line.split("//", 1)[0]
        m = re.match(r"^\s*message\s+(\w+)\s*\{", line)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        if re.match(r"^\s*\}", line):
            current = None
            continue
        m = FIELD.match(line)
        if m and current is not None:
            current[m.group(1)] = int(m.group(2))
    return out


def doc_rows(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def names_in(cell):
    return re.findall(r"`([a-z_][a-z0-9_]*)`", cell)


class ProtocolDocTest(unittest.TestCase):
    def setUp(self):
        self.fields = proto_fields(read(PROTO))
        self.rows = doc_rows(read(DOC))

    def test_the_proto_parses(self):
        self.assertEqual(self.fields["MetaPb"]["sender"], 1)
        self.assertEqual(self.fields["ControlPb"]["ring"], 4)
        self.assertIn("NodePb", self.fields)
        self.assertIn("RingPb", self.fields)

    def test_every_meta_field_has_a_numbered_row(self):
        numbered = {}
        for row in self.rows:
            cells = [c.strip() for c in row.strip("|").split("|")]
            if len(cells) < 2 or not re.fullmatch(r"\d+(,\s*\d+)*", cells[0]):
                continue
            numbers = [int(n) for n in re.findall(r"\d+", cells[0])]
            for number, name in zip(numbers, names_in(cells[1])):
                numbered[name] = number
        want = self.fields["MetaPb"]
        self.assertEqual(numbered, want,
                         "MetaPb's table in docs/protocol.md differs from "
                         "proto/meta.proto")

    def test_every_field_of_the_other_messages_has_a_row(self):
        missing = []
        for message in ("ControlPb", "NodePb", "RingPb"):
            rows = self.rows
            # A message's rows: from the row naming it to the next message.
            start = next((i for i, r in enumerate(rows)
                          if re.match(r"^\|\s*%s\s*\|" % message, r)), None)
            if start is None:
                missing.append(message + " (no rows)")
                continue
            documented = set()
            for r in rows[start:]:
                first = r.strip("|").split("|")[0].strip()
                if first and first != message:
                    break
                documented.update(names_in(r.strip("|").split("|")[1]))
            for name in self.fields[message]:
                if name not in documented:
                    missing.append(message + "." + name)
        self.assertEqual(missing, [])


if __name__ == "__main__":
    unittest.main()
