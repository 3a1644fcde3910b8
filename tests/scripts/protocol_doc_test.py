#!/usr/bin/python3
"""docs/protocol.md is true to proto/: for every message of every
proto/*.proto file the doc has a section (a heading naming the message in
backticks) whose table lists each field with its number, and no row names a
field or number the message does not have. Reserved numbers are rows of
their own ("(reserved)")."""

import glob
import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "protocol.md")
FIELD = re.compile(r"^\s*(?:repeated\s+|optional\s+)?[A-Za-z0-9_.]+\s+"
                   r"([a-z_][a-z0-9_]*)\s*=\s*(\d+)\s*[;\[]")
RESERVED = re.compile(r"^\s*reserved\s+([0-9,\s]+);")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def proto_fields(text):
    """({message: {field: number}}, {message: {reserved numbers}}) of a
    .proto text (messages not nested; enums are skipped; the fields of a
    oneof belong to its message)."""
    fields, reserved, current, stack = {}, {}, None, []
    for line in text.splitlines():
        line = line.split("//", 1)[0]
        m = re.match(r"^\s*(message|enum|oneof)\s+(\w+)\s*\{(\s*\})?", line)
        if m:
            kind, name, closed = m.group(1), m.group(2), m.group(3)
            if kind == "message":
                if stack:
                    raise AssertionError("nested message %s: teach this test"
                                         % name)
                fields[name], reserved[name] = {}, set()
                current = name
            if closed:
                if kind == "message":
                    current = None
                continue
            stack.append(kind)
            continue
        if re.match(r"^\s*\}", line):
            kind = stack.pop() if stack else None
            if kind == "message":
                current = None
            continue
        if current is None or (stack and stack[-1] == "enum"):
            continue
        m = FIELD.match(line)
        if m:
            fields[current][m.group(1)] = int(m.group(2))
        m = RESERVED.match(line)
        if m:
            reserved[current].update(int(n) for n in
                                     re.findall(r"\d+", m.group(1)))
    return fields, reserved


def all_protos():
    fields, reserved = {}, {}
    paths = sorted(glob.glob(os.path.join(ROOT, "proto", "*.proto")))
    for path in paths:
        f, r = proto_fields(read(path))
        for message in f:
            if message in fields:
                raise AssertionError("message %s in two files" % message)
        fields.update(f)
        reserved.update(r)
    return paths, fields, reserved


def doc_tables(text, messages):
    """({message: {field: number}}, {message: {reserved numbers}}) of the
    doc: the rows "| numbers | `names` | ..." of the tables under a heading
    that names exactly one message."""
    fields, reserved, current = {}, {}, None
    for line in text.splitlines():
        if line.startswith("#"):
            named = [n for n in re.findall(r"`(\w+)`", line)
                     if n in messages]
            current = named[0] if len(named) == 1 else None
            if current:
                fields.setdefault(current, {})
                reserved.setdefault(current, set())
            continue
        if current is None or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"\d+(,\s*\d+)*", cells[0]):
            continue
        numbers = [int(n) for n in re.findall(r"\d+", cells[0])]
        names = re.findall(r"`([a-z_][a-z0-9_]*)`", cells[1])
        if cells[1].startswith("(reserved)"):
            reserved[current].update(numbers)
            continue
        if len(names) != len(numbers):
            raise AssertionError("row with %d numbers and %d names: %s" %
                                 (len(numbers), len(names), line))
        for name, number in zip(names, numbers):
            fields[current][name] = number
    return fields, reserved


class ProtocolDocTest(unittest.TestCase):
    def setUp(self):
        self.paths, self.fields, self.reserved = all_protos()
        self.doc_fields, self.doc_reserved = doc_tables(read(DOC),
                                                        set(self.fields))

    def test_the_protos_parse(self):
        names = [os.path.basename(p) for p in self.paths]
        self.assertIn("meta.proto", names)
        self.assertIn("model.proto", names)
        self.assertEqual(self.fields["MetaPb"]["sender"], 1)
        self.assertEqual(self.fields["MetaPb"]["auth_hi"], 23)
        self.assertEqual(self.fields["ControlPb"]["ring"], 4)
        self.assertEqual(self.fields["EmbeddingTable"]["ids"], 2)
        self.assertEqual(self.reserved["RingPb"], {2})

    def test_every_message_has_a_section(self):
        self.assertEqual(sorted(set(self.fields) - set(self.doc_fields)), [],
                         "messages without a section in docs/protocol.md")

    def test_every_field_has_its_number(self):
        for message, want in sorted(self.fields.items()):
            with self.subTest(message=message):
                self.assertEqual(self.doc_fields.get(message), want,
                                 "docs/protocol.md's table of %s differs "
                                 "from proto/" % message)

    def test_reserved_numbers_are_listed(self):
        for message, want in sorted(self.reserved.items()):
            with self.subTest(message=message):
                self.assertEqual(self.doc_reserved.get(message, set()), want)

    def test_a_changed_field_would_be_caught(self):
        # The comparison is not vacuous: a renumbered or renamed field in
        # the doc shows up as a difference.
        text = read(DOC).replace("| 20 | `clock_tick` |", "| 24 | `clock_tick` |")
        fields, _ = doc_tables(text, set(self.fields))
        self.assertNotEqual(fields["MetaPb"], self.fields["MetaPb"])


if __name__ == "__main__":
    unittest.main()
