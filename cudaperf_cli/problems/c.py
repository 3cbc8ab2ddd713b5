"""Loading a C problem: which function to port, its parameters, sizes and init function.

See ``docs/c-problems.md`` for the user-facing rules.  Outline of :func:`load_c_problem`:

1. preprocess the file with the system C compiler (``cc -E -C``), keeping only the lines
   that come from the file itself (line markers tell header lines apart);
2. parse that text with tree-sitter-c; a syntax error in the user's lines is an error;
3. choose the function (``--function``, ``#pragma scop``, or the only one with a loop);
4. classify its parameters (integer scalar -> size, floating scalar -> coefficient,
   pointer/array -> array) and find every array's extents (C99 declarator or a
   ``// cudaperf:`` annotation);
5. find an init function and the sizes (``--size`` and the constants ``main`` passes).

:func:`small_sizes` derives the small odd verification configuration, and
:func:`build_reference` (in :mod:`cudaperf_cli.problems.reference`, re-exported here)
compiles the original function into a shared library for the CPU baseline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..core import (
    C_TYPE_TO_DTYPE,
    FLOAT_CTYPES,
    ArrayParam,
    CProblem,
    InitSpec,
    Param,
    ProblemError,
    ScalarKind,
    ScalarParam,
    dtype_of,
    eval_int_expr,
)
from . import _csyntax as syn
from ._cmain import sizes_from_main
from ._cpp import Preprocessed, normalize_cpp_args, preprocess
from .reference import ReferenceLib, build_reference, init_argtypes, reference_argtypes

__all__ = [
    "PORT_MARKER",
    "ReferenceLib",
    "annotation_body",
    "build_reference",
    "has_port_marker",
    "init_argtypes",
    "is_step_count",
    "load_c_problem",
    "reference_argtypes",
    "small_sizes",
]

ANNOTATION_PREFIX = "cudaperf:"
#: The item of a ``// cudaperf:`` line that marks a function for ``cudaperf port`` (a bare
#: word, no extents); the loader skips it (cudaperf_cli/port.py finds the marked functions).
PORT_MARKER = "port"


# ---------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------


def load_c_problem(
    path: Path,
    *,
    function: str | None = None,
    cpp_args: Sequence[str] = (),
    sizes: Mapping[str, int] = {},  # noqa: B006 - read only
    init: str | None = None,
    cc: str | None = None,
    sources: Sequence[Path | str] = (),
) -> CProblem:
    """Load the function to port from a C file (the file is never modified).

    Args:
        path: the C source file.
        function: name of the function to port; by default the function holding
            ``#pragma scop``, else the only non-``main`` function with a loop.
        cpp_args: ``-I DIR`` / ``-IDIR`` / ``-D NAME[=VALUE]`` / ``-U NAME`` flags, used
            for preprocessing here and for every later compile (kept normalised, with
            absolute ``-I`` directories, in ``CProblem.cpp_args``).
        sizes: ``--size NAME=VALUE`` values (element counts, not bytes); they win over
            the constants ``main`` passes.
        init: name of the init function; by default one is detected (see
            docs/c-problems.md); ``"none"`` disables init detection.
        cc: the C compiler command (default ``$CC``, else ``cc``).
        sources: more C files to compile and link into the CPU reference, as ``cc`` takes
            them (``utilities/polybench.c``); relative paths are taken from the current
            directory.  They are checked here (present, readable, not the problem file
            itself; a file given twice counts once) and compiled by
            :func:`build_reference`; kept absolute in ``CProblem.sources``.

    Returns:
        The :class:`~cudaperf_cli.core.CProblem`; ``sizes`` holds every size parameter.

    Raises:
        ProblemError: preprocessing failed, syntax error, no/ambiguous function, non-void
            function, unsupported parameter type, missing array extent (the ``hint``
            holds the annotation line to add), missing or unknown sizes, bad init, a
            missing or unreadable extra source.
        ToolchainError: the C compiler is missing or timed out.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ProblemError(f"C file not found: {path}")
    if "\n" in str(path.resolve()):  # the preprocessor's line markers cannot name it
        raise ProblemError(f"{str(path)!r}: a file name with a newline is not supported; rename it")
    path = path.resolve()
    extra = _check_sources(sources, path)
    cpp = normalize_cpp_args(cpp_args)
    pre = preprocess(path, cpp, cc)
    tree = syn.parse(pre.text)
    root = tree.root_node
    _check_syntax(root, pre, path)

    # Typedef names of parameters (typedef char base;) resolve to their base types: those
    # of the headers too, then the file's own.
    typedefs = syn.collect_typedefs(syn.parse(pre.all_text).root_node) if pre.all_text else {}
    typedefs.update(syn.collect_typedefs(root))
    funcs = [
        info
        for node in root.named_children
        if node.type == "function_definition"
        and (info := syn.function_info(node, typedefs)) is not None
    ]
    if not any(f.name != "main" for f in funcs):
        raise ProblemError(f"{path.name} defines no function to port (besides main)")
    chosen = _choose_function(funcs, function, path)
    where = f"{path.name}:{pre.origin_line(chosen.node.start_point.row)}"
    if not chosen.returns_void:
        raise ProblemError(
            f"{where}: '{chosen.name}' returns '{chosen.return_type}'; cudaperf ports void "
            "functions only: write the result through a pointer parameter"
        )
    if chosen.variadic:
        raise ProblemError(f"{where}: '{chosen.name}' is variadic; this is not supported")
    if not chosen.name.isascii() or "\\" in chosen.name:  # UCNs: f\U000000e9 after cpp
        raise ProblemError(
            f"{where}: the function name '{chosen.name}' is not ASCII; nvcc refuses such names "
            "in kernels: rename it (or wrap it in an ASCII-named function)"
        )

    comments = syn.prototype_comments(root, chosen.name) + chosen.comments
    annotations = _read_annotations(comments, pre, path)
    params = _make_params(chosen, annotations, where)

    main = next((f for f in funcs if f.name == "main"), None)
    init_spec = _choose_init(funcs, chosen, params, init, main, path)
    merged, source = _resolve_sizes(params, sizes, main, chosen, root, funcs)
    _check_shapes(params, merged, chosen.name)

    return CProblem(
        path=path,
        function=chosen.name,
        params=tuple(params),
        sizes=merged,
        sizes_source=source,
        init=init_spec,
        cpp_args=cpp,
        function_source=syn.text_of(chosen.node),
        is_static=chosen.is_static,
        sources=extra,
    )


