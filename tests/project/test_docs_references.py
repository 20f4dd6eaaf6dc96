"""Every `docs/<name>.md` that code, tests or data cite exists, and so does every section they name.

Citations look like "docs/bucketing.md section D.5", "docs/load-metrics.md §1",
"docs/real-vllm-cpu.md, sections 1 and 2", "docs/bucketing.md D.6" or "sections A, C.2 of docs/bucketing.md".
"""

import re

import pytest

from ..conftest import ROOT

DOCS = ROOT / "docs"
SCANNED = ["tuner", "tests", "benchmarks", "tools", "search_spaces", "README.md"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".log", ".txt"}

DOC_NAME = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)")
SECTION_ID = r"(?:[A-H](?:\.\d+)?|\d+(?:\.\d+)?)"
SECTION_LIST = re.compile(rf"(?:sections?|§)\s*({SECTION_ID}(?:\s*(?:,|and)\s*{SECTION_ID})*)\b")
BARE_SECTION = re.compile(r"docs/[\w.-]+\.md\s+([A-H](?:\.\d+)?)(?=[\s),:;]|$)")  # "docs/bucketing.md D.6"
HEADING = re.compile(rf"^#{{2,4}}\s+({SECTION_ID})\.?\s", re.M)


def _files():
    for entry in SCANNED:
        path = ROOT / entry
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)


def _citations() -> list[tuple[str, str, str | None]]:
    """(where, doc file name, section or None), one per cited section."""
    found = []
    for path in _files():
        if path == ROOT / "tests" / "project" / "test_docs_references.py":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            names = DOC_NAME.findall(line)
            if not names or "SOURCE:" in line:  # SOURCE lines name an upstream repository's docs/
                continue
            where = f"{path.relative_to(ROOT)}:{number}"
            sections = [s for group in SECTION_LIST.findall(line) for s in re.findall(SECTION_ID, group)]
            sections += BARE_SECTION.findall(line)
            for name in names:
                found.append((where, name, None))
                if len(names) == 1:
                    found += [(where, name, s) for s in sections]
    return found


CITATIONS = _citations()


def _sections(name: str) -> set[str]:
    ids = set(HEADING.findall((DOCS / name).read_text()))
    return ids | {i.split(".")[0] for i in ids}  # "D.5" also proves "D"


def test_the_scan_sees_the_known_citations():
    cited = {(n, s) for _, n, s in CITATIONS}
    assert {("bucketing.md", "D.5"), ("bucketing.md", "D.6"), ("load-metrics.md", "1")} <= cited


@pytest.mark.parametrize("where,name,section", CITATIONS, ids=[f"{w}-{n}-{s}" for w, n, s in CITATIONS])
def test_cited_doc_and_section_exist(where, name, section):
    assert (DOCS / name).is_file(), f"{where} cites docs/{name}, which does not exist"
    if section is not None:
        assert section in _sections(name), f"{where} cites docs/{name} section {section}, which has no such heading"



# --------------------------------------------------------------------------- paths into tuner/
# "tuner/perfmodel/target.py", "tuner/study/", "tuner/sim/clocks.py": a cited module or package exists.
TUNER_PATH = re.compile(r"(?<![\w/.-])tuner/[\w/]+(?:\.py|/)")
EXTRA_SCANNED = ["docs", "deploy"]


def _tuner_paths() -> list[tuple[str, str]]:
    found = []
    files = list(_files()) + [p for d in EXTRA_SCANNED for p in (ROOT / d).rglob("*")
                              if p.is_file() and p.suffix in SUFFIXES]
    for path in files:
        if path == ROOT / "tests" / "project" / "test_docs_references.py":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            found += [(f"{path.relative_to(ROOT)}:{number}", m) for m in TUNER_PATH.findall(line)]
    return found


TUNER_PATHS = _tuner_paths()


def test_the_scan_sees_tuner_paths():
    assert any(p == "tuner/perfmodel/" or p.startswith("tuner/perfmodel/") for _, p in TUNER_PATHS)


@pytest.mark.parametrize("where,cited", TUNER_PATHS, ids=[f"{w}-{p}" for w, p in TUNER_PATHS])
def test_cited_tuner_path_exists(where, cited):
    assert (ROOT / cited).exists(), f"{where} cites {cited}, which does not exist"


def test_the_architecture_map_lists_every_room_of_tuner():
    """docs/architecture.md's map names every top-level module and package of tuner/."""
    text = (DOCS / "architecture.md").read_text()
    rooms = [p.name + ("/" if p.is_dir() else "") for p in (ROOT / "tuner").iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"]
    missing = [r for r in rooms if not re.search(rf"^  {re.escape(r)}\s", text, re.M)]
    assert not missing, f"docs/architecture.md does not list {missing}"
