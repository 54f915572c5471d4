#!/usr/bin/python3
"""The documentation a user reads: README.md, docs/ and bench/README.md.

- README.md is at most 250 lines and has its sections in the reader's order.
- No commit hash of this repository appears in them, except the one line of
  README.md that names the commit its performance table was measured at.
- No history: no "tried and not kept", no run-against-run notes.
- Every relative link resolves: the file exists and, for a `#anchor`, the
  file has a heading with that anchor (GitHub's rule: lower case, spaces to
  dashes, punctuation dropped).

Usage: docs_test.py REPO_ROOT
"""
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), ".."))

README_MAX_LINES = 250
# The README's sections, in this order (each a "## " heading starting so).
README_SECTIONS = [
    "Is it for you", "Two commands", "Quick start", "Options", "Guarantees",
    "Where it differs from a local filesystem", "Keeping a store",
    "Several hosts, one store", "How it works",
    "Performance", "Development and tests", "Troubleshooting",
]
# The README's one line that may name a commit: the performance table's caption.
COMMIT_LINE = re.compile(r"^Measured at commit [0-9a-f]{7,40}\b")
HISTORY = re.compile(r"tried and not kept|measured and not (kept|adopted)|"
                     r"before this change|than before\b", re.IGNORECASE)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEX = re.compile(r"\b[0-9a-f]{7,40}\b")


def doc_files():
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "bench", "README.md")]
    docs = os.path.join(ROOT, "docs")
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def without_code(text):
    """The text with fenced code blocks blanked (links and headings in code
    are not links and headings), keeping the line count."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def anchors(text):
    result = set()
    for line in without_code(text).split("\n"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        title = re.sub(r"[`*]", "", m.group(1)).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        result.add(slug)
    return result


def commit_hashes():
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-list", "--all"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.split()


class DocsTest(unittest.TestCase):
    def test_readme_is_short_and_in_order(self):
        lines = read(os.path.join(ROOT, "README.md")).split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self.assertLessEqual(len(lines), README_MAX_LINES, "README.md is too long")
        headings = [l[3:] for l in without_code("\n".join(lines)).split("\n")
                    if l.startswith("## ")]
        positions = []
        for want in README_SECTIONS:
            found = [i for i, h in enumerate(headings) if h.startswith(want)]
            self.assertTrue(found, "README.md has no section '## %s'" % want)
            positions.append(found[0])
        self.assertEqual(positions, sorted(positions),
                         "README.md's sections are out of order: %s" % headings)

    def test_no_commit_hash(self):
        hashes = commit_hashes()
        if hashes is None or not hashes:
            self.skipTest("not a git checkout")
        def is_commit(word):
            return any(h.startswith(word) for h in hashes)
        named = 0
        for path in doc_files():
            for n, line in enumerate(read(path).split("\n"), 1):
                found = [w for w in HEX.findall(line) if is_commit(w)]
                if not found:
                    continue
                if path.endswith("/README.md") and os.path.dirname(path) == ROOT \
                        and COMMIT_LINE.match(line):
                    named += 1
                    continue
                self.fail("%s:%d names commit %s" % (os.path.relpath(path, ROOT), n, found[0]))
        self.assertLessEqual(named, 1, "README.md names more than one commit")

    def test_no_history(self):
        for path in doc_files():
            for n, line in enumerate(read(path).split("\n"), 1):
                m = HISTORY.search(line)
                self.assertIsNone(m, "%s:%d: history ('%s') belongs in commit messages" %
                                  (os.path.relpath(path, ROOT), n, m and m.group(0)))

    def test_relative_links_resolve(self):
        checked = 0
        for path in doc_files():
            text = without_code(read(path))
            for target in LINK.findall(text):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                    if file_part else path
                where = "%s: link %s" % (os.path.relpath(path, ROOT), target)
                self.assertTrue(os.path.exists(dest), where + ": no such file")
                if anchor:
                    self.assertIn(anchor, anchors(read(dest)), where + ": no such heading")
                checked += 1
        self.assertGreater(checked, 10, "too few links found: is the pattern right?")

    def test_checks_can_fail(self):
        """The helpers find what they look for."""
        self.assertIn("keeping-a-store", anchors("## Keeping a store\n"))
        self.assertIn("large-files-data-files-kernel-passthrough-and-integrity",
                      anchors("# Large files: data files, kernel passthrough and integrity\n"))
        self.assertEqual(LINK.findall("see [a](docs/A.md#x) and ![b](p.png)"),
                         ["docs/A.md#x", "p.png"])
        self.assertTrue(HISTORY.search("this was tried and not kept"))
        self.assertEqual(without_code("a\n```\n[x](y)\n```\nb").split("\n")[2], "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
