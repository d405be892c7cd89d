"""Self-contained Python from the definitions the checker runs.

A reproduction must run with the library alone, and it must be the code the
checker ran, not a second text of it. :func:`bundle` writes that code: it
takes the definitions a snippet calls (functions, classes, constants of
``dlpack_ref``'s pure-Python modules), follows every name they use to its
definition, and prints each needed definition once, as it stands in its
module, with the standard-library imports they need. A constant whose value
comes from the compiled core (a flag bit, a capsule name) is written as its
value. A name that leads anywhere else (another package, the core's
functions) is an error: such a definition cannot run without dlpack-ref, so
it cannot be in a reproduction.

Definitions keep their names, so two modules whose needed definitions share
a name cannot be bundled together (:class:`BundleError` says which).
Decorators named ``rule`` (the rule tables' registration) are left out.

A bundle follows names to whole definitions: a class comes with all its
methods. :func:`prune` then cuts it to what the code run after it reaches,
method by method, so that a reproduction carries only what its rule uses.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import importlib
import io
import sys
import textwrap
import tokenize
from typing import Iterable

__all__ = ["BundleError", "bundle", "definition_source", "prune"]

#: Decorators that only register a definition in a table of the checker.
_REGISTRATIONS = frozenset({"rule"})
_BUILTINS = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__"}
_LITERALS = (int, float, complex, str, bytes, bool, type(None))


class BundleError(Exception):
    """A definition cannot be written out self-contained."""


def _stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names or module == "__future__"


def _bundled(module: str) -> bool:
    """Modules whose definitions are copied: dlpack_ref's pure-Python ones."""
    if module.split(".")[0] != "dlpack_ref":
        return False
    try:
        origin = importlib.util.find_spec(module).origin or ""
    except (ImportError, ValueError, AttributeError):
        return False
    return origin.endswith(".py")


def _frozen(value) -> bool:
    if isinstance(value, _LITERALS):
        return True
    if isinstance(value, (tuple, list, frozenset, set)):
        return all(_frozen(v) for v in value)
    if isinstance(value, dict):
        return all(_frozen(k) and _frozen(v) for k, v in value.items())
    return False


def _bound_in(node: ast.AST) -> set[str]:
    """Names a definition binds inside itself (arguments, assignments,
    imports, nested definitions, comprehension targets)."""
    bound = set()
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            bound.add(n.name)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
    return bound


