"""Every relative link in README.md and docs/ resolves: to a file or folder of the repository,
and, with a #fragment into a Markdown page, to one of its headings (GitHub's anchors)."""
import re
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent
sys.path.insert(0, str(HERE))

import docs_examples  # noqa: E402

# [text](target) and ![alt](target), the target up to the first space or closing parenthesis.
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
FENCE = re.compile(r"^(`{3,}|~{3,})", re.M)


def without_code(text):
    """The page without fenced blocks and inline code, where brackets are not links."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.startswith(fence):
                fence = None
            continue
        out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def anchors(path):
    """GitHub's heading anchors of a Markdown page: lower case, punctuation dropped, spaces to
    hyphens, repeats numbered."""
    seen, result = {}, set()
    for line in without_code(Path(path).read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    for m in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', Path(path).read_text()):
        result.add(m.group(1))
    return result


def broken_links(root, files=None):
    root = Path(root)
    problems = []
    for page in files if files is not None else docs_examples.doc_files(root):
        text = without_code(page.read_text())
        targets = LINK.findall(text) + REFERENCE.findall(text)
        for target in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, fragment = target.partition("#")
            resolved = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(root)}: ({target})"
            if not resolved.exists():
                problems.append(f"{where} names {file_part}, which does not exist")
                continue
            try:
                resolved.relative_to(root.resolve())
            except ValueError:
                problems.append(f"{where} leaves the repository")
                continue
            if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                problems.append(f"{where}: {resolved.name} has no heading #{fragment}")
    return problems


class DocsLinksTest(unittest.TestCase):
    def test_every_relative_link_resolves(self):
        problems = broken_links(SOURCE)
        self.assertEqual(problems, [], "\n".join(problems))
        pages = docs_examples.doc_files(SOURCE)
        self.assertGreater(len(pages), 1, "no docs/ pages found")

    def test_broken_links_are_found(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "docs").mkdir()
            (root / "docs" / "a.md").write_text("# A page\n## Its part\n")
            (root / "README.md").write_text(
                "[ok](docs/a.md) [ok anchor](docs/a.md#its-part) [web](https://x.y/z)\n"
                "[gone](docs/b.md) [bad anchor](docs/a.md#nothing) ![img](docs/pic.png)\n"
                "[self](#title)\n# Title\n```sh\n[not a link](nowhere.md)\n```\n"
                "`[nor this](nowhere.md)`\n[ref]: docs/missing.md\n")
            problems = broken_links(root)
        self.assertEqual(len(problems), 4, "\n".join(problems))
        self.assertTrue(any("docs/b.md, which does not exist" in p for p in problems))
        self.assertTrue(any("a.md has no heading #nothing" in p for p in problems))
        self.assertTrue(any("docs/pic.png, which does not exist" in p for p in problems))
        self.assertTrue(any("docs/missing.md, which does not exist" in p for p in problems))


if __name__ == "__main__":
    unittest.main()
