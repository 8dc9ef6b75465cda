"""Every citation in src/ resolves to a heading of docs/.

The code cites the contract as `SPEC §2.10` (or `§2.10`) and the pipeline and
format rules as `R-P1-10` (or a whole group, `R-P1`). docs/contract.md holds a
heading for each section (`### §2.10 …`) and docs/rules.md one for each rule
(`### R-P1-10 …`). This script lists every citation that names no heading and
exits 1 when there is one.

    python3 scripts/citations.py [ROOT]     check ROOT (default: the repository)
    python3 scripts/citations.py --self-test
"""

import pathlib
import re
import sys
import tempfile

SECTION = re.compile(r"§\s?(\d+(?:\.\d+)?)")
# A rule id stands alone: "DEVELOPER-SPECIFIC" holds no rule.
RULE = re.compile(r"\bR-(?:[A-Z]+\d?)(?:-\d+)?\b")
HEADING = re.compile(r"^#{1,6}\s+(§\d+(?:\.\d+)?|R-[A-Z0-9]+(?:-\d+)?)\s")


def headings(root):
    found = set()
    for doc in sorted((root / "docs").glob("*.md")):
        for line in doc.read_text(encoding="utf-8").splitlines():
            match = HEADING.match(line)
            if match:
                found.add(match.group(1))
    return found


def citations(root):
    """(file, line number, citation) of every citation under src/."""
    for path in sorted((root / "src").rglob("*")):
        if not path.is_file() or path.suffix not in (".rs", ".md"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in SECTION.finditer(line):
                yield path.relative_to(root), number, "§" + match.group(1)
            for match in RULE.finditer(line):
                yield path.relative_to(root), number, match.group(0)


def unresolved(root):
    known = headings(root)
    return [(path, number, cited) for path, number, cited in citations(root) if cited not in known]


def check(root):
    missing = unresolved(root)
    for path, number, cited in missing:
        print(f"{path}:{number}: {cited} names no heading in docs/", file=sys.stderr)
    total = sum(1 for _ in citations(root))
    print(f"citations: {total} in src/, {len(missing)} unresolved")
    return 1 if missing else 0


def self_test():
    """The check finds a citation with no heading, and passes one with its heading."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "src").mkdir()
        (root / "docs").mkdir()
        (root / "src" / "a.rs").write_text("// SPEC §2.10, R-P1-10 and R-P1; DEVELOPER-SPECIFIC\n// §9.9 and R-XX-1\n")
        (root / "docs" / "contract.md").write_text("## §2.10 Memory\n## R-P1 Phase one\n### R-P1-10 Names\n")
        found = [cited for _, _, cited in unresolved(root)]
        assert found == ["§9.9", "R-XX-1"], found
    print("citations: self-test passed")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(check(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)))
