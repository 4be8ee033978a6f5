"""The documentation keeps up with the code: every configuration key of src/config_keys.c's key
table, every command of src/main.c's command table and every builtin of src/proc/builtin.c is
documented in the man page (docs/roifs.1) and in docs/ (configuration.md, operations.md) and
the README; docs/configuration.md lists no key the code does not accept; every relative link
between the pages leads to a file and heading that exist; docs/ is the whole contract (no file
cites one outside the repository, and every citation of a docs page and heading resolves);
tests/README.md names every test, and only tests that exist. Nothing here needs a build or a
mount: the lists are read from the C sources, so adding a key, command or builtin without
documenting it fails this test."""
import functools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAN = REPO / "docs" / "roifs.1"
CONFIG_MD = REPO / "docs" / "configuration.md"
README = REPO / "README.md"


def c_table(path, name):
    """The text of the C array initialiser `name[] = { ... };` in path, comments removed."""
    src = (REPO / path).read_text()
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    m = re.search(r"\b" + re.escape(name) + r"\s*\[\s*\]\s*=\s*\{(.*?)\};", src, re.S)
    assert m, f"{path}: no table {name}[] (did it move? update tests/e2e/test_docs.py)"
    return m.group(1)


def config_keys():
    """(section, key) of every entry of src/config_keys.c's key table, plus param.NAME."""
    table = c_table("src/config_keys.c", "keys")
    keys = re.findall(r'\{\s*"([a-z_]+)"\s*,\s*"([a-z_]+)"', table)
    assert len(keys) >= 30, keys  # the table's shape is still what this parser expects
    src = (REPO / "src" / "config.c").read_text()
    if '"param."' in src:
        keys.append(("process", "param.NAME"))
    return keys


def config_sections():
    return re.findall(r'"([a-z_]+)"', c_table("src/config_keys.c", "sections"))


def commands():
    names = re.findall(r'\{\s*"([a-z]+)"\s*,\s*cmd_', c_table("src/main.c", "commands"))
    assert len(names) >= 7, names
    return names


def builtins():
    names = re.findall(r'\{\s*"([a-z_]+)"\s*,\s*OP_', c_table("src/proc/builtin.c",
                                                               "builtin_defs"))
    assert names, "no builtins found"
    return names


def man_text():
    """The man page source with roff escapes for '-' resolved, so words compare as typed."""
    return MAN.read_text().replace("\\-", "-").replace("\\(em", "-")


def man_section(name):
    """The text of one .SH section of the man page."""
    text = man_text()
    m = re.search(r"^\.SH " + re.escape(name) + r"\n(.*?)(?=^\.SH |\Z)", text, re.S | re.M)
    assert m, f"docs/roifs.1 has no section {name}"
    return m.group(1)


def man_config_blocks():
    """[section] -> the text of its paragraph in the man page's CONFIGURATION section."""
    text = man_section("CONFIGURATION")
    blocks = {}
    parts = re.split(r"^\.TP\n\.B \[([a-z_]+)\]\n", text, flags=re.M)
    for i in range(1, len(parts), 2):
        blocks[parts[i]] = parts[i + 1].split("\n.PP")[0].split("\n.SS")[0]
    return blocks


def doc_config_table():
    """(section, key) of every row of docs/configuration.md's key table."""
    rows, section = [], None
    for line in CONFIG_MD.read_text().splitlines():
        m = re.match(r"^\| *(`\[([a-z_]+)\]`)? *\| *`([A-Za-z_.]+)` *\|", line)
        if not m:
            continue
        if m.group(2):
            section = m.group(2)
        assert section, f"docs/configuration.md: a key row before any section: {line}"
        rows.append((section, m.group(3)))
    return rows


def words(text):
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", text))


# ------------------------------------------------------------------ configuration keys


@pytest.mark.parametrize("section,key", config_keys())
def test_key_in_man_page(section, key):
    blocks = man_config_blocks()
    assert section in blocks, f"docs/roifs.1: CONFIGURATION has no paragraph for [{section}]"
    want = "param." if key == "param.NAME" else key
    assert want in words(blocks[section]) or (key == "param.NAME" and ".BI param." in
                                               blocks[section]), \
        f"docs/roifs.1: [{section}] {key} is accepted by roifs (src/config_keys.c) but not documented"


@pytest.mark.parametrize("section,key", config_keys())
def test_key_in_configuration_md(section, key):
    assert (section, key) in doc_config_table(), \
        f"docs/configuration.md: [{section}] {key} is accepted by roifs (src/config_keys.c) but not in " \
        "the key table"


