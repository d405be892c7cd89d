"""The conformance rules as their chapters declare them (each
``@rule(side=..., source=..., where=...)`` check in
python/dlpack_ref/conformance/rules/chapters/), read as source, so that the
figures need no dlpack-ref installed: the checker's list of rules without
importing it, in its report order. The tests hold that both agree."""

from __future__ import annotations

import ast
from pathlib import Path

FOLDER = "python/dlpack_ref/conformance/rules"
_OWN = Path(__file__).resolve().parents[2] / FOLDER
_SIDES = ("producer", "consumer", "cuda")


def _literal(folder: Path, path: str, name: str):
    """The literal value of the module-level assignment ``name`` in ``folder/path``."""
    for node in ast.parse((folder / path).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise ValueError(f"{folder / path}: no {name} = ...")


def _declared(path: Path) -> list[dict]:
    """Each rule the chapter at ``path`` declares: id, side, text, source, where."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "rule":
                keywords = {k.arg: ast.literal_eval(k.value) for k in dec.keywords}
                found.append({"id": f"{keywords['side']}.{node.name}", "side": keywords["side"],
                              "text": " ".join((ast.get_docstring(node) or "").split()),
                              "source": keywords["source"], "where": keywords.get("where", ""),
                              "chapter": path.stem})
    return found


def declared(root: Path | None = None) -> list[dict]:
    """Every rule, in the checker's report order (side, then chapter as the
    chapters' ORDER reads them, then declaration), each with
    the text of its source (model.py's SOURCES): from ``root``'s files when
    it has them (another checkout), else this checkout's."""
    folder = root / FOLDER if root is not None and (root / FOLDER / "chapters").is_dir() else _OWN
    rules = [r for f in sorted((folder / "chapters").glob("[!_]*.py")) for r in _declared(f)]
    order = _literal(folder / "chapters", "__init__.py", "ORDER")
    sources = _literal(folder.parent, "model.py", "SOURCES")
    for r in rules:
        r["source_text"] = sources[r["source"]]

    def place(item):
        i, r = item
        chapter = order.index(r["chapter"]) if r["chapter"] in order else len(order)
        return _SIDES.index(r["side"]), chapter, r["chapter"], i
    return [r for _, r in sorted(enumerate(rules), key=place)]