def _used_in(node: ast.AST) -> set[str]:
    """The global names a top-level statement reads (annotations left out:
    the bundle starts with ``from __future__ import annotations``)."""
    skip = set()
    for d in getattr(node, "decorator_list", []):
        if _registration(d):
            skip |= {id(x) for x in ast.walk(d)}
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs + [n.args.vararg, n.args.kwarg]:
                if a is not None and a.annotation is not None:
                    skip |= {id(x) for x in ast.walk(a.annotation)}
            if n.returns is not None:
                skip |= {id(x) for x in ast.walk(n.returns)}
        elif isinstance(n, ast.AnnAssign):
            skip |= {id(x) for x in ast.walk(n.annotation)}
    loads = {n.id for n in ast.walk(node)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in skip}
    inner = _bound_in(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else set()
    if isinstance(node, ast.ClassDef):  # the class body's own names are not globals of its methods
        inner |= {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return loads - inner


class _Module:
    """One module's top-level definitions, by name."""

    def __init__(self, name: str):
        self.name = name
        self.module = importlib.import_module(name)
        spec = importlib.util.find_spec(name)
        with open(spec.origin, encoding="utf-8") as f:
            self.text = f.read()
        self.tree = ast.parse(self.text)
        self.package = name if spec.submodule_search_locations else name.rpartition(".")[0]
        self.statements: dict[str, list[ast.stmt]] = {}   # name -> the statements that define it
        self.order: dict[int, int] = {}                    # id(statement) -> position
        self.imports: dict[str, tuple[str, str | None]] = {}  # local name -> (module, attribute or None)
        self._uses: dict[int, set[str]] = {}                  # id(statement) -> the global names it reads
        for position, node in enumerate(self.tree.body):
            self.order[id(node)] = position
            if isinstance(node, ast.Import):
                for a in node.names:
                    local = a.asname or a.name.split(".")[0]
                    self.imports[local] = (a.name if a.asname else a.name.split(".")[0], None)
            elif isinstance(node, ast.ImportFrom):
                source = self._absolute(node)
                for a in node.names:
                    self.imports[a.asname or a.name] = (source, a.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.statements.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for name in {n for t in targets for n in _assigned(t)}:
                    self.statements.setdefault(name, []).append(node)
            elif isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant):
                # a call at import time (os.register_at_fork(...)): kept with the first
                # name of this module it uses
                for n in ast.walk(node):
                    if isinstance(n, ast.Name) and n.id in self.statements:
                        self.statements[n.id].append(node)
                        break

    def uses(self, node: ast.stmt) -> set[str]:
        """:func:`_used_in` of one of this module's statements, found once."""
        if id(node) not in self._uses:
            self._uses[id(node)] = _used_in(node)
        return self._uses[id(node)]

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = self.package
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        return f"{base}.{node.module}" if node.module else base

    def source(self, node: ast.stmt) -> str:
        """The statement as written, with the comment lines right above it
        and without registration decorators."""
        lines = self.text.splitlines()
        decorators = getattr(node, "decorator_list", [])
        first = min([d.lineno for d in decorators] + [node.lineno]) - 1
        comments = []
        while first - len(comments) - 1 >= 0 and lines[first - len(comments) - 1].lstrip().startswith("#"):
            comments.insert(0, lines[first - len(comments) - 1])
        kept = ["@" + ast.get_source_segment(self.text, d) for d in decorators if not _registration(d)]
        body = lines[node.lineno - 1:node.end_lineno]
        for start, end, only in sorted(_docstrings(node), reverse=True):
            first, last = start - node.lineno, end - node.lineno
            indent = body[first][:len(body[first]) - len(body[first].lstrip())]
            body[first:last + 1] = [indent + "pass"] if only else []
        return textwrap.dedent("\n".join(comments + kept + body))


def _docstrings(node: ast.AST) -> list[tuple[int, int, bool]]:
    """(first line, last line, whether it is the whole body) of the
    docstring of every function and class in ``node``: a reproduction
    carries code, its reader has the rule's text."""
    found = []
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                found.append((first.lineno, first.end_lineno, len(n.body) == 1))
    return found


def _assigned(target: ast.expr) -> list[str]:
    """The names an assignment target defines: ``X`` and ``X, Y``; for
    ``X.attr = ...`` or ``X[k] = ...``, X (a part of X's definition)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for element in target.elts for n in _assigned(element)]
    while isinstance(target, (ast.Attribute, ast.Subscript, ast.Starred)):
        target = target.value
    return [target.id] if isinstance(target, ast.Name) else []


def _registration(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name in _REGISTRATIONS


@functools.lru_cache(maxsize=None)
def _module(name: str) -> _Module:
    return _Module(name)


class _Bundle:
    def __init__(self):
        self.needed: dict[tuple[str, str], None] = {}   # (module, name), in discovery order
        self.frozen: dict[tuple[str, str], object] = {}
        self.stdlib: set[str] = set()
        self.owner: dict[str, str] = {}                 # name -> the module whose definition it is

    def want(self, module: str, name: str, why: str) -> None:
        if (module, name) in self.needed or (module, name) in self.frozen:
            return
        m = _module(module)
        if name in m.imports:
            self.follow(m, name, why)
            return
        if name not in m.statements:
            raise BundleError(f"{why}: {name!r} is not defined in {module}")
        owner = self.owner.setdefault(name, module)
        if owner != module:
            raise BundleError(f"{name!r} is defined in both {owner} and {module}, and both are needed")
        statements = m.statements[name]
        uses = set().union(*(m.uses(s) for s in statements)) - {name}
        if all(isinstance(s, (ast.Assign, ast.AnnAssign)) for s in statements) and not self._resolvable(m, uses):
            value = getattr(m.module, name)
            if not _frozen(value):
                raise BundleError(f"{module}.{name} is computed from code outside the bundle and is not a "
                                  f"literal value ({type(value).__name__})")
            self.frozen[(module, name)] = value
            return
        self.needed[(module, name)] = None
        for used in sorted(uses):
            self.resolve(m, used, f"{module}.{name}")

    def _resolvable(self, m: _Module, names: Iterable[str]) -> bool:
        for n in names:
            if n in _BUILTINS or n in m.statements:
                continue
            source = m.imports.get(n)
            if source is None:
                return False
            module, attribute = source
            if _stdlib(module):
                continue
            if attribute is None or _is_module(f"{module}.{attribute}") or not _bundled(module):
                return False
        return True

    def resolve(self, m: _Module, name: str, why: str) -> None:
        if name in m.statements:
            self.want(m.name, name, why)
        elif name in m.imports:
            self.follow(m, name, why)
        elif name not in _BUILTINS:
            raise BundleError(f"{why} uses {name!r}, which {m.name} neither defines nor imports")

    def follow(self, m: _Module, local: str, why: str) -> None:
        source, attribute = m.imports[local]
        if _stdlib(source):
            if source == "__future__":
                return
            if attribute is None:
                self.stdlib.add(f"import {source}" if local == source else f"import {source} as {local}")
            else:
                alias = "" if local == attribute else f" as {local}"
                self.stdlib.add(f"from {source} import {attribute}{alias}")
            return
        if attribute is not None and _bundled(source) and not _is_module(f"{source}.{attribute}"):
            if local != attribute:
                raise BundleError(f"{m.name} imports {attribute} as {local}: a bundled name keeps its name")
            self.want(source, attribute, why)
            return
        raise BundleError(f"{why} uses {local!r} from {source}, which a reproduction cannot import")

    def text(self, last: list[tuple[str, str]]) -> str:
        """The bundle: the imports, the frozen constants, every needed
        definition in module order, and the functions of ``last`` at the end
        (they run only when called, so they may come after what they use)."""
        modules = list(dict.fromkeys(module for module, _ in list(self.frozen) + list(self.needed)))
        blocks = ["from __future__ import annotations", "\n".join(sorted(self.stdlib))]
        blocks += [f"{name} = {value!r}" for (module, name), value in self.frozen.items()]
        for module in _by_dependency(modules, self):
            m = _module(module)
            statements = {id(s): s for (mod, name) in self.needed if mod == module and (mod, name) not in last
                          for s in m.statements[name]}
            blocks += [m.source(node) for node in sorted(statements.values(), key=lambda s: m.order[id(s)])]
        blocks.append(_LAST_HEADING)
        blocks += [_module(module).source(s) for module, name in last for s in _module(module).statements[name]]
        return "\n\n\n".join(b for b in blocks if b) + "\n"


_LAST_HEADING = "# --- what the checker ran, as it ran: the rule's check and the library's adapter ---"


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def _by_dependency(modules: list[str], b: _Bundle) -> list[str]:
    """Modules ordered so that one comes after those it imports definitions from."""
    deps = {m: {b.owner.get(local) for local in _module(m).imports if b.owner.get(local) not in (None, m)}
            for m in modules}
    done: list[str] = []

    def visit(m, stack=()):
        if m in done or m in stack:
            return
        for d in sorted(x for x in deps.get(m, ()) if x in deps):
            visit(d, stack + (m,))
        done.append(m)

    for m in modules:
        visit(m)
    return done


def bundle(*definitions, last=()) -> str:
    """The source of ``definitions`` (functions or classes of dlpack_ref's
    pure-Python modules) and of everything they use, self-contained; the
    functions in ``last`` (among ``definitions``) come at its end, under a
    heading, where a reader looks first.

    Raises
    ------
    BundleError
        When a definition uses something that cannot be written out.
    """
    b = _Bundle()
    last = [(d.__module__, d.__name__) for d in last]
    for d in definitions:
        b.want(d.__module__, d.__name__, f"{d.__module__}.{d.__name__}")
    return b.text(last)


def definition_source(definition) -> str:
    """The source of one definition as :func:`bundle` writes it."""
    m = _module(definition.__module__)
    return "\n\n\n".join(m.source(s) for s in m.statements[definition.__name__])


def prune(source: str, roots: str, made_here: bool = False) -> str:
    """``source`` (a bundle) cut to what ``roots``, the code run after it,
    reaches: the definitions its names lead to, transitively, and of each
    class kept, its dunder methods and the methods (and properties) whose
    name some kept code uses as an attribute. An attribute read on ``self``
    (or ``super()``) in a method leads only to the methods of that class's
    family (its bases and subclasses in the bundle); one read on anything
    else, to every class's.

    With ``made_here`` (every object of the bundle's classes is made by
    the bundle's own code, as a known library's adapter makes its
    subjects), a field that every construction of a dataclass gives (a
    function or a literal, never None), or that none gives and whose
    default is None (or another false literal), settles the method
    statements that test it: ``if self.field is None:`` (``is not None:``,
    ``if self.field:``) without ``else``. Such a statement, the fallback of
    an option the adapter does or does not give, is cut with what only it
    reaches. A field that any code assigns is not settled.

    A keyword-only argument whose default is a literal, and that no kept
    code gives (no call names it, no string of the kept code spells it, so
    no dict passed with ``**`` holds it), settles the statements of its
    function that test it (``if option:``, ``if not option:``, ``if option
    is None:``, ``if option and ...:``) without ``else``: one its default
    rules out is cut with what only it reaches, so that a helper called
    for an option carries only the options its rule gives.

    Every kept statement stays as written, with the comments above it; the
    definitions the bundle pulled in (those before its heading of what the
    checker ran) lose their comment lines, which explain them in
    dlpack-ref, not the failure. One blank line parts definitions, none
    parts one-line constants and imports.

    A method reached only through ``getattr`` with a name that is not a
    literal is not seen: bundled code does that only on other packages'
    objects and for protocol methods (``__dlpack_device__``), which, as
    dunders, are always kept.
    """
    tree = ast.parse(source)
    root = ast.parse(roots)
    reach = _Reach(tree.body, source.splitlines(), made_here)
    reach.add(_used_in(root), _attributes(root))
    # Again with the keywords what was reached gives, until they settle:
    # each pass keeps part of what the one before it kept, so every keyword
    # the code gives when it runs is among those of every pass.
    given = None
    while given != (given := _keywords_given(reach, root)):
        reach = _Reach(tree.body, source.splitlines(), made_here, given)
        reach.add(_used_in(root), _attributes(root))
    return _pruned_text(source, tree.body, reach)


def _keywords_given(reach: "_Reach", root: ast.AST) -> set[str]:
    """The keyword names the code ``reach`` kept and ``root`` could give a
    call: the keywords of its calls and its strings (a dict's keys), but
    for a key read and a ctypes struct's field names."""
    parts: list[ast.AST] = [root]
    for i in reach.kept:
        node = reach.body[i]
        if isinstance(node, ast.ClassDef):
            parts += [s for s in node.body if not _is_method(s) or s.name in reach.methods[i]]
            parts += [*node.bases, *node.keywords, *node.decorator_list]
        else:
            parts.append(node)
    given, reads = set(), set()
    for part in parts:
        for n in ast.walk(part):
            if isinstance(n, ast.keyword) and n.arg is not None:
                given.add(n.arg)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in reads:
                given.add(n.value)
            # a key read (d["k"], d.get("k")) and a ctypes struct's field names give no keyword
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load):
                reads.add(id(n.slice))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args:
                reads.add(id(n.args[0]))
            elif isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["_fields_"]:
                reads |= {id(c) for c in ast.walk(n.value)}
    return given


def _attributes(node: ast.AST, skip: frozenset = frozenset()) -> set[str]:
    """The attribute names ``node`` reads or writes: ``x.name``, and the
    literal names of ``getattr``, ``hasattr``, ``setattr``, ``delattr``;
    those of the Attribute nodes whose id is in ``skip`` left out."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and id(n) not in skip:
            found.add(n.attr)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(n.args) >= 2
              and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)):
            found.add(n.args[1].value)
    return found


def _on_self(method: ast.FunctionDef) -> list[ast.Attribute]:
    """The attribute nodes of ``method`` read on its instance: ``self.x``
    and ``super().x`` (``self`` being its first argument, unless it is a
    static method)."""
    statics = {getattr(d, "id", None) for d in method.decorator_list}
    args = method.args.posonlyargs + method.args.args
    own = args[0].arg if args and "staticmethod" not in statics else None
    return [n for n in ast.walk(method) if isinstance(n, ast.Attribute) and (
        (isinstance(n.value, ast.Name) and n.value.id == own)
        or (isinstance(n.value, ast.Call) and getattr(n.value.func, "id", None) == "super"))]


def _defined_by(node: ast.stmt) -> set[str]:
    """The top-level names a bundle's statement defines (imports included)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n for t in targets for n in _assigned(t)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def _is_method(node: ast.stmt) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


#: What a statement uses, found once per text (reproductions share most
#: definitions): (global names, attributes read on anything, attributes
#: read on its own instance, for a method).
_FACTS: dict[tuple[str, bool], tuple[set[str], set[str], set[str]]] = {}


class _Reach:
    """The statements (by position) and methods (by class position and
    name) that the names and attributes added so far lead to."""

    def __init__(self, body: list[ast.stmt], lines: list[str], made_here: bool = False,
                 given: set[str] | None = None):
        self.body, self.lines = body, lines
        self.given = given   # the keywords kept code gives; None: any
        self.by_name: dict[str, list[int]] = {}
        for i, node in enumerate(body):
            names = _defined_by(node)
            if isinstance(node, ast.Expr):  # a call at import time goes with the definitions it uses
                names = _used_in(node)
            for name in names:
                self.by_name.setdefault(name, []).append(i)
        self.family = _families(body)
        self.kept: set[int] = set()
        self.methods: dict[int, set[str]] = {}   # class position -> kept method names
        self.names: set[str] = set()
        self.attributes: set[str] = set()
        self.on_self: dict[int, set[str]] = {i: set() for i in self.family}   # class -> attributes read on self
        self.settled = {i: _settled_fields(body, body[i]) for i in self.family} if made_here else {}
        for i in self.family if given is not None else ():
            for field, how in _unasked_fields(body, body[i], given).items():
                self.settled.setdefault(i, {}).setdefault(field, how)
        self.cut: set[int] = set()   # the lines of the statements that settled fields cut

    def add(self, names: set[str], attributes: set[str], on_self: tuple[int, set[str]] | None = None) -> None:
        pending = [(names, attributes, on_self)]
        while pending:
            names, attributes, on_self = pending.pop()
            fresh_attributes = attributes - self.attributes
            self.attributes |= attributes
            for name in names - self.names:
                self.names.add(name)
                for i in self.by_name.get(name, ()):
                    if i not in self.kept:
                        self.kept.add(i)
                        pending += self._statement(i)
            for i in self.methods if fresh_attributes else ():
                pending += self._methods(i, fresh_attributes)
            if on_self:
                cls, wanted = on_self
                for i in self.family[cls]:
                    self.on_self[i] |= wanted
                    if i in self.methods:
                        pending += self._methods(i, wanted)

    def _statement(self, i: int) -> list:
        """What statement ``i`` uses; of a class, what its body outside
        methods and the methods wanted so far use."""
        node = self.body[i]
        if not isinstance(node, ast.ClassDef):
            dead = _unasked_out(node, self.given)
            if dead:
                return [(*self._cut(node, dead)[:2], None)]
            names, attributes, _ = self._facts(node)
            return [(names, attributes, None)]
        self.methods[i] = set()
        names, attributes = set(), set()
        for part in [*node.bases, *node.keywords, *node.decorator_list,
                     *(s for s in node.body if not _is_method(s))]:
            if not (part in node.decorator_list and _registration(part)):
                names |= {n.id for n in ast.walk(part) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                attributes |= _attributes(part)
        wanted = {s.name for s in node.body if _is_method(s) and _dunder(s.name)} | self.on_self[i] | self.attributes
        return [(names, attributes, None), *self._methods(i, wanted)]

    def _facts(self, node: ast.stmt, method: bool = False) -> tuple[set[str], set[str], set[str]]:
        text = "\n".join(self.lines[b.lineno - 1] for b in getattr(node, "body", ())) + "\n" + \
            "\n".join(self.lines[_first_line(node) - 1:node.end_lineno])
        if (text, method) not in _FACTS:
            own = _on_self(node) if method else []
            _FACTS[text, method] = (_used_in(node), _attributes(node, frozenset(map(id, own))),
                                    {n.attr for n in own})
        return _FACTS[text, method]

    def _methods(self, i: int, wanted: set[str]) -> list:
        """Keep the methods of class ``i`` named in ``wanted``; what they use."""
        found = []
        for s in self.body[i].body:
            if _is_method(s) and s.name in wanted and s.name not in self.methods[i]:
                self.methods[i].add(s.name)
                dead = _settled_out(s, self.settled.get(i, {})) + _unasked_out(s, self.given)
                names, attributes, own = self._cut(s, dead, method=True) if dead else self._facts(s, method=True)
                found.append((names, attributes, (i, own)))
        return found

    def _cut(self, node: ast.stmt, dead: list[ast.stmt], method: bool = False):
        """:meth:`_facts` of ``node`` without its statements ``dead``, whose lines are cut."""
        node = copy.copy(node)
        node.body = [b for b in node.body if b not in dead]
        self.cut |= {n for b in dead for n in range(_first_line(b), b.end_lineno + 1)}
        own = _on_self(node) if method else []
        return _used_in(node), _attributes(node, frozenset(map(id, own))), {n.attr for n in own}


def _families(body: list[ast.stmt]) -> dict[int, set[int]]:
    """Each class's family (by position): the classes of the bundle joined
    to it through bases, either way, itself included."""
    classes = {node.name: i for i, node in enumerate(body) if isinstance(node, ast.ClassDef)}
    family = {i: {i} for i in classes.values()}
    for i in classes.values():
        for base in body[i].bases:
            j = classes.get(getattr(base, "id", None))
            if j is not None and j != i:
                joined = family[i] | family[j]
                for k in joined:
                    family[k] = joined
    return family


def _settled_fields(body: list[ast.stmt], cls: ast.ClassDef) -> dict[str, str]:
    """The fields of dataclass ``cls`` that every construction in ``body``
    settles: ``given``, as a function or a literal other than None;
    ``none``, never given, with the default None; ``false``, never given,
    with another false literal as default. Only where ``cls`` is named
    nowhere but in calls that make it, and no code assigns the field."""
    fields = {s.target.id: s.value for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    if not fields or not any("dataclass" in ast.unparse(d) for d in cls.decorator_list):
        return {}
    calls = [n for node in body for n in ast.walk(node)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == cls.name]
    named = [n for node in body for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == cls.name]
    if not calls or len(named) != len(calls) or any(
            isinstance(a, ast.Starred) for c in calls for a in c.args) or any(k.arg is None for c in calls
                                                                              for k in c.keywords):
        return {}
    stored = {n.attr for node in body for n in ast.walk(node)
              if isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Load)}
    if any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) in ("setattr", "replace")
           for node in body for n in ast.walk(node)):
        return {}
    functions = {n.name for node in body for n in ast.walk(node)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    declared = {id(s.target) for node in body for n in ast.walk(node) if isinstance(n, ast.ClassDef)
                for s in n.body if isinstance(s, ast.AnnAssign)}   # a field's declaration binds no function
    rebound = {n.id for node in body for n in ast.walk(node)
               if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) and id(n) not in declared}
    rebound |= {n.arg for node in body for n in ast.walk(node) if isinstance(n, ast.arg)}
    order = list(fields)

    def given(call: ast.Call, field: str):
        if order.index(field) < len(call.args):
            return call.args[order.index(field)]
        return next((k.value for k in call.keywords if k.arg == field), None)

    def never_none(value: ast.expr) -> bool:
        return (isinstance(value, ast.Lambda) or (isinstance(value, ast.Constant) and value.value is not None)
                or (isinstance(value, ast.Name) and value.id in functions and value.id not in rebound))

    settled = {}
    for field, default in fields.items():
        values = [given(c, field) for c in calls]
        if field in stored:
            continue
        if all(v is not None and never_none(v) for v in values):
            settled[field] = "given"
        elif all(v is None for v in values) and isinstance(default, ast.Constant) and not default.value:
            settled[field] = "none" if default.value is None else "false"
    return settled


def _unasked_fields(body: list[ast.stmt], cls: ast.ClassDef, given: set[str]) -> dict[str, str]:
    """The attributes of ``cls`` that its ``__init__`` sets from a keyword-only
    argument of the same name (``self.x = x``), whose default is None
    (``none``) or another false literal (``false``), that no kept code gives
    (``given``) and that nothing else in ``body`` assigns: settled as
    :func:`_settled_fields` settles a dataclass's fields."""
    init = next((s for s in cls.body if _is_method(s) and s.name == "__init__"), None)
    if init is None or not init.args.args:
        return {}
    own = init.args.args[0].arg
    stored: dict[str, int] = {}
    for node in body:
        for n in ast.walk(node):
            if isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Load):
                stored[n.attr] = stored.get(n.attr, 0) + 1
    rebound = {n.id for n in ast.walk(init) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    copied = {s.value.id for s in init.body if isinstance(s, ast.Assign) and len(s.targets) == 1
              and isinstance(s.value, ast.Name) and isinstance(s.targets[0], ast.Attribute)
              and getattr(s.targets[0].value, "id", None) == own and s.targets[0].attr == s.value.id}
    fields = {}
    for argument, default in zip(init.args.kwonlyargs, init.args.kw_defaults):
        name = argument.arg
        if default is None or name in given or name in rebound or name not in copied or stored.get(name) != 1:
            continue
        try:
            value = ast.literal_eval(default)
        except ValueError:
            continue
        if not value:
            fields[name] = "none" if value is None else "false"
    return fields


def _settled_out(method: ast.stmt, settled: dict[str, str]) -> list[ast.stmt]:
    """The statements of ``method``'s body that ``settled`` fields rule
    out: ``if self.f is None:`` for a field always given, ``if self.f is
    not None:`` and ``if self.f:`` for one never given, without ``else``;
    the last statement stays."""
    args = method.args.posonlyargs + method.args.args if _is_method(method) else []
    if not settled or not args:
        return []
    own = args[0].arg

    def on_self(node) -> str | None:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == own:
            return settled.get(node.attr)
        return None

    def dead(test: ast.expr) -> bool:
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant) \
                and test.comparators[0].value is None:
            return on_self(test.left) == ("given" if isinstance(test.ops[0], ast.Is) else "none")
        return on_self(test) in ("none", "false")

    return [s for s in method.body[:-1] if isinstance(s, ast.If) and not s.orelse and dead(s.test)]


