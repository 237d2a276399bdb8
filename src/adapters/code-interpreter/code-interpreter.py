#!/usr/bin/env python3
"""svc's code interpreter: what E2B's `@e2b/code-interpreter` SDK calls on a sandbox's port 49999.

The Python standard library alone (no Jupyter): the guest needs python3 and nothing else. Where
the guest has matplotlib and pandas, figures come as results (PNG and E2B's `chart`) as Jupyter's
inline backend gives them, and DataFrames with E2B's `data` (InlineBackend, chart_of, frame_data).

  GET  /health                     "OK"
  POST /execute                    {code, context_id?, language?, env_vars?} -> NDJSON, one object a
                                   line: stdout, stderr, result, error, number_of_executions,
                                   end_of_execution (the SDK's messaging.ts reads them)
  POST /contexts                   {language?, cwd?} -> {id, language, cwd}
  GET  /contexts                   [{id, language, cwd}]
  DELETE /contexts/{id}
  POST /contexts/{id}/restart

A Python context is a kernel: a child `python3` that keeps its globals from one execution to the
next, runs one at a time, and is interrupted (SIGINT) when the caller goes away mid-execution. A
cell may `await` at its top level, and use IPython's `!command`, `%cd`, `%env`, `%%bash` and a few
other magics (Magics). A kernel that dies is started again, and the execution says so. A
JavaScript context (`js`, E2B's name; `javascript`) is the same with a child `node`
(code-interpreter-js.cjs: Node's REPL's evaluation, a top-level await, `require`); a TypeScript
one (`ts`; `typescript`, the SDK's name) is a JavaScript context whose cells have their types
stripped first (code-interpreter-ts.cjs, sucrase: no type checking, as Deno's kernel in E2B's
template does not check them). A bash
context runs each cell as its own `bash -c` in the context's folder (killed when the caller goes
away): no state is kept between cells. With `--envs FILE`, every cell runs with the JSON object
of names and values in FILE (the sandbox's envs, which svc writes there when it makes the
sandbox), under the cell's own env_vars; the file is read again when it changes, so a server
started before its sandbox existed (in a template the sandbox is a clone of) runs cells with that
sandbox's envs. The default Python kernel starts with the server and runs an empty cell (with
`--preload numpy,pandas`, one that imports those), so the first cell finds it warm; with `--warm
FILE` the server writes FILE then (svc suspends a template once it is there). docs/e2b.md.
"""

import ast
import base64
import codecs
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import math
import os
import re
import selectors
import shlex
import signal
import socket
import string
import subprocess
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LANGUAGES = ("python", "js", "ts", "bash")
# what runs a language's cells, by name
KERNEL_NAMES = {"python": "Python", "js": "node", "ts": "node"}
# other names of a language, as E2B's SDK and people write them
LANGUAGE_NAMES = {"javascript": "js", "node": "js", "typescript": "ts"}
# the JavaScript kernel, beside this file (in a guest too: svc puts both there); a TypeScript
# context's is the same, told to strip each cell's types first (with code-interpreter-ts.cjs)
JS_KERNEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "code-interpreter-js.cjs")
# the most of a cell's output one event carries (a long line without its end comes in pieces): what
# the kernel's prints hold before they are written, and what the server reads of a pipe at once
PIECE = 64 * 1024
# a code object's flag for a coroutine (inspect.CO_COROUTINE: inspect is not imported at a kernel's
# start for it)
CO_COROUTINE = 0x80
# the most of a request body this server reads (a cell's code and its env_vars)
MAX_BODY = 16 * 1024 * 1024


# ------------------------------------------------------------------------------------------ kernel


def mark_of(nonce):
    """The start of the kernel's marks: NUL, RS and a nonce of the server's (no output makes one by chance)."""
    return b"\0\x1esvc-mark-" + nonce.encode() + b":"


