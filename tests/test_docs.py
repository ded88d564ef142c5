"""The documentation site cannot rot: it builds with ``mkdocs build --strict`` (a broken link or anchor, a name
mkdocstrings cannot find, fail it), every ```python example of docs/ runs on the virtual clock or type-checks
(``mypy --strict`` and ``pyright``, as tests/test_typing.py checks the README's), the API reference holds every
public name, every committed benchmark run and plot is in the site with the run it came from, and headless
Chromium renders the front page and the API reference.

./run test runs this module once, in its first run, whose virtualenv has the docs extra (pip install .[docs]) and
where Chromium is installed (Debian's ``chromium``). Without Chromium the browser test fails under CI=true and is
skipped elsewhere; without the docs extra every test here fails."""

from __future__ import annotations

import asyncio
import contextlib
import html
import importlib.util
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from test_typing import CHECKED_FENCE, SYNOPSIS_FENCE, fenced_blocks, mypy, pyright, pyright_config
from virtual_loop import run_virtually

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
TIMEOUT = 300  # s: a build or a browser that hangs fails the test
CI = os.environ.get("CI", "") not in ("", "0", "false")


def committed(*patterns: str) -> list[str]:
    """The files git tracks under these patterns, as paths from the root (what a clean clone has)."""
    out = subprocess.run(["git", "ls-files", "--", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return sorted(out.stdout.split())


def examples() -> list[tuple[str, str]]:
    """(page and index, code) of every checked ```python block of docs/."""
    found = []
    for page in PAGES:
        for i, code in enumerate(fenced_blocks(page.read_text()).get(CHECKED_FENCE, [])):
            found.append((f"{page.relative_to(DOCS).as_posix()}#{i}", code))
    return found


EXAMPLES = examples()
RUNNABLE = [(name, code) for name, code in EXAMPLES if "asyncio.run(main())" in code]


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """mkdocs build --strict of config into site."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings_handlers") is None:
        pytest.fail("mkdocs and mkdocstrings are not installed: pip install .[docs]")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=config.parent, capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from the tree as ./run docs builds it; a warning fails the build and the test."""
    folder = tmp_path_factory.mktemp("site")
    result = build(ROOT / "mkdocs.yml", folder)
    if result.returncode:
        pytest.fail(f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}", pytrace=False)
    return folder


def text_of(page: Path) -> str:
    """A built page's text, without its tags, its white space collapsed."""
    return shown_text(page.read_text())


def shown_text(markup: str) -> str:
    """The text of HTML markup, without its tags, its white space collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", markup)))


def test_docs_have_pages_and_examples() -> None:
    assert len(PAGES) >= 20 and len(EXAMPLES) >= 15 and len(RUNNABLE) >= 10


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_every_python_fence_is_checked_or_a_synopsis(page: Path) -> None:
    assert set(fenced_blocks(page.read_text())) <= {CHECKED_FENCE, SYNOPSIS_FENCE}


@pytest.mark.parametrize(("name", "example"), RUNNABLE, ids=[name for name, _ in RUNNABLE])
def test_docs_example_runs(name: str, example: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncio, "run", run_virtually)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, str(DOCS / name.split("#")[0]), "exec"), {"__name__": "docs"})
    assert printed.getvalue().strip()


@pytest.fixture(scope="module")
def typed_examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every checked block of docs/ as a module of its own, in a folder with the project's pyright settings."""
    folder = tmp_path_factory.mktemp("docs_examples")
    for i, (_, code) in enumerate(EXAMPLES):
        (folder / f"docs_example_{i}.py").write_text(code)
    pyright_config(folder)
    return folder


def test_docs_examples_mypy(typed_examples: Path, tmp_path: Path) -> None:
    mypy(sorted(typed_examples.glob("*.py")), typed_examples, tmp_path / "mypy")


def test_docs_examples_pyright(typed_examples: Path) -> None:
    report = pyright([], typed_examples)
    assert report["summary"]["filesAnalyzed"] == len(EXAMPLES)


def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file() and (site / "reference" / "limiters" / "index.html").is_file()


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    """--strict with mkdocs.yml's validation makes a link to a missing page, or to a missing heading, an error."""
    for name in ("mkdocs.yml", "docs", "python", "benchmarks"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", ".cache"))
        else:
            shutil.copy(source, tmp_path / name)
    for link in ("[gone](guides/no-such-page.md)", "[gone](guides/threads.md#no-such-heading)"):
        page = tmp_path / "docs" / "index.md"
        page.write_text((DOCS / "index.md").read_text() + f"\n{link}\n")
        result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
        assert result.returncode != 0, link
        assert "no-such-" in result.stdout + result.stderr, link


def test_the_api_reference_holds_every_public_name(site: Path) -> None:
    import aiotb

    reference = "".join(page.read_text() for page in (site / "reference").rglob("index.html"))
    names = [f"aiotb.{name}" for name in aiotb.__all__]
    names += ["aiotb.httpx.LimitedTransport", "aiotb.aiohttp.limiter_middleware", "aiotb.Limiter.acquire",
              "aiotb.Limiter.try_acquire", "aiotb.RedisStore.for_key"]
    missing = [name for name in names if f'id="{name}"' not in reference]
    assert not missing, missing


def test_every_committed_plot_is_in_the_site_naming_its_run(site: Path) -> None:
    plots = committed("benchmarks/plots/*.png", "benchmarks/uncontended/*/plots/*.png")
    assert len(plots) >= 9
    images = {page: {(page.parent / src).resolve() for src in re.findall(r'<img [^>]*src="([^"]+)"', page.read_text())}
              for page in site.rglob("*.html")}
    for plot in plots:
        assert (site / plot).read_bytes() == (ROOT / plot).read_bytes(), plot
        run = plot.rsplit("/plots/", 1)[0] + "/RESULTS.md"
        shown = [page for page, sources in images.items() if (site / plot).resolve() in sources]
        assert shown, f"{plot} is on no page"
        for page in shown:
            assert f"from the run of {run}" in text_of(page), (plot, page)


def test_every_committed_run_is_brought_in_not_copied(site: Path) -> None:
    runs = committed("benchmarks/*RESULTS.md")
    assert len(runs) >= 15
    built = {page: text_of(page) for page in (site / "benchmarks").rglob("index.html")}
    sources = "".join(page.read_text() for page in PAGES)
    for run in runs:
        rows = [line for line in (ROOT / run).read_text().splitlines() if line.startswith("| ") and len(line) > 40]
        assert rows, run
        page = next((page for page, text in built.items() if f"This page is {run}, as committed" in text), None)
        assert page is not None, f"{run} is on no page"
        first = [cell.strip() for cell in rows[-1].strip("|").split("|")]
        assert all(html.unescape(re.sub(r"[`*]", "", cell)) in built[page] for cell in first if cell), (run, first)
        copied = [row for row in rows if row in sources]
        assert not copied, f"docs/ copies {run}: {copied[:2]}"


def chromium() -> str:
    """Debian's chromium (./run test installs it when root); under CI=true a missing one fails the test."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "no chromium on PATH: apt-get install chromium (./run test installs it when it runs as root)"
        if CI:
            pytest.fail(message)
        pytest.skip(message)
    return found


def browse(browser: str, page: Path, *args: str, profile: Path) -> str:
    """Runs headless Chromium on page with args; returns what it printed."""
    result = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             f"--user-data-dir={profile}", "--window-size=1280,1400", *args, page.as_uri()],
                            capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, the decompressed scanlines) of a PNG; fails on anything that is not one."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, width, height, compressed = 8, 0, 0, b""
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            compressed += body
        position += 12 + length
    return width, height, zlib.decompress(compressed)


@pytest.mark.parametrize(("page", "wanted"), [
    ("index.html", ["Where to start", "Getting started"]),
    ("reference/limiters/index.html", ["aiotb.Limiter", "acquire(amount: float = 1, timeout: float | None = None)"]),
], ids=["front page", "API reference"])
def test_chromium_renders_the_site(site: Path, tmp_path: Path, page: str, wanted: list[str]) -> None:
    browser = chromium()
    dom = browse(browser, site / page, "--dump-dom", profile=tmp_path / "profile")
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title and "aiotb" in title.group(1), title
    assert '<nav class="md-nav md-nav--primary"' in dom, "no navigation in the rendered page"
    navigation = {shown_text(link).strip() for link in re.findall(r'class="md-nav__link[^"]*"[^>]*>(.*?)</(?:a|label)>',
                                                                   dom, re.S)}
    for entry in ("Getting started", "Guides", "One event loop", "Hosts over Redis", "API reference", "Benchmarks"):
        assert entry in navigation, (entry, sorted(navigation))
    shown = shown_text(dom)
    for text in wanted:
        assert text in shown, text
    shot = tmp_path / "page.png"
    browse(browser, site / page, f"--screenshot={shot}", profile=tmp_path / "profile")
    width, height, pixels = png_pixels(shot.read_bytes())
    assert (width, height) == (1280, 1400)
    assert len(set(pixels)) > 16, "the screenshot is blank"