def _check_sources(sources: Sequence[Path | str], problem_file: Path) -> tuple[Path, ...]:
    """The extra C sources as absolute paths, in order, each once.

    Raises:
        ProblemError: a source is missing, a folder, unreadable, has a newline in its name,
            or is the problem file itself.
    """
    out: list[Path] = []
    for given in sources:
        text = str(given)
        src = Path(text).expanduser()
        if not text.strip():
            raise ProblemError("an empty name was given as an extra C source")
        if "\n" in text:
            raise ProblemError(f"extra C source {text!r}: a file name with a newline is not "
                               "supported; rename it")
        if not src.exists():
            raise ProblemError(f"extra C source not found: {src}")
        if not src.is_file():
            raise ProblemError(f"extra C source {src} is not a file")
        try:
            with src.open("rb") as fh:
                fh.read(1)
        except OSError as exc:
            raise ProblemError(
                f"cannot read extra C source {src}: {exc.strerror or exc}"
            ) from None
        src = src.resolve()
        if src == problem_file:
            raise ProblemError(
                f"{src.name} is the problem file itself; give only the other C files "
                "to link (e.g. utilities/polybench.c)"
            )
        if src not in out:
            out.append(src)
    return tuple(out)


#: Size names treated as step counts by :func:`small_sizes` (lower-cased full match).
_STEP_NAME = re.compile(
    r"(t|nt|ts|tmax|t_?steps|n?_?steps|n?_?time_?steps|num_?steps|"
    r"(n|num|max)?_?iter\w*|n?_?reps?|repeat\w*)"
)