def test_configuration_md_lists_only_real_keys():
    real = set(config_keys())
    stale = [k for k in doc_config_table() if k not in real]
    assert not stale, f"docs/configuration.md documents keys src/config_keys.c does not accept: {stale}"


def test_every_section_documented():
    blocks = man_config_blocks()
    table = {s for s, _ in doc_config_table()}
    for s in config_sections():
        assert s in blocks, f"docs/roifs.1: no paragraph for [{s}]"
        assert s in table, f"docs/configuration.md: no key of [{s}]"


def test_builtins_documented():
    man = words(man_section("CONFIGURATION"))
    md = CONFIG_MD.read_text()
    for name in builtins():
        assert name in man, f"docs/roifs.1: builtin {name} not documented"
        assert re.search(r"^\| `" + name + r"` \|", md, re.M), \
            f"docs/configuration.md: builtin {name} not in the builtin table"


# ------------------------------------------------------------------------- commands


@pytest.mark.parametrize("name", commands())
def test_command_documented(name):
    man = man_text()
    assert re.search(r"roifs( \\fP| \\fB|\" | )+" + name + r"\b", man) or \
        re.search(r'\.SY "roifs ' + name + '"', man), f"docs/roifs.1: command {name} missing"
    for page in (README, REPO / "docs" / "operations.md"):
        assert re.search(r"roifs (\[[^]]*\] )?" + name + r"\b", page.read_text()) or \
            f"({name}" in page.read_text() or f"`{name}`" in page.read_text(), \
            f"{page.relative_to(REPO)}: command {name} missing"


def test_readme_is_the_front_door():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 260, ("README.md has %d lines: keep it the front door and put "
                               "details in docs/" % len(lines))
    for line in ("scripts/demo.sh     # installs what is missing, builds, mounts "
                 "config/demo.ini, reads it with zarr-python, prints a summary, unmounts",
                 "tests/run.sh        # installs what is missing, builds, runs the whole test "
                 "suite (C unit tests + mounted end-to-end tests)"):
        assert line in lines, f"README.md: the quick start line changed: {line}"
    assert "`tests/run.sh` is the test command" in text


# ---------------------------------------------------------------------------- links


def slug(heading):
    """GitHub's anchor for a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#{1,6} +(.+?) *$", text, re.M)}


PAGES = [README, REPO / "tests" / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, mailto:
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no such heading")
    assert not bad, f"{page.relative_to(REPO)}: broken links: {bad}"


# ------------------------------------------------------------ citations and the contract

# Where the repository's own text lives; build trees, caches and fuzz corpora are not text.
TEXT_DIRS = ("src", "include", "tests", "python", "scripts", "bench", "docs", "fuzz", "examples",
             "config", ".ci")
SKIP_PARTS = {"node_modules", "fuzz-corpus", "__pycache__", ".pytest_cache"}
TEXT_SUFFIXES = {".c", ".h", ".py", ".md", ".sh", ".txt", ".ini", ".json", ".mjs", ".build",
                 ".1", ".supp", ""}


def repo_text_files():
    """(path, text) of every text file of the repository's own directories and top level."""
    paths = [p for p in REPO.iterdir() if p.is_file()]
    for d in TEXT_DIRS:
        if (REPO / d).is_dir():
            paths += [p for p in (REPO / d).rglob("*") if p.is_file()]
    for p in sorted(paths):
        rel = p.relative_to(REPO)
        if SKIP_PARTS & set(rel.parts) or p.suffix not in TEXT_SUFFIXES or \
                p.stat().st_size > 4 << 20:
            continue
        try:
            yield rel, p.read_text()
        except UnicodeDecodeError:
            continue


# Written in two pieces so that this file does not match itself.
OUTSIDE_CONTRACT = re.compile("SP" r"EC(\.md|\s*§|\s+sections?\s+\d|\s+\d)|" "DES" r"IGN\.md")


def test_no_outside_contract_cited():
    """docs/ is the whole contract: no file cites the specification the project started from
    (it is not in the repository, so a reader cannot follow such a citation)."""
    bad = [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
           for rel, text in repo_text_files() for m in OUTSIDE_CONTRACT.finditer(text)]
    assert not bad, "cite the page and heading of docs/ that states it instead: " + \
        ", ".join(bad[:20])