def _unasked_out(function: ast.stmt, given: set[str] | None) -> list[ast.stmt]:
    """The statements of ``function``'s body that the defaults of its
    keyword-only arguments rule out, for the arguments not in ``given`` (and
    never assigned in it): an ``if`` without ``else`` whose test is false
    with those values. The last statement stays. A protocol's method
    (``__dlpack__``) is left whole: the library calls it, not the bundle."""
    if given is None or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
            _dunder(function.name) and function.name != "__init__"):
        return []
    stored = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    values = {}
    for argument, default in zip(function.args.kwonlyargs, function.args.kw_defaults):
        if default is None or argument.arg in given or argument.arg in stored:
            continue
        try:
            values[argument.arg] = ast.literal_eval(default)
        except ValueError:
            continue
    if not values:
        return []
    return [s for s in function.body[:-1]
            if isinstance(s, ast.If) and not s.orelse and _truth(s.test, values) is False]


_UNKNOWN = object()


def _known(node: ast.expr, values: dict):
    """The value of a literal or of a name in ``values``; _UNKNOWN otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in values:
        return values[node.id]
    return _UNKNOWN


def _truth(test: ast.expr, values: dict) -> bool | None:
    """Whether ``test`` holds, with the names of ``values`` bound to them;
    None when that does not decide it. Only what is evaluated first decides
    an ``and`` false, so no call a test would make is left out."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _truth(test.operand, values)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return False if _truth(test.values[0], values) is False else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = _known(test.left, values), _known(test.comparators[0], values)
        if left is _UNKNOWN or right is _UNKNOWN:
            return None
        compare = {ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b,
                   ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}.get(type(test.ops[0]))
        return None if compare is None else bool(compare(left, right))
    value = _known(test, values)
    return None if value is _UNKNOWN else bool(value)