def kernel_main(fd, nonce):
    """
    The child: reads one JSON request a line on stdin, answers with JSON events on descriptor
    `fd`. Its own 1 and 2 are where its prints and the processes it starts (os.system, subprocess)
    print, which the server forwards as stdout and stderr. Before each event it writes a mark
    (mark_of(nonce), the event's number, NUL) to both, so the server sends what was printed before
    the event before it, and what was printed after it after it (Printed).
    """
    # the events' pipe is not passed on to what a cell starts (a process that outlives the kernel
    # would hide its end); requests come on a descriptor of their own, and what the cell reads from
    # its standard input (input(), a child's stdin) is /dev/null's end of file, not the requests
    os.set_inheritable(fd, False)
    events = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
    # the marks go to the server's pipes whatever a cell does with descriptors 1 and 2 (dup2 to a file)
    marked = (os.dup(1), os.dup(2))
    mark = mark_of(nonce)
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    kernel_file = os.path.abspath(__file__)
    # an interrupt is a KeyboardInterrupt even when the kernel was started with SIGINT ignored (as a
    # shell's background job is)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    lock = threading.Lock()
    seq = [0]

    def emit(obj):
        """An event: its mark on both pipes after what was printed before it, then the event."""
        sys.stdout.flush()
        sys.stderr.flush()
        with lock:
            seq[0] += 1
            for out in marked:
                try:
                    os.write(out, mark + b"%d\0" % seq[0])
                except OSError:
                    pass  # a pipe the server no longer reads: it sends what it has
            events.write(json.dumps({**obj, "seq": seq[0]}) + "\n")
            events.flush()

    class Stream:
        """
        sys.stdout and sys.stderr: what a cell prints goes, a line at a time (what is left at a
        flush), to the kernel's own descriptor 1 or 2, the pipe that what the cell starts prints on
        too, so the two come out in the order they were printed.
        """

        def __init__(self, name, fd):
            self.name = name
            self.fd = fd
            self.pending = ""

        def write(self, text):
            text = str(text)
            self.pending += text
            if len(self.pending) >= PIECE:
                self.flush()
            elif "\n" in self.pending:
                cut = self.pending.rindex("\n") + 1
                out, self.pending = self.pending[:cut], self.pending[cut:]
                self.put(out)
            return len(text)

        def flush(self):
            out, self.pending = self.pending, ""
            self.put(out)

        def put(self, text):
            data = text.encode("utf-8", "replace")
            while data:
                data = data[os.write(self.fd, data) :]

        def isatty(self):
            return False

        @property
        def encoding(self):
            return "utf-8"

        def fileno(self):
            return self.fd

    def formats(value):
        """A value as Jupyter's display data: text always, and what its _repr_*_ methods give."""
        out = {"text": repr(value)}
        for key, method in (
            ("html", "_repr_html_"),
            ("markdown", "_repr_markdown_"),
            ("svg", "_repr_svg_"),
            ("png", "_repr_png_"),
            ("jpeg", "_repr_jpeg_"),
            ("latex", "_repr_latex_"),
            ("json", "_repr_json_"),
            ("javascript", "_repr_javascript_"),
        ):
            fn = getattr(value, method, None)
            if not callable(fn):
                continue
            try:
                data = fn()
            except Exception:
                continue
            if data is None:
                continue
            if isinstance(data, bytes):
                data = base64.b64encode(data).decode("ascii")
            out[key] = data
        # a figure given as the cell's value or to display(): its picture and chart (Jupyter's inline backend's)
        figure = sys.modules.get("matplotlib.figure")
        if figure is not None and isinstance(value, figure.Figure):
            out.update(figure_formats(value))
        # a DataFrame's columns as E2B's `data` (beside its HTML table)
        pandas = sys.modules.get("pandas")
        if pandas is not None and isinstance(value, pandas.DataFrame):
            out["data"] = frame_data(value)
        return out

    namespace = {"__name__": "__main__", "__builtins__": __builtins__}

    def display(*objs):
        for obj in objs:
            emit({"type": "result", "is_main_result": False, **formats(obj)})

    namespace["display"] = display

    def show_figures():
        """Each open figure as a result; one that cannot be drawn keeps no other back (its error is raised after)."""
        failed = None
        for figure in open_figures():
            try:
                display(figure)
            except Exception as e:  # noqa: BLE001 - raised once the others are shown
                failed = failed or e
        if failed is not None:
            raise failed

    sys.meta_path.insert(0, InlineBackend(show_figures))
    sys.stdout = Stream("stdout", 1)
    sys.stderr = Stream("stderr", 2)
    count = 0

    magics = Magics(namespace)
    namespace["__svc_magics__"] = magics
    loop = []

    def run_code(code_object):
        """Runs compiled cell code; a cell with a top-level `await` runs on the kernel's event loop."""
        value = eval(code_object, namespace)
        if code_object.co_flags & CO_COROUTINE:
            if not loop:
                import asyncio

                loop.append(asyncio.new_event_loop())
            value = loop[0].run_until_complete(value)
        return value

    def run(code):
        try:
            tree = ast.parse(code, "<cell>", "exec")
        except SyntaxError as error:
            # IPython's escapes (`!ls`, `%cd`, `%%bash`) are no Python: as IPython, they are taken
            # only where they are not (a cell that is Python is never rewritten)
            escaped = escapes(code)
            if escaped == code:
                raise
            try:
                tree = ast.parse(escaped, "<cell>", "exec")
            except SyntaxError as other:
                # the error of a line that was not rewritten is the cell's own (a `!ls` above it is no error)
                n = (other.lineno or 0) - 1
                if 0 <= n < len(lines := code.split("\n")) and lines[n] == escaped.split("\n")[n]:
                    raise other from None
                raise error from None
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        run_code(compile(tree, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT))
        if last is not None:
            value = run_code(compile(last, "<cell>", "eval", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT))
            # a cell that ends with `;` shows no value (IPython's way to keep `plt.plot(...);` quiet)
            if value is not None and not quiet(code):
                namespace["_"] = value
                emit({"type": "result", "is_main_result": True, **formats(value)})

    def error(e):
        if isinstance(e, KeyboardInterrupt):
            return emit({"type": "error", "name": "KeyboardInterrupt", "value": "interrupted", "traceback": ""})
        # the frames of the cell and what it called, not of this kernel
        tb = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != kernel_file]
        lines = ["Traceback (most recent call last):\n"] if tb else []
        lines += traceback.format_list(tb) + traceback.format_exception_only(type(e), e)
        value = str(e) + missing_hint(e)
        emit({"type": "error", "name": type(e).__name__, "value": value, "traceback": "".join(lines)})

    for line in requests:
        req = json.loads(line)
        # the sandbox's envs are the kernel's own from now on (what a cell leaves running sees
        # them after it); the cell's env_vars are put back after it
        os.environ.update(req.get("base") or {})
        env = req.get("env") or {}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        # the server's own warm-up cell is no execution of the user's
        count += 1 if req.get("counted", True) else 0
        try:
            run(req["code"])
        except BaseException as e:  # noqa: BLE001 - a cell's SystemExit is its error too
            error(e)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            sys.stdout.flush()
        # the figures the cell left open, after its value (Jupyter's inline backend's post-execute)
        try:
            show_figures()
        except BaseException as e:  # noqa: BLE001 - a figure that cannot be drawn: the cell's error
            error(e)
        emit({"type": "number_of_executions", "execution_count": count})
        emit({"type": "done"})


# packages E2B's code interpreter template has, by the name a cell imports: Debian's package and
# pip's (the debian image has all of them but scipy, seaborn and sklearn; another image may have none)
MISSING_PACKAGES = {
    "bs4": ("python3-bs4", "beautifulsoup4"),
    "matplotlib": ("python3-matplotlib", "matplotlib"),
    "numpy": ("python3-numpy", "numpy"),
    "openpyxl": ("python3-openpyxl", "openpyxl"),
    "pandas": ("python3-pandas", "pandas"),
    "PIL": ("python3-pil", "pillow"),
    "requests": ("python3-requests", "requests"),
    "scipy": ("python3-scipy", "scipy"),
    "seaborn": ("python3-seaborn", "seaborn"),
    "sklearn": ("python3-sklearn", "scikit-learn"),
    "sympy": ("python3-sympy", "sympy"),
    "yaml": ("python3-yaml", "pyyaml"),
}


