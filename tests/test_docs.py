"""The docs speak to users: curriculum bookkeeping (seed and question numbers, issue numbers) lives in
docs/curriculum.md only."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOKKEEPING = re.compile(r"\bseed ?0\d\d\b|\bQ\d+\b|\bissue ?#?\d+\b", re.IGNORECASE)


def test_docs_have_no_curriculum_references_outside_the_curriculum():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{p.relative_to(ROOT)}:{i}: {m.group(0)}" for p in pages if p.name != "curriculum.md"
             for i, line in enumerate(p.read_text().splitlines(), 1) for m in BOOKKEEPING.finditer(line)]
    assert not found, "\n".join(found)