def _comment_lines(code: list[str], first: int) -> set[int]:
    """The line numbers (``first`` being the first of ``code``) of the lines
    of ``code`` that hold a comment alone."""
    found = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO("\n".join(code) + "\n").readline):
            if token.type == tokenize.COMMENT and token.line.lstrip().startswith("#"):
                found.add(first + token.start[0] - 1)
    except (tokenize.TokenError, SyntaxError):
        return set()
    return found


def _pruned_text(source: str, body: list[ast.stmt], reach: _Reach) -> str:
    lines = source.splitlines()
    out: list[str] = []
    before = None   # the kind of the one-line statement without comments just written, else None
    end = 0
    pulled_in = _LAST_HEADING in lines   # the statements before the heading lose their comments
    for i, node in enumerate(body):
        start, gap = _first_line(node), lines[end:_first_line(node) - 1]
        end = node.end_lineno
        if _LAST_HEADING in gap:
            pulled_in = False
            gap = gap[gap.index(_LAST_HEADING):]
        if i not in reach.kept and not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            continue
        code = _class_lines(lines, node, reach.methods[i], reach.cut) if isinstance(node, ast.ClassDef) \
            else [lines[n - 1] for n in range(start, end + 1) if n not in reach.cut]
        comments = _tidy(gap)
        if pulled_in:
            comments = []
            dropped = _comment_lines(code, 1)
            code = [line for n, line in enumerate(code, 1) if n not in dropped]
        kind = ("import" if isinstance(node, (ast.Import, ast.ImportFrom)) else "constant") \
            if not comments and len(code) == 1 else None
        if out and (kind is None or kind != before):
            out.append("")
        out += comments + code
        before = kind
    return "\n".join(out) + "\n"