def is_step_count(name: str) -> bool:
    """Whether a size parameter looks like a time-step / iteration count.

    Matches (case-insensitively) ``t``, ``nt``, ``ts``, ``tmax``, ``tsteps``, ``steps``,
    ``nsteps``, ``timesteps``, ``iter*``, ``niter*``, ``n_iter*``, ``max_iter*``,
    ``num_iter*``, ``rep``/``nreps`` and ``repeat*``.
    """
    return _STEP_NAME.fullmatch(name.lower()) is not None


def small_sizes(problem: CProblem, *, max_size: int = 100) -> dict[str, int]:
    """A small verification configuration that exercises tails.

    Rules (deterministic):

    * step counts (:func:`is_step_count`) become 3 (or their main value if below 3);
    * every other size becomes odd, hence never a multiple of 32, when its main value
      allows it; it is at most its main value and at least 3 when the main value is;
    * the order of the main values is kept among the non-step sizes: equal sizes stay
      equal, a larger size stays strictly larger;
    * values are scaled to the largest main value, so the largest is about ``max_size``
      (a size above ``max_size`` appears only when there are more distinct sizes than odd
      numbers below it);
    * if some array extent would not be positive (``n-4`` with ``n = 3``) the lower
      bound is raised until every extent is positive (falling back to the main sizes).

    Args:
        problem: a loaded problem (``problem.sizes`` complete and positive).
        max_size: the target for the largest size (elements along one dimension).

    Returns:
        size name -> value, in ``problem.sizes`` order.
    """
    main = dict(problem.sizes)
    steps = {n: (3 if v >= 3 else v) for n, v in main.items() if is_step_count(n)}
    values = sorted({v for n, v in main.items() if n not in steps})
    floor = 3
    while True:
        small = _shrink(values, max_size, floor)
        out = {n: steps[n] if n in steps else small[v] for n, v in main.items()}
        if _extents_positive(problem, out):
            return out
        if not values or floor >= max(values):
            return main
        floor = floor * 2 + 1


def edge_sizes(problem: CProblem) -> dict[str, int] | None:
    """The smallest verification configuration: loops run 0, 1 or 2 iterations.

    Step counts become 1; the other sizes the smallest positive values that keep the main
    values' order (equal stay equal, a larger one stays strictly larger: 1, 2, 3, ...), all
    raised together until every array extent is positive (``n-4`` needs ``n >= 5``); no
    value exceeds its main one.  A loop ``for (i = 1; i < n - 1; i++)`` then runs no
    iteration, a triangle ``j < i`` none in its first row, ``i <= n - 1`` one; the
    generated code's trip counts, guards and empty launches are checked where C runs
    nothing (the class of ``unsigned n`` counted down past 0).

    Returns:
        size name -> value in ``problem.sizes`` order, or None when no such configuration
        differs from :func:`small_sizes`' and the main one.
    """
    main = dict(problem.sizes)
    steps = {n: 1 for n in main if is_step_count(n)}
    values = sorted({v for n, v in main.items() if n not in steps})
    for base in range(0, 65):
        rank = {v: min(v, base + 1 + k) for k, v in enumerate(values)}
        out = {n: steps[n] if n in steps else rank[v] for n, v in main.items()}
        if _extents_positive(problem, out):
            return None if out in (main, small_sizes(problem)) else out
    return None


# ---------------------------------------------------------------------------------------
# Parsing and function choice
# ---------------------------------------------------------------------------------------


def _check_syntax(root: syn.Node, pre: Preprocessed, path: Path) -> None:
    err = syn.first_syntax_error(root)
    if err is None:
        return
    line = pre.origin_line(err.start_point.row)
    if err.is_missing:
        what = f"missing '{err.type}'"
    else:
        snippet = " ".join(syn.text_of(err).split())
        what = f"near '{snippet[:40]}{'...' if len(snippet) > 40 else ''}'"
    raise ProblemError(f"{path.name}:{line}: syntax error {what}")