def missing_hint(e):
    """How to get a package E2B's template has and the sandbox has not, for a cell's ModuleNotFoundError."""
    name = (getattr(e, "name", None) or "").split(".")[0] if isinstance(e, ModuleNotFoundError) else ""
    if name not in MISSING_PACKAGES:
        return ""
    debian, pip = MISSING_PACKAGES[name]
    return f" (not in this sandbox: `!apt-get install -y {debian}` or `%pip install {pip}` puts it there)"


def quiet(code):
    """IPython's rule: a cell whose last token, comments aside, is `;` shows no value."""
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    skip = (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    last = next((t for t in reversed(tokens) if t.type not in skip), None)
    return last is not None and last.type == tokenize.OP and last.string == ";"


# ------------------------------------------------------------------------------------------ matplotlib's figures

# the backend a kernel's matplotlib gets (unless MPLBACKEND says another): Agg's canvas, whose
# `plt.show()` gives the open figures as results, as Jupyter's inline backend does
INLINE_BACKEND = "module://svc_inline"


class InlineBackend(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """
    Finds `svc_inline`, the backend, for matplotlib, and when a cell first imports matplotlib sets it
    as the backend (rcParams, not MPLBACKEND: a Python program the cell starts must not look for a
    module only the kernel has). `show` gives the open figures as results. When matplotlib's axes
    load, their box plots start keeping their statistics (for any figure, pyplot's or not).
    """

    def __init__(self, show):
        self.show = show

    def find_spec(self, name, path, target=None):
        if name == "svc_inline":
            return importlib.util.spec_from_loader(name, self)
        if name == "matplotlib.axes":
            return loaded_then(name, path, lambda module: keep_box_stats(module.Axes))
        if name == "matplotlib" and "MPLBACKEND" not in os.environ:
            return loaded_then(name, path, lambda module: module.rcParams.__setitem__("backend", INLINE_BACKEND))
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from matplotlib.backend_bases import FigureManagerBase
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        module.FigureCanvas = FigureCanvasAgg
        module.FigureManager = FigureManagerBase
        module.show = lambda *args, **kwargs: self.show()
        module.draw_if_interactive = lambda *args, **kwargs: None


def loaded_then(name, path, then):
    """The spec Python's own finders give `name`, its module handed to `then` once it has run."""
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None:
        return None
    run = spec.loader.exec_module

    def exec_module(module):
        run(module)
        then(module)

    spec.loader.exec_module = exec_module
    return spec


def keep_box_stats(Axes):
    """
    Box plots keep their statistics on their axes (`_svc_boxes`), whatever figure they are on: what is
    drawn of them is lines that do not say which is a whisker, and E2B's `box_and_whisker` chart gives
    the numbers.
    """
    import inspect

    drawn = Axes.bxp
    if getattr(drawn, "svc_keeps", False):
        return
    signature = inspect.signature(drawn)

    def bxp(self, bxpstats, *args, **kwargs):
        stats = list(bxpstats)
        artists = drawn(self, stats, *args, **kwargs)
        given = signature.bind(self, stats, *args, **kwargs).arguments
        horizontal = given.get("orientation") == "horizontal" or given.get("vert", True) is False
        positions = given.get("positions")
        positions = list(positions) if positions is not None else list(range(1, len(stats) + 1))
        boxes = getattr(self, "_svc_boxes", [])
        boxes.append({"stats": stats, "positions": positions, "horizontal": horizontal, "artists": artists})
        self._svc_boxes = boxes
        return artists

    bxp.svc_keeps = True
    Axes.bxp = bxp


def open_figures():
    """
    pyplot's open figures, closed, to be shown as Jupyter's inline backend shows them at
    `plt.show()` and after each cell: a figure is shown once, and the next cell starts with none.
    """
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None or pyplot.rcParams["backend"] != INLINE_BACKEND:
        return []
    from matplotlib._pylab_helpers import Gcf

    figures = [m.canvas.figure for m in Gcf.get_all_fig_managers()]
    pyplot.close("all")
    return figures


# the formats figures are given in (`%config InlineBackend.figure_formats`): matplotlib's format
# (also the result's key) and resolution for each of the names the inline backend takes
FIGURE_FORMATS = {
    "png": ("png", 1),
    "retina": ("png", 2),
    "png2x": ("png", 2),
    "jpeg": ("jpeg", 1),
    "jpg": ("jpeg", 1),
    "svg": ("svg", 1),
    "pdf": ("pdf", 1),
}
figure_formats_chosen = ["png"]


def figure_formats(figure):
    """A figure as E2B's code interpreter gives it: a PNG (or the formats chosen), and its data as a `chart`."""
    out = {}
    for name in figure_formats_chosen:
        fmt, scale = FIGURE_FORMATS[name]
        data = io.BytesIO()
        figure.canvas.print_figure(data, format=fmt, bbox_inches="tight", dpi=figure.dpi * scale)
        value = data.getvalue()
        out[fmt] = value.decode("utf-8") if fmt == "svg" else base64.b64encode(value).decode("ascii")
    # drawn now, the tick labels have their text
    try:
        chart = chart_of(figure)
    except Exception:  # noqa: BLE001 - a figure this reading does not know: its picture alone
        chart = None
    if chart is not None:
        out["chart"] = chart
    return out


def chart_of(figure):
    """E2B's `chart` of a figure: one axes' chart, a `superchart` of several, None when no axes has one."""
    charts = [c for c in (axes_chart(ax) for ax in figure.axes) if c is not None]
    if len(charts) <= 1:
        return charts[0] if charts else None
    title = figure._suptitle.get_text() if getattr(figure, "_suptitle", None) is not None else ""
    return {"type": "superchart", "title": title, "elements": charts}


def axes_chart(ax):
    """One axes as E2B's chart types (`pie`, `box_and_whisker`, `bar`, `line`, `scatter`), by what is drawn on it."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    from matplotlib.patches import Wedge

    title = ax.get_title()
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if wedges:
        elements = [{"label": w.get_label(), "angle": abs(w.theta2 - w.theta1), "radius": w.r} for w in wedges]
        return {"type": "pie", "title": title, "elements": elements}
    axes2d = {"title": title, "x_label": ax.get_xlabel(), "y_label": ax.get_ylabel()}
    # box plots whose lines are still on the axes (not cleared since)
    boxes = [b for b in getattr(ax, "_svc_boxes", []) if any(line in ax.lines for line in b["artists"]["medians"])]
    if boxes:
        elements = []
        for b in boxes:
            axis = ax.yaxis if b["horizontal"] else ax.xaxis
            for stat, at in zip(b["stats"], b["positions"]):
                elements.append({
                    "label": str(stat["label"]) if "label" in stat else tick_text(axis, at),
                    "min": float(stat["whislo"]),
                    "first_quartile": float(stat["q1"]),
                    "median": float(stat["med"]),
                    "third_quartile": float(stat["q3"]),
                    "max": float(stat["whishi"]),
                    "outliers": [float(v) for v in stat.get("fliers", [])],
                })
        return {"type": "box_and_whisker", **axes2d, "elements": elements}
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if bars:
        elements = []
        for c in bars:
            horizontal = getattr(c, "orientation", None) == "horizontal"
            axis = ax.yaxis if horizontal else ax.xaxis
            group = label_of(c)
            for rect in c.patches:
                at = rect.get_y() + rect.get_height() / 2 if horizontal else rect.get_x() + rect.get_width() / 2
                value = rect.get_width() if horizontal else rect.get_height()
                elements.append({"label": tick_text(axis, at), "value": number_text(value), "group": group})
        return {"type": "bar", **axes2d, "elements": elements}
    lines = [line for line in ax.get_lines() if len(line.get_xdata())]
    dots = [c for c in ax.collections if isinstance(c, PathCollection) and len(c.get_offsets())]
    if not lines and not dots:
        return None
    x, y = Scale(ax.xaxis), Scale(ax.yaxis)
    if lines:
        kind = "line"
        elements = [
            {"label": label_of(line), "points": points(line.get_xdata(), line.get_ydata(), x, y)} for line in lines
        ]
    else:
        kind = "scatter"
        elements = [
            {"label": label_of(c), "points": points(c.get_offsets()[:, 0], c.get_offsets()[:, 1], x, y)} for c in dots
        ]
    x_ticks, x_labels = ticks(ax.xaxis, x)
    y_ticks, y_labels = ticks(ax.yaxis, y)
    return {
        "type": kind,
        **axes2d,
        "x_scale": x.kind,
        "x_ticks": x_ticks,
        "x_tick_labels": x_labels,
        "y_scale": y.kind,
        "y_ticks": y_ticks,
        "y_tick_labels": y_labels,
        "elements": elements,
    }


def ticks(axis, scale):
    """An axis's ticks in its view (its locator gives some beyond) as the data had them, and their labels as drawn."""
    low, high = sorted(axis.get_view_interval())
    slack = (high - low) * 1e-9
    kept = [
        (t, text.get_text())
        for t, text in zip(axis.get_ticklocs(), axis.get_ticklabels())
        if low - slack <= t <= high + slack
    ]
    return [scale.value(t) for t, _ in kept], [label for _, label in kept]


class Scale:
    """An axis's scale as E2B names it, and its values as the data had them: dates, categories, numbers."""

    def __init__(self, axis):
        units = axis.get_units()
        converter = type(axis.get_converter() if hasattr(axis, "get_converter") else axis.converter).__name__
        self.names = {}
        if units is not None and hasattr(units, "_mapping"):
            self.kind = "categorical"
            self.names = {v: k for k, v in units._mapping.items()}
        elif "Date" in converter:
            self.kind = "datetime"
        else:
            self.kind = axis.get_scale()

    def value(self, v):
        """A value on the axis (a tick, a scatter's offset) as the data had it; None where it is no number."""
        if isinstance(v, str):
            return v
        if hasattr(v, "isoformat"):
            return v.isoformat()
        try:
            v = float(v)
        except (TypeError, ValueError):
            return str(v)
        if not math.isfinite(v):
            return None
        if self.kind == "datetime":
            from matplotlib.dates import num2date

            return num2date(v).isoformat()
        if self.kind == "categorical":
            return self.names.get(round(v), v)
        return v


def points(xs, ys, x, y):
    """A line's or a scatter's points, [x, y] each; those with a coordinate that is no finite number left out."""
    out = []
    for a, b in zip(xs, ys):
        a, b = x.value(a), y.value(b)
        if a is not None and b is not None:
            out.append([a, b])
    return out


def tick_text(axis, at):
    """The label of the tick at `at` (a bar's middle), or the number itself where no tick is there."""
    for tick, text in zip(axis.get_ticklocs(), axis.get_ticklabels()):
        if abs(tick - at) < 1e-9 and text.get_text():
            return text.get_text()
    return number_text(at)


def number_text(v):
    v = float(v)
    return str(int(v)) if v.is_integer() else repr(v)


def label_of(artist):
    """An artist's label; matplotlib's own names for unlabeled ones (`_child0`) are no label."""
    label = artist.get_label()
    return "" if label is None or str(label).startswith("_") else str(label)


def frame_data(frame):
    """A DataFrame as E2B's `data`: its columns' values by name, as JSON has them (dates ISO 8601, missing null)."""
    return {str(name): [json_value(v) for v in values] for name, values in frame.to_dict(orient="list").items()}


def json_value(v):
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if type(v).__name__ in ("NaTType", "NAType"):
        return None
    if hasattr(v, "isoformat"):
        return v.isoformat()
    item = getattr(v, "item", None)
    if callable(item):
        try:
            v = item()
        except (TypeError, ValueError):
            return str(v)
        if v is None or isinstance(v, (bool, int, str, float)):
            return json_value(v)
    return str(v)


# ------------------------------------------------------------------------------------------ IPython's escapes

# `!cmd`, `name = !cmd`, `%magic args` at the start of a line (not `!=` or `%=`)
ESCAPE = re.compile(r"^(\s*)(?:([A-Za-z_]\w*)\s*=\s*)?(!|%)(?![=!%])(.*)$")


def escapes(code):
    """
    The cell with IPython's escapes as calls of the kernel's Magics: a line `!cmd` (`x = !cmd`: its
    lines), `%name args`, and a first line `%%name args` that makes the cell that magic's. One line
    stays one line, so an error's line number is the cell's.
    """
    lines = code.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name, _, arg = lines[first].strip()[2:].partition(" ")
        body = "\n".join(lines[first + 1 :])
        return "\n" * first + f"__svc_magics__.cell({name!r}, {arg.strip()!r}, {body!r})"
    out = []
    for line in lines:
        m = ESCAPE.match(line)
        if m is None:
            out.append(line)
            continue
        indent, target, kind, rest = m.groups()
        if kind == "!":
            call = f"__svc_magics__.shell(__svc_magics__.expand({rest.strip()!r}), capture={bool(target)})"
        else:
            name, _, arg = rest.strip().partition(" ")
            arg = repr(arg.strip()) if name in Magics.PYTHON else f"__svc_magics__.expand({arg.strip()!r})"
            call = f"__svc_magics__.line({name!r}, {arg})"
        out.append(f"{indent}{target + ' = ' if target else ''}{call}")
    return "\n".join(out)


class Expander(string.Formatter):
    """
    IPython's expansion of a shell escape's or a line magic's text: `{expr}` is a Python expression's
    value (with `!r` and a format spec), `$name` (or `$name.attr`) a variable's, outside single quotes;
    `$$` and `{{`, `}}` are a dollar and braces.
    """

    # a `$` with a name after it (`$$name`: a dollar kept), an even number of single quotes after it
    DOLLAR = re.compile(r"\$(\$?[\w.]+)(?=(?:[^']*'[^']*')*[^']*$)")

    def parse(self, format_string):
        for literal, field, spec, conversion in super().parse(format_string):
            kept = ""
            at = 0
            for m in self.DOLLAR.finditer(literal):
                if m.group(1).startswith("$"):
                    kept += literal[at : m.start()] + m.group(1)
                else:
                    yield kept + literal[at : m.start()], m.group(1), "", None
                    kept = ""
                at = m.end()
            yield kept + literal[at:], field, spec, conversion

    def get_field(self, field_name, args, kwargs):
        return eval(field_name, kwargs), field_name


class UsageError(Exception):
    """A magic this kernel does not have, or one used wrongly (IPython's name for it)."""


class Magics:
    """The IPython escapes people's notebooks use most, run as IPython runs them."""

    SHELL = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    # IPython's aliases of shell commands (its defaults on Linux)
    ALIASES = {
        "cat": "cat",
        "cp": "cp",
        "ls": "ls -F",
        "ll": "ls -F -l",
        "mkdir": "mkdir",
        "mv": "mv",
        "rm": "rm",
        "rmdir": "rmdir",
    }

    # magics whose argument is Python, not expanded
    PYTHON = ("time", "timeit")

    def __init__(self, namespace):
        self.namespace = namespace

    def expand(self, text):
        """
        `text` with its `{expr}` and `$name` made values in the namespace of the cell or function it
        stands in; as IPython, left whole when one of them cannot be (a shell's `$HOME`, `{1..3}`).
        """
        try:
            return Expander().vformat(text, (), names_at(sys._getframe(1)))
        except Exception:  # noqa: BLE001 - any error of any expression: the text as it was
            return text

    def shell(self, cmd, capture=False):
        """`!cmd`: through the shell, its output as it comes; `x = !cmd`: its lines. `_exit_code` is its status."""
        sys.stdout.flush()
        sys.stderr.flush()
        if capture:
            r = subprocess.run([self.SHELL, "-c", cmd], stdout=subprocess.PIPE, text=True, errors="replace")
            self.namespace["_exit_code"] = r.returncode
            return r.stdout.splitlines()
        self.namespace["_exit_code"] = subprocess.call([self.SHELL, "-c", cmd])
        return None

    def line(self, name, arg):
        if name == "time":
            return self.time(arg, sys._getframe(1))
        if name == "timeit":
            return self.timeit(arg, None, sys._getframe(1))
        if name == "pip":
            return self.shell(f"{shlex.quote(sys.executable)} -m pip {arg}")
        if name == "cd":
            os.chdir(os.path.expanduser(arg or "~"))
            print(os.getcwd())
            return None
        if name == "pwd":
            return os.getcwd()
        if name == "env":
            if not arg:
                return dict(os.environ)
            key, sep, value = arg.partition("=") if "=" in arg else arg.partition(" ")
            if not sep:
                return os.environ.get(key)
            os.environ[key.strip()] = value.strip()
            print(f"env: {key.strip()}={value.strip()}")
            return None
        if name in ("sx", "system"):
            return self.shell(arg, capture=True)
        if name in self.ALIASES:
            return self.shell(f"{self.ALIASES[name]} {arg}")
        if name == "matplotlib":
            return self.matplotlib(arg.strip())
        if name == "config":
            return self.config(arg.strip())
        raise UsageError(
            f"Line magic function `%{name}` not found (this kernel has %cd, %config, %env, %matplotlib, %pip, "
            f"%pwd, %sx, %time, %timeit, %{', %'.join(self.ALIASES)} and !command)."
        )

    def config(self, arg):
        """`%config InlineBackend.figure_format = 'retina'` (or `figure_formats = {'png', 'svg'}`): how figures come."""
        global figure_formats_chosen
        key, sep, value = arg.partition("=")
        key = key.strip()
        if not sep or key not in ("InlineBackend.figure_format", "InlineBackend.figure_formats"):
            raise UsageError(
                "%config: this kernel sets InlineBackend.figure_format (or figure_formats) alone, "
                f"as `%config InlineBackend.figure_format = 'retina'`; not {arg!r}"
            )
        chosen = ast.literal_eval(value.strip())
        chosen = [chosen] if isinstance(chosen, str) else sorted(chosen)
        unknown = [c for c in chosen if c not in FIGURE_FORMATS]
        if unknown or not chosen:
            raise UsageError(f"%config {key}: {unknown or chosen} is not among {', '.join(FIGURE_FORMATS)}")
        figure_formats_chosen = chosen

    def matplotlib(self, backend):
        """`%matplotlib [inline]`: figures as results (the default already); a sandbox has no screen for others."""
        if backend not in ("", "inline"):
            raise UsageError(
                f"%matplotlib {backend}: a sandbox has no screen; `%matplotlib inline` (the default) gives "
                "figures as results"
            )
        import matplotlib

        matplotlib.use(INLINE_BACKEND)
        if not backend:
            print(f"Using matplotlib backend: {INLINE_BACKEND}")

    def cell(self, name, arg, body):
        sys.stdout.flush()
        sys.stderr.flush()
        if name in ("bash", "sh"):
            code = subprocess.call(["/bin/bash" if name == "bash" else "/bin/sh", "-c", body])
            if code != 0:
                raise subprocess.CalledProcessError(code, name)
            return None
        if name == "time":
            return self.time(body, sys._getframe(1))
        if name == "timeit":
            return self.timeit(arg, body, sys._getframe(1))
        if name == "writefile":
            append = arg.startswith("-a ") or arg.startswith("--append ")
            path = os.path.expanduser(arg.split(" ", 1)[1].strip() if append else arg)
            if not path:
                raise UsageError("%%writefile needs a file name")
            print(f"{'Appending to' if append else 'Overwriting' if os.path.exists(path) else 'Writing'} {path}")
            with open(path, "a" if append else "w", encoding="utf-8") as f:
                f.write(body if body.endswith("\n") or not body else body + "\n")
            return None
        raise UsageError(
            f"Cell magic `%%{name}` not found (this kernel has %%bash, %%sh, %%time, %%timeit and %%writefile)."
        )

    def time(self, code, frame):
        """`%time CODE`, `%%time`: runs it once and says its CPU and wall time, as IPython does; returns its value."""
        # compiled before the clock starts: a syntax error is no run
        tree = ast.parse(code, "<magic>", "exec")
        last = tree.body.pop().value if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        body = compile(tree, "<magic>", "exec")
        value = None if last is None else compile(ast.Expression(last), "<magic>", "eval")
        cpu, wall = os.times(), time.perf_counter()
        try:
            exec(body, frame.f_globals, frame.f_locals)
            return None if value is None else eval(value, frame.f_globals, frame.f_locals)
        finally:
            took, end = time.perf_counter() - wall, os.times()
            user, system = end.user - cpu.user, end.system - cpu.system
            print(f"CPU times: user {span(user)}, sys: {span(system)}, total: {span(user + system)}")
            print(f"Wall time: {span(took)}")

    def timeit(self, arg, body, frame):
        """
        `%timeit [-n N] [-r R] [-q] STATEMENT`, `%%timeit [options] [SETUP]` over a cell: the mean and
        deviation of R runs of N loops (N the first power of ten that takes 0.2 s), as IPython says them.
        """
        number, repeat, quiet = 0, 7, False
        rest = arg.strip()
        # the options before the statement, which is taken as written
        while rest.startswith("-"):
            m = re.match(r"(-q|-n\s*([1-9]\d*)|-r\s*([1-9]\d*))(\s+|$)", rest)
            if m is None:
                raise UsageError(f"%timeit: {rest.split()[0]} is not an option this kernel has (-n N, -r R, -q)")
            quiet = quiet or m.group(1) == "-q"
            number = int(m.group(2)) if m.group(2) else number
            repeat = int(m.group(3)) if m.group(3) else repeat
            rest = rest[m.end() :]
        statement, setup = (body, rest or "pass") if body is not None else (rest, "pass")
        if not statement.strip():
            raise UsageError("%timeit needs a statement")
        import timeit  # 3 ms of every kernel's start otherwise

        timer = timeit.Timer(statement, setup, globals=names_at(frame))
        if not number:
            number = 1
            while timer.timeit(number) < 0.2 and number < 10**9:
                number *= 10
        runs = [t / number for t in timer.repeat(repeat=repeat, number=number)]
        if not quiet:
            mean = sum(runs) / len(runs)
            deviation = (sum((t - mean) ** 2 for t in runs) / len(runs)) ** 0.5
            runs_said = f"{repeat} run{'s' if repeat > 1 else ''}, {number:,} loop{'s' if number > 1 else ''} each"
            print(f"{span(mean)} ± {span(deviation)} per loop (mean ± std. dev. of {runs_said})")
        return None


def names_at(frame):
    """What a name means where `frame` runs: its locals over its globals (a cell's are the kernel's namespace)."""
    return {**frame.f_globals, **frame.f_locals}


def span(seconds):
    """A time as IPython says it: three digits and a unit (`1.23 ms`), minutes past a minute."""
    if seconds >= 60:
        minutes, rest = divmod(seconds, 60)
        return f"{int(minutes)}min {rest:.0f}s"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


# ------------------------------------------------------------------------------------------ server


class Context:
    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()
        self.kernel = None

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def start(self):
        if self.language == "bash":
            return
        r, w = os.pipe()
        nonce = uuid.uuid4().hex
        if self.language in ("js", "ts"):
            argv = ["node", JS_KERNEL, str(w), nonce] + (["--typescript"] if self.language == "ts" else [])
        else:
            argv = [sys.executable, "-u", os.path.abspath(__file__), "--kernel", str(w), nonce]
        try:
            self.kernel = subprocess.Popen(
                argv,
                cwd=self.cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(w,),
            )
        except FileNotFoundError:
            os.close(r)
            raise ValueError(f"language {self.language!r} needs {argv[0]} on the sandbox's PATH") from None
        finally:
            os.close(w)
        pipes = (("stdout", self.kernel.stdout), ("stderr", self.kernel.stderr))
        self.printed = [Printed(name, pipe, mark_of(nonce)) for name, pipe in pipes]
        self.events = os.fdopen(r, "rb", buffering=0)
        self.buffered = b""
        # the number of the last event sent
        self.sent = 0

    def stop(self):
        if self.kernel is not None:
            self.kernel.kill()
            self.kernel.wait()
            for f in (self.kernel.stdin, self.kernel.stdout, self.kernel.stderr, self.events):
                f.close()
            self.kernel = None

    def execute(self, code, env, send, gone, base=None, counted=True):
        """Runs one cell, giving its events to `send`; `gone()` says the caller went away.

        `base` is the sandbox's envs, under the cell's `env`."""
        with self.lock:
            if self.language == "bash":
                return self.execute_bash(code, {**(base or {}), **env}, send, gone)
            if self.kernel is None or self.kernel.poll() is not None:
                self.stop()
                self.start()
            try:
                self.kernel.stdin.write((json.dumps({"code": code, "env": env, "base": base or {}, "counted": counted}) + "\n").encode())
                self.kernel.stdin.flush()
            except BrokenPipeError:
                pass  # it died just now: its events' end of file below says so
            sel = selectors.DefaultSelector()
            sel.register(self.events, selectors.EVENT_READ, "events")
            for out in self.printed:
                if not out.ended:
                    sel.register(out.pipe, selectors.EVENT_READ, out)
            interrupted = False
            try:
                while True:
                    for key, _ in sel.select(timeout=0.5):
                        if key.data != "events":
                            key.data.read(send, self.sent)
                            if key.data.ended:
                                sel.unregister(key.fileobj)  # a cell closed it (os.close(1))
                            continue
                        data = os.read(key.fileobj.fileno(), 65536)
                        if not data:
                            # the kernel died (os._exit, a crash, the OOM killer): a new one next time
                            for out in self.printed:
                                out.read(send, float("inf"), whole=True)
                            send({
                                "type": "error",
                                "name": "KernelDied",
                                "value": f"the context's {KERNEL_NAMES[self.language]} process ended; "
                                "it starts again, without its variables",
                                "traceback": "",
                            })
                            self.stop()
                            return
                        self.buffered += data
                        while b"\n" in self.buffered:
                            line, self.buffered = self.buffered.split(b"\n", 1)
                            event = json.loads(line)
                            seq = event.pop("seq", self.sent + 1)
                            # what was printed before this event goes first (up to its mark; the mark
                            # is in the pipe, written before the event)
                            for out in self.printed:
                                out.read(send, seq - 1, whole=True)
                            if event["type"] != "done":
                                send(event)
                            self.sent = seq
                            for out in self.printed:
                                out.read(send, seq, whole=True)
                            if event["type"] == "done":
                                return
                    if not interrupted and gone():
                        interrupted = True
                        self.kernel.send_signal(signal.SIGINT)
            finally:
                sel.close()

    def execute_bash(self, code, env, send, gone):
        p = subprocess.Popen(
            ["bash", "-c", code],
            cwd=self.cwd,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ, "stdout")
        sel.register(p.stderr, selectors.EVENT_READ, "stderr")
        decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        open_pipes = 2
        try:
            while open_pipes:
                for key, _ in sel.select(timeout=0.5):
                    data = os.read(key.fileobj.fileno(), PIECE)
                    send_lines(key.data, decoders[key.data].decode(data, final=not data), send)
                    if not data:
                        sel.unregister(key.fileobj)
                        open_pipes -= 1
                if gone() and p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            code = p.wait()
        finally:
            sel.close()
        if code != 0:
            send({"type": "error", "name": "ExitError", "value": f"exit status {code}", "traceback": ""})


def send_lines(name, text, send):
    """What was printed on `name` as output events: one a line."""
    start = 0
    while start < len(text):
        end = text.find("\n", start) + 1 or len(text)
        send({"type": name, "text": text[start:end]})
        start = end


class Printed:
    """
    A kernel's stdout or stderr pipe, which its prints and the processes it starts share. What
    comes after the kernel's mark N is held until event N has been sent, so output and events
    come in the order they happened in. The pipe is never waited on: a read for an event may take
    what made it ready for the select loop in the same round.
    """

    def __init__(self, name, pipe, mark):
        self.name = name
        self.pipe = pipe
        self.mark = mark
        self.raw = b""
        self.ended = False
        # a character cut by a read is put back together
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        os.set_blocking(pipe.fileno(), False)

    def read(self, send, sent, whole=False):
        """
        Reads what the pipe holds (one read, or until it is empty when `whole`), and sends what may
        go once the events up to number `sent` have been sent.
        """
        while not self.ended:
            data = read_now(self.pipe)
            if data is None:
                break
            self.raw += data
            self.ended = not data
            if not whole:
                break
        # an empty pipe holds no part of a mark (one is written whole): a part at the end is output
        settled = whole or self.ended
        out = []
        while True:
            i = self.raw.find(self.mark)
            if i < 0:
                keep = 0 if settled else overlap(self.raw, self.mark)
                out.append(self.raw[: len(self.raw) - keep])
                self.raw = self.raw[len(self.raw) - keep :]
                break
            out.append(self.raw[:i])
            j = self.raw.find(b"\0", i + len(self.mark))
            number = self.raw[i + len(self.mark) : j]
            if j < 0 and not settled:
                self.raw = self.raw[i:]  # cut by a read
                break
            if j < 0 or not number.isdigit():
                out.append(self.raw[i : i + len(self.mark)])  # no mark: output that looks like one
                self.raw = self.raw[i + len(self.mark) :]
                continue
            if int(number) > sent:
                self.raw = self.raw[i:]
                break
            self.raw = self.raw[j + 1 :]
        send_lines(self.name, self.decoder.decode(b"".join(out), final=self.ended and not self.raw), send)


def overlap(data, mark):
    """How many bytes at the end of `data` are the start of `mark`."""
    for n in range(min(len(data), len(mark) - 1), 0, -1):
        if data.endswith(mark[:n]):
            return n
    return 0


def read_now(f):
    """What a pipe that does not block holds now (b"" at its end), or None when it holds nothing."""
    try:
        return os.read(f.fileno(), PIECE)
    except BlockingIOError:
        return None


class SandboxEnvs:
    """The sandbox's envs: the JSON object in `path`, read again when the file changes; none without one."""

    def __init__(self, path):
        self.path = path
        self.seen = None
        self.envs = {}
        self.lock = threading.Lock()

    def get(self):
        if not self.path:
            return {}
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            return {}
        with self.lock:
            if stamp != self.seen:
                try:
                    with open(self.path, "rb") as f:
                        obj = json.loads(f.read(MAX_BODY))
                    ok = isinstance(obj, dict) and all(isinstance(v, str) for v in obj.values())
                    self.envs = {str(k): v for k, v in obj.items()} if ok else {}
                except (OSError, ValueError):
                    self.envs = {}
                self.seen = stamp
            return dict(self.envs)


def language_of(name):
    """A language as the contexts know it: python when none is named."""
    name = (name or "python").lower()
    return LANGUAGE_NAMES.get(name, name)


class Interpreter:
    def __init__(self, cwd, envs_file=None):
        self.cwd = cwd
        self.envs = SandboxEnvs(envs_file)
        self.contexts = {}
        self.defaults = {}
        self.lock = threading.Lock()
        self.making = threading.Lock()

    def create(self, language, cwd):
        language = language_of(language)
        if language not in LANGUAGES:
            raise ValueError(f"language {language!r} is not one svc's code interpreter runs ({', '.join(LANGUAGES)})")
        cwd = cwd or self.cwd
        if not os.path.isdir(cwd):
            raise ValueError(f"cwd {cwd!r} is not a directory in the sandbox")
        ctx = Context(language, cwd)
        ctx.start()
        with self.lock:
            self.contexts[ctx.id] = ctx
        return ctx

    def default(self, language):
        """The context of a language that executions naming none run in, made at first use."""
        language = language_of(language)
        with self.making:
            ctx = self.defaults.get(language)
            if ctx is None:
                ctx = self.defaults[language] = self.create(language, None)
        return ctx


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "svc-code-interpreter"

    def log_message(self, *args):
        pass

    def answer(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fail(self, status, message):
        self.answer(status, {"code": status, "message": message})

    def body(self):
        obj = json.loads(self.raw or b"{}")
        if not isinstance(obj, dict):
            raise ValueError("the request body must be a JSON object")
        return obj

    def context(self, parts):
        ctx = self.server.interpreter.contexts.get(parts[1]) if len(parts) > 1 else None
        if ctx is None:
            self.fail(404, f"no context {parts[1] if len(parts) > 1 else ''}")
        return ctx

    def route(self):
        path = self.path.split("?", 1)[0]
        parts = [p for p in path.split("/") if p]
        interp = self.server.interpreter
        # every request's body is read, whether its route wants it or not: what is left of one
        # would be taken for the next request on the connection
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY or self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return self.fail(413, f"a request body is at most {MAX_BODY} bytes, with its length given")
        self.raw = self.rfile.read(length) if length else b""
        try:
            if self.command == "GET" and parts == ["health"]:
                data = b"OK"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif self.command == "POST" and parts == ["execute"]:
                self.execute(self.body())
            elif self.command == "POST" and parts == ["contexts"]:
                b = self.body()
                self.answer(200, interp.create(b.get("language"), b.get("cwd")).describe())
            elif self.command == "GET" and parts == ["contexts"]:
                self.answer(200, [c.describe() for c in list(interp.contexts.values())])
            elif self.command == "DELETE" and len(parts) == 2 and parts[0] == "contexts":
                ctx = self.context(parts)
                if ctx:
                    with interp.lock:
                        interp.contexts.pop(ctx.id, None)
                        for lang, d in list(interp.defaults.items()):
                            if d is ctx:
                                del interp.defaults[lang]
                    ctx.stop()
                    self.answer(204)
            elif self.command == "POST" and len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
                ctx = self.context(parts)
                if ctx:
                    with ctx.lock:
                        ctx.stop()
                        ctx.start()
                    self.answer(204)
            else:
                self.fail(404, f"no route {self.command} {path}")
        except (ValueError, KeyError, TypeError) as e:
            self.fail(400, str(e))

    do_GET = do_POST = do_DELETE = route

    def execute(self, b):
        code = b.get("code")
        if not isinstance(code, str):
            raise ValueError("code must be a string")
        env = b.get("env_vars") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError("env_vars must map names to strings")
        interp = self.server.interpreter
        if b.get("context_id"):
            ctx = interp.contexts.get(b["context_id"])
            if ctx is None:
                return self.fail(404, f"no context {b['context_id']}")
        else:
            ctx = interp.default(b.get("language"))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        conn = self.connection
        lost = []

        def send(obj):
            if lost:
                return
            data = (json.dumps(obj) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            except OSError:
                lost.append(True)

        def gone():
            if lost:
                return True
            # a caller that closed its side reads as end of file (nothing else is sent on it)
            try:
                conn.setblocking(False)
                try:
                    if conn.recv(1, socket.MSG_PEEK) == b"":
                        lost.append(True)
                except BlockingIOError:
                    pass
                finally:
                    conn.setblocking(True)
            except OSError:
                lost.append(True)
            return bool(lost)

        ctx.execute(code, env, send, gone, base=interp.envs.get())
        send({"type": "end_of_execution"})
        if not lost:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass


def warm_up(interp, warm_file, preload=()):
    """
    Starts the default kernel and runs a first cell in it: an empty one, or one that imports the
    `preload` modules that are there (binding no name: a cell's own `import pandas` then finds it
    loaded). svc preloads the heavy ones in the VM that E2B's template clones, so each clone has them.
    """
    code = "\n".join(f"try:\n    __import__({m!r})\nexcept Exception:\n    pass" for m in preload) or "None"
    interp.default("python").execute(code, {}, lambda event: None, lambda: False, counted=False)
    if warm_file:
        with open(warm_file, "w") as f:
            f.write("warm\n")


def main():
    if sys.argv[1:2] == ["--kernel"]:
        return kernel_main(int(sys.argv[2]), sys.argv[3])
    port = 49999
    host = "127.0.0.1"
    envs_file = None
    warm_file = None
    preload = []
    args = sys.argv[1:]
    while args:
        flag = args.pop(0)
        if flag == "--port":
            port = int(args.pop(0))
        elif flag == "--host":
            host = args.pop(0)
        elif flag == "--envs":
            envs_file = args.pop(0)
        elif flag == "--warm":
            warm_file = args.pop(0)
        elif flag == "--preload":
            preload = [m for m in args.pop(0).split(",") if m]
        else:
            sys.exit(f"usage: {sys.argv[0]} [--host H] [--port N] [--envs FILE] [--warm FILE] [--preload MODULE,...]")
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.interpreter = Interpreter(os.getcwd(), envs_file)
    # the default Python kernel starts now, not at the first execution, and runs an empty cell
    threading.Thread(target=warm_up, args=(server.interpreter, warm_file, preload), daemon=True).start()
    print(f"svc code interpreter on {host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