def _first_line(node: ast.stmt) -> int:
    return min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])


def _tidy(gap: list[str]) -> list[str]:
    """The comment lines between two statements, each run of blank lines
    made one, none before them (one after them parts a heading from what
    follows)."""
    kept: list[str] = []
    for line in gap:
        if line.strip() or (kept and kept[-1].strip()):
            kept.append(line)
    return kept


def _class_lines(lines: list[str], node: ast.ClassDef, methods: set[str], cut: set[int] = frozenset()) -> list[str]:
    """A class's lines without the methods not in ``methods`` (each with the
    comments above it) and the lines in ``cut`` (numbered from 1), one
    blank line where the class had any between two statements; ``pass`` in
    a class left with none."""
    end = max([node.lineno] + [b.end_lineno for b in [*node.bases, *node.keywords]])
    out = lines[_first_line(node) - 1:end]
    body = len(out)
    for s in node.body:
        gap, end = lines[end:_first_line(s) - 1], s.end_lineno
        if _is_method(s) and s.name not in methods:
            continue
        if len(out) > body and any(not line.strip() for line in gap):
            out.append("")
        out += _tidy(gap) + [lines[n - 1] for n in range(_first_line(s), s.end_lineno + 1) if n not in cut]
    if len(out) == body:
        line = lines[node.body[0].lineno - 1]
        out.append(line[:len(line) - len(line.lstrip())] + "pass")
    return out
