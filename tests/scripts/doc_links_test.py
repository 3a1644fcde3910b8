#!/usr/bin/python3
"""Every relative link in README.md, CHANGELOG.md and docs/ leads somewhere:
the file (or directory) exists in the repository, and a #fragment names a
heading of the target page, as GitHub makes its anchors (lower case,
punctuation dropped, spaces to hyphens, -1, -2 ... for repeats). Links
inside code (fenced blocks and `spans`) are not links. The test fails
naming the page, the line and the link."""

import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def pages():
    found = [os.path.join(ROOT, "README.md"), os.path.join(ROOT,
                                                           "CHANGELOG.md")]
    for base, _, files in os.walk(os.path.join(ROOT, "docs")):
        found += [os.path.join(base, f) for f in sorted(files)
                  if f.endswith(".md")]
    return [p for p in found if os.path.isfile(p)]


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # Links: their text.
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen = {}
    result = set()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else "%s-%d" % (base, n))
    # Explicit anchors: <a id="..."> or <a name="...">.
    result.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return result


def broken_links(path, root=ROOT):
    """(line, link, why) for each link of PATH that leads nowhere or out of
    ROOT."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    broken = []
    cache = {}
    for number, line in prose_lines(text):
        line = CODE_SPAN.sub("", line)
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:
                continue
            name, _, fragment = target.partition("#")
            dest = path if not name else os.path.normpath(
                os.path.join(os.path.dirname(path), name))
            if not dest.startswith(root + os.sep):
                broken.append((number, target, "leaves the repository"))
                continue
            if not os.path.exists(dest):
                broken.append((number, target, "no such file"))
                continue
            if fragment and dest.endswith(".md"):
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if fragment not in cache[dest]:
                    broken.append((number, target, "no heading makes the "
                                   "anchor #%s" % fragment))
    return broken


class SlugTest(unittest.TestCase):
    def test_headings_become_githubs_anchors(self):
        for heading, want in (
                ("A server's death: `--failover`",
                 "a-servers-death---failover"),
                ("Replication's cost and its ceiling",
                 "replications-cost-and-its-ceiling"),
                ("`ps::Start`, `ps::Finalize`", "psstart-psfinalize"),
                ("Key runs", "key-runs"),
                ("1 x 1 and 4 x 4", "1-x-1-and-4-x-4"),
                ("snake_case_name", "snake_case_name")):
            with self.subTest(heading=heading):
                self.assertEqual(slug(heading), want)

    def test_repeated_headings_are_numbered_and_code_is_skipped(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            page = os.path.join(d, "page.md")
            with open(page, "w", encoding="utf-8") as f:
                f.write("# Title\n## Notes\n## Notes\n```\n## Not a heading\n"
                        "[x](nowhere.md)\n```\n[ok](#notes-1) "
                        "`[code](nowhere.md)` [bad](#not-a-heading) "
                        "[gone](missing.md) [web](https://example.com/x) "
                        "[out](../elsewhere.md)\n")
            self.assertEqual(anchors(page), {"title", "notes", "notes-1"})
            self.assertEqual([(line, link) for line, link, _ in
                              broken_links(page, root=d)],
                             [(8, "#not-a-heading"), (8, "missing.md"),
                              (8, "../elsewhere.md")])


class DocLinksTest(unittest.TestCase):
    def test_every_relative_link_leads_somewhere(self):
        problems = []
        for page in pages():
            for number, link, why in broken_links(page):
                problems.append("%s:%d: (%s): %s" % (
                    os.path.relpath(page, ROOT), number, link, why))
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


if __name__ == "__main__":
    unittest.main()
