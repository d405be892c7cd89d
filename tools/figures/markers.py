"""The marker engine: the generated blocks and inline figures of a page,
each named by a figure of FIGURES and rendered from its result files."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

from figures import (checkout, libraries, render_adopters, render_adoption, render_copies, render_ecosystem,
                     render_exchange, render_libraries, render_pool, render_reproductions, render_rules,
                     rules)
from figures.checkout import FILES, NoData, Source, kind, pages, source


# The markers of a block and of an inline figure, written here once: the
# patterns that find them and the writer that rewrites them are made of these.
BLOCK_MARKS = ("<!-- figures: {spec} -->\n", "<!-- end figures -->")
INLINE_MARKS = ("<!-- figure: {spec} -->", "<!-- end figure -->")


def _opening(marks: tuple[str, str]) -> str:
    return re.escape(marks[0]).replace(re.escape("{spec}"), "(?P<spec>[^>]*?)")


# A block's markers each start a line; an inline figure's are not in a code span.
# Markers inside fenced code (an example of them) are not figures.
BLOCK = re.compile(f"^{_opening(BLOCK_MARKS)}(?P<body>.*?)^{re.escape(BLOCK_MARKS[1])}", re.S | re.M)
INLINE = re.compile(f"(?<!`){_opening(INLINE_MARKS)}(?P<body>[^\n]*?){re.escape(INLINE_MARKS[1])}(?!`)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def in_fence(text: str, pos: int) -> bool:
    return any(m.start() <= pos < m.end() for m in FENCE.finditer(text))


FIGURES: dict[str, tuple[str, Callable[[list[Source], list[str]], str]]] = {
    # name: (the file kind it reads, renderer)
    "exchange-run": ("exchange", render_exchange.exchange_run),
    "latency": ("exchange", render_exchange.exchange_latency),
    "standings": ("exchange", render_exchange.exchange_standings),
    "producers": ("exchange", render_exchange.exchange_producers),
    "copies": ("exchange", render_exchange.exchange_copies),
    "instructions": ("exchange", render_exchange.exchange_instructions),
    "producer-instructions": ("exchange", render_exchange.exchange_producer_instructions),
    "instruction-standings": ("exchange", render_exchange.exchange_instruction_standings),
    "copies-run": ("copies", render_copies.copies_run),
    "targets": ("copies", render_copies.copies_targets),
    "copy-instructions-run": ("copies_instructions", render_copies.copies_instructions_run),
    "copy-instructions": ("copies_instructions", render_copies.copies_instructions),
    "pool-run": ("pool_threshold", render_pool.pool_run),
    "pool-table": ("pool_threshold", render_pool.pool_table),
    "pool-threshold": ("pool_threshold", render_pool.pool_threshold),
    "adopter-run": ("callgrind_adopter", render_adopters.adopter_run),
    "adopter-table": ("callgrind_adopter", render_adopters.adopter_table),
    "adoption-producer-run": ("adoption_producer", render_adoption.adoption_producer_run),
    "adoption-producer-table": ("adoption_producer", render_adoption.adoption_producer_table),
    "adoption-mpi4py-run": ("adoption_mpi4py", render_adoption.adoption_mpi4py_run),
    "adoption-mpi4py-table": ("adoption_mpi4py", render_adoption.adoption_mpi4py_table),
    "ecosystem-summary": ("ecosystem", render_ecosystem.ecosystem_summary),
    "ecosystem-rules": ("ecosystem", render_ecosystem.ecosystem_rules),
    "ecosystem-exchange": ("ecosystem", render_ecosystem.ecosystem_exchange),
    "summary-line": ("ecosystem", render_ecosystem.ecosystem_summary_line),
    "reproduction-sizes": ("reproduction_sizes", render_reproductions.reproduction_sizes),
    # from the library files (libraries.FOLDER), not a result file
    "known-libraries": ("libraries", render_libraries.known_libraries),
    # from the rules' declarations (rules.FOLDER), not a result file
    "rules-checked": ("rules", render_rules.rules_checked),
}


@dataclasses.dataclass
class Block:
    page: str
    line: int
    spec: str
    name: str
    args: list[str]
    sources: list[Source]
    inline: bool
    body: str           # as the page has it
    rendered: str = ""  # as the files give it
    no_data: str | None = None


def parse_spec(spec: str) -> tuple[str, list[str], list[str]]:
    """``NAME [ARG ...] from FILE[, FILE ...]`` -> (name, args, files)."""
    head, sep, files = spec.partition(" from ")
    if not sep:
        raise ValueError(f"no 'from FILE' in the marker: {spec!r}")
    name, *args = head.split()
    paths = [f.strip() for f in files.split(",") if f.strip()]
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r} (known: {', '.join(FIGURES)})")
    for path in paths:
        if path not in FILES and path not in (libraries.FOLDER, rules.FOLDER):
            raise ValueError(f"{path}: not a result file this script knows (known: {', '.join(FILES)}, "
                             f"{libraries.FOLDER} or {rules.FOLDER})")
        if kind(path) != FIGURES[name][0]:
            raise ValueError(f"figure {name!r} is not made from {path}")
    return name, args, paths


def render_block(block: Block) -> None:
    _, fn = FIGURES[block.name]
    try:
        text = fn(block.sources, block.args).strip("\n")
        block.no_data = None
    except NoData as e:
        block.no_data = str(e)
        commands = "; ".join(f"`{s.command}`" for s in block.sources)
        text = (f"(no figure: {e})" if block.inline else
                f"*No figures here yet: {e}. {commands} makes them (see [contributing](contributing.md)).*")
    block.rendered = text if block.inline else "\n" + text + "\n\n"


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for pattern, inline in ((BLOCK, False), (INLINE, True)):
        for m in pattern.finditer(text):
            if in_fence(text, m.start()):
                continue
            line = text.count("\n", 0, m.start()) + 1
            try:
                if inline and (m.start() == 0 or text[m.start() - 1] == "\n"):
                    # Markdown reads a line that starts with "<!--" as raw HTML, figure and all
                    raise ValueError("an inline figure's marker must not start a line: put a word before it")
                name, args, paths = parse_spec(m.group("spec"))
            except ValueError as e:
                raise SystemExit(f"{page.relative_to(checkout.ROOT)}:{line}: {e}") from None
            block = Block(str(page.relative_to(checkout.ROOT)), line, m.group("spec"), name, args,
                          [source(p) for p in paths], inline, m.group("body"))
            render_block(block)
            found.append(block)
    return sorted(found, key=lambda b: b.line)


def regenerate(page: Path) -> str:
    """The page with every block rewritten from its files."""
    def sub(inline):
        def replace(m):
            if in_fence(m.string, m.start()):
                return m.group(0)
            name, args, paths = parse_spec(m.group("spec"))
            block = Block("", 0, m.group("spec"), name, args, [source(p) for p in paths], inline, "")
            render_block(block)
            opening, end = INLINE_MARKS if inline else BLOCK_MARKS
            return opening.format(spec=m.group("spec")) + block.rendered + end
        return replace
    text = page.read_text(encoding="utf-8")
    text = BLOCK.sub(sub(False), text)
    return INLINE.sub(sub(True), text)


def citations() -> dict[str, list[Block]]:
    """result file -> the blocks of the pages that cite it."""
    used: dict[str, list[Block]] = {}
    for page in pages():
        if page.name == "changelog.md":
            continue
        for b in blocks_of(page):
            for s in b.sources:
                used.setdefault(s.path, []).append(b)
    return used
