"""The known libraries as their files declare them (each file's ``KNOWN =
Known(...)`` in python/dlpack_ref/harness/libraries/), read as source, so
that the figures need no dlpack-ref installed: the registry's list without
importing it. The tests hold that both agree."""

from __future__ import annotations

import ast
from pathlib import Path

FOLDER = "python/dlpack_ref/harness/libraries"
_OWN = Path(__file__).resolve().parents[2] / FOLDER


def _declaration(path: Path) -> dict | None:
    """The keywords of the file's ``KNOWN = Known(name, ...)`` (name first), None without one."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["KNOWN"]
                and isinstance(node.value, ast.Call)):
            call = node.value
            declared = {"name": ast.literal_eval(call.args[0])}
            declared.update({k.arg: ast.literal_eval(k.value) for k in call.keywords})
            declared.setdefault("lane", "main")
            declared["requirements"] = list(declared.get("requirements") or [declared["distribution"]])
            return declared
    return None


def known(root: Path | None = None) -> list[dict]:
    """Each known library's declaration, in report order: from ``root``'s
    files when it has them (another checkout), else this checkout's."""
    folder = root / FOLDER if root is not None and (root / FOLDER).is_dir() else _OWN
    found = [d for f in sorted(folder.glob("[!_]*.py")) if (d := _declaration(f)) is not None]
    return sorted(found, key=lambda d: d["order"])


def names(lane: str | None = None, root: Path | None = None) -> list[str]:
    """The known names (those of one lane when given), in report order."""
    return [d["name"] for d in known(root) if lane is None or d["lane"] == lane]