def _choose_function(
    funcs: list[syn.FunctionInfo], function: str | None, path: Path
) -> syn.FunctionInfo:
    names = [f.name for f in funcs]
    if function == "main":
        raise ProblemError("'main' cannot be ported: choose the function it calls")
    if function is not None:
        for f in funcs:
            if f.name == function:
                return f
        raise ProblemError(
            f"function '{function}' is not defined in {path.name}; "
            f"functions defined there: {', '.join(names)}"
        )
    candidates = [f for f in funcs if f.name != "main"]
    scop = [f for f in candidates if f.has_scop]
    if len(scop) == 1:
        return scop[0]
    if len(scop) > 1:
        raise ProblemError(
            f"several functions of {path.name} hold '#pragma scop': "
            + ", ".join(f.name for f in scop),
            hint="pass --function NAME to choose one",
        )
    loops = [f for f in candidates if f.has_loop]
    if len(loops) == 1:
        return loops[0]
    if len(loops) > 1:
        # Set aside functions that write through none of their pointer parameters
        # (print_array, checksums) and init helpers (named *init*, taking only
        # parameters of another candidate).
        kernels = [
            f
            for f in loops
            if _writes_through_pointer(f)
            and not (
                "init" in f.name.lower()
                and any(
                    _init_compat(f, _roles_of_decls(g.params))[0] for g in loops if g is not f
                )
            )
        ]
        if len(kernels) == 1:
            return kernels[0]
        raise ProblemError(
            f"several functions of {path.name} contain loops: "
            + ", ".join(f.name for f in (kernels or loops)),
            hint="pass --function NAME to choose one (or put '#pragma scop' in its body)",
        )
    raise ProblemError(
        f"no function of {path.name} contains a loop; functions defined there: "
        + ", ".join(names),
        hint="pass --function NAME",
    )


def _writes_through_pointer(f: syn.FunctionInfo) -> bool:
    pointers = {p.name for p in f.params if p.dims}
    return bool(syn.written_names(f.body) & pointers)


# ---------------------------------------------------------------------------------------
# Annotations:  // cudaperf: x[n] y[n] A[n*m]
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Annotation:
    name: str
    extents: tuple[str, ...]
    line: int


_IDENT = re.compile(r"[A-Za-z_]\w*")


def _read_annotations(
    comments: list[syn.Node], pre: Preprocessed, path: Path
) -> dict[str, _Annotation]:
    """``// cudaperf:`` items of the comments right above the function (name -> item)."""
    out: dict[str, _Annotation] = {}
    for comment in comments:
        first_row = comment.start_point.row
        for offset, raw in enumerate(syn.text_of(comment).split("\n")):
            body = annotation_body(raw)
            if body is None:
                continue
            line = pre.origin_line(first_row + offset)
            for item in _parse_items(body, f"{path.name}:{line}"):
                if item.name in out:
                    raise ProblemError(
                        f"{path.name}:{line}: '{item.name}' is annotated twice "
                        f"(also on line {out[item.name].line})"
                    )
                out[item.name] = _Annotation(item.name, item.extents, line)
    return out


