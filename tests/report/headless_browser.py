"""A real headless browser for the report tests: Debian's ``chromium``.

``scripts/test.sh`` installs it when it runs as root on Debian. Without it the browser tests
skip saying why; under ``CI=true`` they fail, because CI must prove the page renders.

Each page is loaded once with ``--dump-dom`` (the DOM after the page's script ran) and
``--enable-logging=stderr --v=0``, which copies every console message and uncaught exception
to stderr as a ``CONSOLE`` line. The report's script writes nothing to the console, so any such
line is an error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser")
CONSOLE = re.compile(r":CONSOLE[:(\]]")


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    ancestors: list[Element] = field(default_factory=list, repr=False)
    text: str = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


@dataclass
class Page:
    """A rendered page: the DOM as a flat list of elements (text gathered per element, its
    children's included) and the console lines the browser logged."""

    dom: str
    console: list[str]
    elements: list[Element] = field(default_factory=list)

    def select(
        self, tag: str, cls: str | None = None, inside: str | None = None, **attrs: str
    ) -> list[Element]:
        """Elements by tag, class, attributes and, with ``inside``, an ancestor's id."""
        return [
            e
            for e in self.elements
            if e.tag == tag
            and (cls is None or cls in e.classes)
            and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
            and (inside is None or any(a.attrs.get("id") == inside for a in e.ancestors))
        ]


class _Collector(HTMLParser):
    VOID = frozenset({"meta", "link", "br", "img", "input", "hr", "col", "source", "wbr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.open: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, list(self.open))
        self.elements.append(element)
        if tag not in self.VOID:
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}, list(self.open)))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.open) - 1, -1, -1):
            if self.open[i].tag == tag:
                del self.open[i:]
                break

    def handle_data(self, data: str) -> None:
        for element in self.open:
            element.text += data


def find_browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    reason = "no chromium (Debian package 'chromium'; scripts/test.sh installs it when run as root)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason + " and CI=true: the report must be checked in a real browser")
    pytest.skip(reason)


class Browser:
    def __init__(self, binary: str, profile: Path) -> None:
        self.binary = binary
        self.profile = profile

    def command(self, *args: str) -> list[str]:
        return [
            self.binary,
            "--headless",
            "--no-sandbox",  # root in containers and CI
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={self.profile}",
            *args,
        ]

    def load(self, page: Path, fragment: str = "") -> Page:
        """Render ``page`` (a file) and return its DOM and console lines."""
        url = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
        done = subprocess.run(
            self.command("--enable-logging=stderr", "--v=0", "--dump-dom", url),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        collector = _Collector()
        collector.feed(done.stdout)
        console = [line for line in done.stderr.splitlines() if CONSOLE.search(line)]
        return Page(done.stdout, console, collector.elements)

    def screenshot(self, page: Path, out: Path, width: int = 1280, height: int = 900) -> None:
        subprocess.run(
            self.command(f"--screenshot={out}", f"--window-size={width},{height}", page.as_uri()),
            capture_output=True,
            timeout=60,
            check=True,
        )