@functools.lru_cache(maxsize=None)
def headings(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [re.sub(r"[`*]", "", h) for h in re.findall(r"^#{1,6} +(.+?) *$", text, re.M)]


def unwrapped(text):
    """text with comment continuation lines joined, so a citation cut by a line break reads
    as one (C ` * `, Python and shell `# `)."""
    return re.sub(r"\n[ \t]*(\*(?!/)|#|//)?[ \t]*", " ", text)


CITATION = re.compile(r"docs/([a-z0-9-]+\.md)(#[a-z0-9_-]+)?(, ([A-Z](?:(?!docs/)[^;:()\"\n])*)| \"([^\"]+)\")?")


def test_citations_resolve():
    """Every `docs/PAGE.md#anchor`, `docs/PAGE.md, Heading` and `docs/PAGE.md "Heading"` in
    the repository names a page and a heading of it that exist (the heading may be cited by its
    first words)."""
    bad = []
    for rel, text in repo_text_files():
        for m in CITATION.finditer(unwrapped(text)):
            page = REPO / "docs" / m.group(1)
            if not page.exists():
                bad.append(f"{rel}: {m.group(0)}: no such page")
                continue
            if m.group(2) and m.group(2)[1:] not in anchors(page):
                bad.append(f"{rel}: {m.group(0)}: no such heading")
            cited = (m.group(4) or m.group(5) or "").strip().rstrip(".,")
            if cited and not m.group(2):
                hs = headings(page)
                if not any(h.startswith(cited) or cited.startswith(h) for h in hs):
                    bad.append(f"{rel}: docs/{m.group(1)}, {cited}: no such heading")
    assert not bad, bad


# ------------------------------------------------------------------ tests/README.md


TESTS_README = REPO / "tests" / "README.md"


@functools.lru_cache(maxsize=None)
def defined_tests():
    """{file name: test names}: the test functions of tests/e2e/test_*.py and the RUN(...)
    of tests/unit/test_*.c (or, in a file without RUN, the test_ functions its main calls)."""
    tests = {}
    for p in sorted((REPO / "tests" / "e2e").glob("test_*.py")):
        tests[p.name] = re.findall(r"^(?:    )?def (test_\w+)\(", p.read_text(), re.M)
    for p in sorted((REPO / "tests" / "unit").glob("test_*.c")):
        text = p.read_text()
        names = re.findall(r"\bRUN\(\s*(\w+)\s*\)", text)
        if not names:  # a file without RUN: the test_ functions its main() calls
            main = re.search(r"^int main\(.*?^\}", text, re.S | re.M)
            names = re.findall(r"\b(test_\w+)\(", main.group(0)) if main else []
        tests[p.name] = names
    return tests


@functools.lru_cache(maxsize=None)
def readme_items():
    """tests/README.md as items: each table row, each bullet with its continuation lines,
    each paragraph."""
    items, cur = [], []
    for line in TESTS_README.read_text().splitlines():
        if line.startswith("|") or line.startswith("- ") or not line.strip() or \
                line.startswith("#"):
            if cur:
                items.append(" ".join(cur))
            cur = [line] if line.strip() else []
            if line.startswith("|"):
                items.append(line)
                cur = []
        else:
            cur.append(line)
    if cur:
        items.append(" ".join(cur))
    return items


def word(name):
    return re.compile(r"(?<![\w.])" + re.escape(name) + r"(?![\w])")


@pytest.mark.parametrize("file", sorted(defined_tests()))
def test_every_test_is_listed(file):
    """Each test is named in tests/README.md: as `file::test`, or by its name in a row or
    bullet that names its file."""
    text = TESTS_README.read_text()
    items = [i for i in readme_items() if word(file).search(i)]
    missing = [t for t in defined_tests()[file]
               if f"{file}::{t}" not in text and not any(word(t).search(i) for i in items)]
    assert defined_tests()[file], f"tests/{file}: no test found (did the RUN macro change?)"
    assert not missing, f"tests/README.md does not name these tests of {file}: {missing}"


def test_listed_tests_exist():
    """Every `file::test` of tests/README.md names a test that exists, and every test file it
    names exists."""
    tests = defined_tests()
    text = TESTS_README.read_text()
    bad = [f"{f}::{t}" for f, t in re.findall(r"(test_\w+\.(?:py|c))::(\w+)", text)
           if t not in tests.get(f, ())]
    bad += [f for f in set(re.findall(r"`(test_\w+\.(?:py|c))`", text))
            if f not in tests and not (REPO / "tests" / "unit" / f).exists()]
    assert not bad, f"tests/README.md names tests that do not exist: {bad}"