def annotation_body(line: str) -> str | None:
    """The text after ``cudaperf:`` of one comment line (``// cudaperf: x[n]``, ``/*
    cudaperf: x[n] */``, `` * cudaperf: x[n]`` inside a block comment), or None when the
    line is not a cudaperf line."""
    text = line.strip()
    for prefix in ("//", "/*"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    if text.endswith("*/"):
        text = text[:-2]
    text = text.strip().lstrip("*").strip()
    if not text.startswith(ANNOTATION_PREFIX):
        return None
    return text[len(ANNOTATION_PREFIX) :]


def has_port_marker(body: str) -> bool:
    """Whether the items of a ``cudaperf:`` line (:func:`annotation_body`) include the bare
    word ``port`` (:data:`PORT_MARKER`; ``port[n]`` is an extent annotation, not a marker)."""
    text = body
    while True:  # bracket groups become one mark, innermost first: A[idx[n]] -> A\0
        stripped = re.sub(r"\[[^\[\]]*\]", "\0", text)
        if stripped == text:
            break
        text = stripped
    return PORT_MARKER in re.split(r"[\s,;]+", text.strip())


def _parse_items(text: str, where: str) -> list[_Annotation]:
    """``x[n] y[n], A[n*m]`` -> items (a tiny scanner, not C parsing); the bare item
    ``port`` (the ``cudaperf port`` marker) is skipped."""
    items: list[_Annotation] = []
    i = 0
    while i < len(text):
        if text[i] in " \t,;":
            i += 1
            continue
        m = _IDENT.match(text, i)
        if m is None:
            raise ProblemError(
                f"{where}: bad cudaperf annotation near '{text[i:].strip()}'",
                hint="write items as NAME[EXTENT][EXTENT]..., e.g. // cudaperf: x[n] A[n][m]",
            )
        name, i = m.group(), m.end()
        extents: list[str] = []
        while i < len(text) and text[i] == "[":
            depth, j = 0, i
            while j < len(text):
                depth += {"[": 1, "]": -1}.get(text[j], 0)
                if depth == 0:
                    break
                j += 1
            if j >= len(text):
                raise ProblemError(f"{where}: unbalanced '[' in cudaperf annotation of '{name}'")
            extent = " ".join(text[i + 1 : j].split())
            if not extent:
                raise ProblemError(f"{where}: empty extent in cudaperf annotation of '{name}'")
            extents.append(extent)
            i = j + 1
        if not extents and name == PORT_MARKER:
            continue  # the cudaperf port marker, not an array
        if not extents:
            raise ProblemError(
                f"{where}: '{name}' has no extent in the cudaperf annotation",
                hint=f"write it as {name}[EXTENT], e.g. {name}[n]",
            )
        items.append(_Annotation(name, tuple(extents), 0))
    return items


# ---------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------


def _element_dtype(d: syn.ParamDecl, where: str) -> None:
    try:
        dtype_of(d.type_text)
    except ProblemError as exc:
        text = str(exc)
        if d.written_type:  # name the typedef as written, and what it stands for
            text = text.replace(
                f"'{d.type_text}'", f"'{d.written_type}' (a typedef of '{d.type_text}')", 1
            )
        raise ProblemError(f"{where}: parameter '{d.name}': {text}") from None


def _make_params(
    fn: syn.FunctionInfo, annotations: Mapping[str, _Annotation], where: str
) -> list[Param]:
    decls = fn.params
    for i, d in enumerate(decls):
        if not d.name:
            raise ProblemError(f"{where}: parameter {i + 1} of '{fn.name}' has no name")
        if d.problem:
            raise ProblemError(f"{where}: parameter '{d.name}' of '{fn.name}': {d.problem}")
    size_names = [d.name for d in decls if d.is_scalar and d.type_text not in FLOAT_CTYPES]
    array_names = {d.name for d in decls if d.dims}
    fname = where.split(":")[0]
    for ann in annotations.values():
        if ann.name not in array_names:
            raise ProblemError(
                f"{fname}:{ann.line}: the cudaperf annotation names '{ann.name}', which is not "
                f"an array parameter of '{fn.name}' (arrays: "
                + (", ".join(sorted(array_names)) or "none")
                + ")"
            )

    params: list[Param] = []
    missing: list[syn.ParamDecl] = []
    for d in decls:
        _element_dtype(d, where)
        if d.is_scalar:
            kind = ScalarKind.COEFFICIENT if d.type_text in FLOAT_CTYPES else ScalarKind.SIZE
            params.append(ScalarParam(d.name, d.type_text, kind))
            continue
        ann = annotations.get(d.name)
        if ann is not None:
            if len(d.dims) > 1 and len(ann.extents) != len(d.dims):
                raise ProblemError(
                    f"{fname}:{ann.line}: '{d.name}' is declared with {len(d.dims)} dimensions "
                    f"but annotated with {len(ann.extents)}"
                )
            params.append(ArrayParam(d.name, d.type_text, ann.extents, d.const, "annotation"))
        elif all(e is not None for e in d.dims):
            params.append(ArrayParam(d.name, d.type_text, tuple(d.dims), d.const, "c99"))  # type: ignore[arg-type]
        else:
            missing.append(d)
            params.append(ArrayParam(d.name, d.type_text, (), d.const, "missing"))

    if missing:
        guess = " ".join(
            d.name + "".join(f"[{e}]" for e in _guess_extents(fn, d, size_names)) for d in missing
        )
        names = ", ".join(f"'{d.name}'" for d in missing)
        raise ProblemError(
            f"{where}: no extent for array parameter{'s' if len(missing) > 1 else ''} {names} "
            f"of '{fn.name}': declare {'them' if len(missing) > 1 else 'it'} as a C99 array "
            "or annotate the function (see docs/c-problems.md)",
            hint=f"add above the function: // cudaperf: {guess}",
        )

    if not any(isinstance(p, ArrayParam) and not p.const for p in params):
        raise ProblemError(
            f"{where}: '{fn.name}' has no non-const pointer or array parameter: write the "
            "result through a pointer parameter"
        )
    _check_extent_names(params, size_names, fn.name)
    return params


def _check_extent_names(params: list[Param], size_names: list[str], fn: str) -> None:
    """Every extent must be an integer expression over the size parameters only."""
    probe = {n: 1009 + 2 * i for i, n in enumerate(size_names)}  # distinct odd values
    allowed = ", ".join(size_names) if size_names else "none: only integer literals"
    for p in params:
        if not isinstance(p, ArrayParam):
            continue
        for e in p.extents:
            try:
                eval_int_expr(e, probe)
            except ValueError as exc:
                note = " (annotations are not macro-expanded)" if (
                    p.extent_source == "annotation"
                ) else ""
                raise ProblemError(
                    f"extent '{e}' of array '{p.name}' of '{fn}': {exc}{note}; extents may "
                    f"only use the size parameters ({allowed}) and + - * / % << >>",
                    hint="annotate the array with an expression over the size parameters, "
                    f"e.g. // cudaperf: {p.name}[{size_names[0] if size_names else '100'}]",
                ) from None


def _guess_extents(fn: syn.FunctionInfo, d: syn.ParamDecl, size_names: list[str]) -> list[str]:
    """A guess of an array's extents from how the body indexes it (for the hint only)."""
    bounds = syn.loop_bounds(fn.body)
    chains = syn.subscript_chains(fn.body, d.name)

    def bound_of(var: str, depth: int = 0) -> str | None:
        node = bounds.get(var)
        if node is None or depth > 8:
            return None
        text = " ".join(syn.text_of(node).split())
        if text in size_names:
            return text
        constant = syn.const_int(node, {})
        if constant is not None:  # a macro bound, a literal after preprocessing
            return str(constant)
        for ident in syn.identifiers_in(node):
            if ident in size_names:
                return ident
            if ident in bounds and ident != var:
                return bound_of(ident, depth + 1)
        return None

    out: list[str] = []
    for k, declared in enumerate(d.dims):
        if declared is not None:
            out.append(declared)
            continue
        best: list[str] = []
        for chain in chains:
            if k >= len(chain):
                continue
            terms: list[str] = []
            seen_vars: set[str] = set()
            for ident in syn.identifiers_in(chain[k]):
                if ident in bounds and ident not in seen_vars:
                    seen_vars.add(ident)
                    b = bound_of(ident)
                    if b is not None:
                        terms.append(b)
            if not terms:
                terms = [i for i in dict.fromkeys(syn.identifiers_in(chain[k])) if i in size_names]
            if len(terms) > len(best):
                best = terms
        if not best:
            best = [size_names[0]] if size_names else ["N"]
        out.append("*".join(best))
    return out


# ---------------------------------------------------------------------------------------
# Init function
# ---------------------------------------------------------------------------------------

# Role of a kernel parameter: ("size", ctype), ("coefficient", ctype) or ("array", ctype).
_Roles = dict[str, tuple[str, str]]


def _roles_of_decls(decls: list[syn.ParamDecl]) -> _Roles:
    roles: _Roles = {}
    for d in decls:
        if d.dims:
            roles[d.name] = ("array", d.type_text)
        elif d.type_text in FLOAT_CTYPES:
            roles[d.name] = ("coefficient", d.type_text)
        else:
            roles[d.name] = ("size", d.type_text)
    return roles


def _roles_of_params(params: list[Param]) -> _Roles:
    return {
        p.name: ("array", p.ctype) if isinstance(p, ArrayParam) else (p.kind.value, p.ctype)
        for p in params
    }


def _init_compat(f: syn.FunctionInfo, roles: _Roles) -> tuple[bool, str, tuple[str, ...]]:
    """Can ``f`` initialise the data of a function whose parameters have ``roles``?

    Returns ``(ok, reason if not ok, scalar outputs)``.
    """
    if not f.params:
        return False, "it has no parameters", ()
    if f.variadic:
        return False, "it is variadic", ()
    outputs: list[str] = []
    for p in f.params:
        if not p.name or p.name not in roles:
            return False, f"its parameter '{p.name}' is not a parameter of the ported function", ()
        if p.problem:
            return False, f"its parameter '{p.name}': {p.problem}", ()
        role, ctype = roles[p.name]
        if role == "array":
            if not p.dims or p.type_text != ctype:
                return False, f"'{p.name}' must be a pointer/array of {ctype}", ()
        elif role == "coefficient":
            if len(p.dims) != 1 or p.type_text != ctype:
                return False, f"'{p.name}' must be a '{ctype} *' (a scalar output)", ()
            outputs.append(p.name)
        else:  # size: by value, any integer type
            if p.dims or p.type_text in FLOAT_CTYPES or p.type_text not in C_TYPE_TO_DTYPE:
                return False, f"size '{p.name}' must be passed by value as an integer", ()
    return True, "", tuple(outputs)


def _choose_init(
    funcs: list[syn.FunctionInfo],
    chosen: syn.FunctionInfo,
    params: list[Param],
    init: str | None,
    main: syn.FunctionInfo | None,
    path: Path,
) -> InitSpec | None:
    roles = _roles_of_params(params)
    others = [f for f in funcs if f.name not in ("main", chosen.name)]
    if init is not None:
        match = next((f for f in funcs if f.name == init), None)
        if match is None and init == "none":
            return None
        listing = ", ".join(f.name for f in others) or "none"
        if match is None:
            raise ProblemError(
                f"init function '{init}' is not defined in {path.name}; candidates: {listing}"
            )
        if match in (chosen, main):
            raise ProblemError(
                f"'{init}' cannot be the init function (it is "
                + ("main" if match is main else "the function to port")
                + f"); candidates: {listing}"
            )
        ok, reason, outputs = _init_compat(match, roles)
        if not ok:
            raise ProblemError(
                f"'{init}' cannot initialise the data of '{chosen.name}': {reason}",
                hint="an init function takes only parameters of the ported function, by the "
                "same names: arrays, sizes by value, coefficients as pointers (outputs)",
            )
        return InitSpec(match.name, tuple(p.name for p in match.params), outputs)

    called_before: set[str] = set()
    if main is not None:
        kernel_calls = syn.calls_to(main.body, chosen.name)
        limit = kernel_calls[0].start_byte if kernel_calls else main.body.end_byte
        called_before = {
            syn.text_of(n.child_by_field_name("function"))
            for n in syn.walk(main.body)
            if n.type == "call_expression" and n.start_byte < limit
        }
    ranked = []
    for index, f in enumerate(others):
        ok, _, outputs = _init_compat(f, roles)
        if not ok:
            continue
        if not _writes_through_pointer(f):
            continue  # writes nothing it is given (e.g. print_array)
        named = "init" in f.name.lower()
        called = f.name in called_before
        if named or called:
            ranked.append(((not named, not called, index), f, outputs))
    if not ranked:
        return None
    _, f, outputs = min(ranked, key=lambda r: r[0])
    return InitSpec(f.name, tuple(p.name for p in f.params), outputs)


# ---------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------


def _resolve_sizes(
    params: list[Param],
    cli: Mapping[str, int],
    main: syn.FunctionInfo | None,
    fn: syn.FunctionInfo,
    root: syn.Node,
    funcs: list[syn.FunctionInfo],
) -> tuple[dict[str, int], str]:
    size_names = [p.name for p in params if isinstance(p, ScalarParam) and p.kind is ScalarKind.SIZE]
    unknown = [k for k in cli if k not in size_names]
    if unknown:
        valid = ", ".join(size_names) if size_names else "none"
        raise ProblemError(
            f"unknown size name{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
            f"the size parameters of '{fn.name}' are: {valid}"
        )
    from_main = sizes_from_main(params, main, fn, root, funcs)
    merged: dict[str, int] = {}
    used_cli = used_main = False
    for name in size_names:
        if name in cli:
            try:
                merged[name] = int(cli[name])
            except (TypeError, ValueError):
                raise ProblemError(f"--size {name}={cli[name]!r} is not an integer") from None
            used_cli = True
        elif name in from_main:
            merged[name] = from_main[name]
            used_main = True
    missing = [n for n in size_names if n not in merged]
    if missing:
        raise ProblemError(
            f"no value for size parameter{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} of '{fn.name}': main does not pass "
            f"{'them' if len(missing) > 1 else 'it'} as compile-time constants",
            hint="pass " + " ".join(f"--size {n}=VALUE" for n in missing),
        )
    for name, value in merged.items():
        if value <= 0:
            origin = "--size" if name in cli else "main"
            raise ProblemError(
                f"size {name}={value} (from {origin}) must be positive",
                hint=f"pass --size {name}=VALUE with VALUE > 0",
            )
    for p in params:  # a value the C type cannot hold would wrap (int n = 99999999999)
        if isinstance(p, ScalarParam) and p.name in merged:
            top = _int_max(p.dtype)
            if merged[p.name] > top:
                origin = "--size" if p.name in cli else "main"
                raise ProblemError(
                    f"size {p.name}={merged[p.name]} (from {origin}) does not fit its C type "
                    f"'{p.ctype}' (at most {top})",
                    hint=f"pass --size {p.name}=VALUE with VALUE <= {top}",
                )
    source = "cli+main" if used_cli and used_main else ("cli" if used_cli else "main")
    return merged, source


def _int_max(dtype: str) -> int:
    """Largest value of an integer dtype name (``int32`` -> 2**31 - 1)."""
    bits = int(dtype.lstrip("uint"))
    return 2**bits - 1 if dtype.startswith("u") else 2 ** (bits - 1) - 1


def _check_shapes(params: list[Param], sizes: Mapping[str, int], fn: str) -> None:
    for p in params:
        if isinstance(p, ArrayParam):
            try:
                shape = p.shape(sizes)
            except ValueError as exc:
                raise ProblemError(f"array '{p.name}' of '{fn}': {exc}") from None
            if any(e <= 0 for e in shape):
                raise ProblemError(
                    f"array '{p.name}' of '{fn}' has shape {shape} for sizes {dict(sizes)}: "
                    "every extent must be positive"
                )


# ---------------------------------------------------------------------------------------
# small_sizes helpers
# ---------------------------------------------------------------------------------------


def _shrink(values: list[int], max_size: int, floor: int) -> dict[int, int]:
    """Map ascending distinct main values to small values keeping strict order.

    Lower bounds first (bottom-up: at least ``floor`` where the value allows, above the
    previous one, odd where possible), then each value is placed as near its scaled
    target as the bounds allow (top-down), and made odd when the bounds leave room.
    """
    if not values:
        return {}
    vmax = values[-1]
    lower: list[int] = []
    for v in values:
        lo = max(min(floor, v), lower[-1] + 1 if lower else 1)
        if lo % 2 == 0 and lo + 1 <= v:
            lo += 1
        lower.append(lo)
    out: dict[int, int] = {}
    above: int | None = None  # the small value chosen for the next larger main value
    for v, lo in zip(reversed(values), reversed(lower)):
        target = v if vmax <= max_size else max(1, round(v * max_size / vmax))
        hi = v if above is None else min(v, above - 1)
        s = min(max(target, lo), hi)
        if s % 2 == 0:
            if s - 1 >= lo:
                s -= 1
            elif s + 1 <= hi:
                s += 1
        out[v] = s
        above = s
    return out


def _extents_positive(problem: CProblem, sizes: Mapping[str, int]) -> bool:
    try:
        return all(e > 0 for a in problem.arrays for e in a.shape(sizes))
    except ValueError:
        return False
