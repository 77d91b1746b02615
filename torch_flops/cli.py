"""``torch-flops`` / ``python -m torch_flops``: profile a model from the command line.

::

    torch-flops resnet50 --input-shape 1,3,224,224            # summary + module tree
    torch-flops gpt2 --meta --tokens 1,1024 --depth 2 --top 5  # no weights allocated, no timing
    torch-flops mypkg.models:build_net --input-shape 8,3,32,32 --format json --output net.json
    torch-flops path/to/config.json --meta --tokens 1,4096     # a transformers config
    torch-flops gpt2 --meta --tokens 8,1024 --hardware h100-sxm --roofline --plot gpt2.png
    torch-flops resnet50 --html resnet50.html                  # also the one-file HTML report
    torch-flops --list                                         # the zoo
    torch-flops --list-hardware                                # the roofline's hardware table
    torch-flops merge profile-0.json profile-1.json            # the ranks of a distributed run
    torch-flops diff before.json after.json --fail-on "flops>+1%"   # compare two profiles; a CI gate

MODEL is a zoo name, an import path ``package.module:factory`` (a callable returning the model,
or the model object itself) or a transformers ``config.json`` (or its directory). This module
only parses arguments, builds the model and its inputs, and calls the public API
(:func:`torch_flops.profile` and :mod:`torch_flops.report`). Errors are one line on stderr and a
non-zero exit: 2 for bad arguments, 1 when building or profiling the model fails (``diff``: 1
when a ``--fail-on`` threshold was crossed). Every file written is announced on stderr
("wrote PATH"); output piped into a reader that stops early (``| head``) ends quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import importlib
import inspect
import json
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import torch
from torch import nn

from torch_flops import hardware, report, zoo
from torch_flops.api import compare_compiled, profile
from torch_flops.comm import rank_path
from torch_flops.conventions import CONVENTIONS
from torch_flops.diff import diff, parse_check
from torch_flops.distributed import merge_profiles
from torch_flops.hardware import HardwareSpec
from torch_flops.html import write_html
from torch_flops.records import Profile
from torch_flops.roofline import roofline
from torch_flops.training import TrainingProfiler, step_summary_text

__all__ = ["main"]

_FORMATS = ("tree", "table", "json", "csv", "markdown")
_LOSSES = ("sum", "mse", "ce")
#: --optimizer: the torch.optim class of each name (Adafactor where this torch has it)
_OPTIMIZERS = {name: cls for name, cls in (
    ("sgd", torch.optim.SGD), ("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW),
    ("adagrad", torch.optim.Adagrad), ("rmsprop", torch.optim.RMSprop),
    ("adafactor", getattr(torch.optim, "Adafactor", None))) if cls is not None}
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
_DEFAULT_TOKENS = (1, 128)
#: the subcommands (the first argument)
_COMMANDS = {"merge": "one report from the JSON profiles of the ranks of a distributed run",
             "diff": "compare two JSON profiles per module and operator; --fail-on EXPR gates on the change"}
_EPILOG = """\
MODEL: a zoo name (see --list), an import path package.module:factory, or a transformers config.json (or its
directory).

commands (torch-flops COMMAND --help for theirs):
  torch-flops merge FILE [FILE ...]        {merge}
  torch-flops diff A.json B.json           {diff}

Timings are warm by default on the command line (--warmup 1: one untimed call first); --warmup 0 times the
first (cold) call, as the Python API's default does."""


class CLIError(Exception):
    """A problem to report as one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CLIError(message + self._suggestion(message), code=2)

    def _suggestion(self, message: str) -> str:
        """" (did you mean --depth?)" for a mistyped option or choice."""
        found = re.match(r"unrecognized arguments: (.*)", message)
        if found:
            options = [o for o in self._option_string_actions if o.startswith("--")]
            for word in found[1].split():
                if word.startswith("-"):
                    close = difflib.get_close_matches(word.split("=")[0], options, n=1, cutoff=0.6)
                    if close:
                        return f" (did you mean {close[0]}?)"
            return ""
        found = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if found:
            choices = re.findall(r"'([^']*)'", found[3])
            close = difflib.get_close_matches(found[2], choices, n=1, cutoff=0.6)
            if close:
                return f" (did you mean {close[0]}?)"
        return ""


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="torch-flops",
        usage="%(prog)s [options] MODEL\n       %(prog)s merge FILE [FILE ...]\n       %(prog)s diff A.json B.json "
              "[--format FMT] [--fail-on EXPR ...]",
        description="FLOPs, MACs, parameters, latency and memory of a PyTorch model: per node, per module, "
                    "per operator and in total.",
        epilog=_EPILOG.format(**_COMMANDS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", nargs="?", metavar="MODEL", help="what to profile")
    p.add_argument("--list", action="store_true", help="list the zoo models and exit")
    p.add_argument("--list-hardware", action="store_true",
                   help="list the hardware the roofline knows (dense peaks, bandwidth, memory) and exit")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--input-shape", metavar="B,C,H,W", help="one float input of this shape")
    shape.add_argument("--tokens", metavar="B,S", help="token ids (batch, sequence length) for token models")
    p.add_argument("--dtype", choices=tuple(_DTYPES), default="float32", help="model and float input dtype")
    p.add_argument("--device", default=None, help="torch device for the model and inputs (default: cpu)")
    p.add_argument("--meta", action="store_true",
                   help="build the model and inputs on the meta device: counts only, nothing timed or allocated")
    p.add_argument("--tracer", choices=("auto", "eager", "fx", "export"), default="auto",
                   help="front end: auto (default: the model as it runs, eager), eager, fx (symbolic trace), export")
    p.add_argument("--format", choices=_FORMATS, default="tree", help="output (default: tree)")
    p.add_argument("--group-by", choices=report.GROUP_BY, default=None,
                   help="rows of --format table/csv/markdown (default: node)")
    p.add_argument("--all-nodes", action="store_true",
                   help="node tables: also show the graph's plumbing (parameter reads, export's checks)")
    p.add_argument("--convention", choices=tuple(CONVENTIONS), default="torch_flops",
                   help="how FLOPs are counted: torch_flops (default), flop_counter (PyTorch's FlopCounterMode), "
                        "macs (fvcore, thop), exact (2K-1 per dot product)")
    p.add_argument("--depth", type=int, default=None,
                   help="module tree depth, 0 = root, -1 = all (default); also the depth of --group-by module "
                        "tables and of the top modules")
    p.add_argument("--top", type=int, default=None, metavar="K",
                   help="tree and table formats: list the top K modules (K >= 0, 0 = none; default 3) at --depth "
                        "(innermost ones with --depth -1, the root's children with --depth 0)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed calls before the timed one (default: 1, so that times are warm; 0 times the "
                        "first, cold, call, as the Python API's default warmup=0 does)")
    p.add_argument("--repeat", type=int, default=None, help="timed calls, median per node (default: 1)")
    p.add_argument("--output", metavar="FILE",
                   help="write the output here instead of stdout ({rank} in it: the process's rank under torch.distributed)")
    p.add_argument("--chrome-trace", metavar="FILE", help="also write a chrome://tracing / Perfetto trace")
    p.add_argument("--html", metavar="FILE",
                   help="also write the one-file HTML report (module tree, icicle, node and operator tables, "
                        "memory curve; the roofline with --hardware)")
    p.add_argument("--hardware", metavar="NAME",
                   help="roofline on this hardware (see --list-hardware): roofline columns in the tree, a "
                        "'roofline' object in json (default with --roofline/--plot: the CUDA device profiled on)")
    p.add_argument("--roofline", action="store_true",
                   help="also print the --top K (10 with --top 0) nodes and modules losing most time on "
                        "--hardware (predicted slowest when not timed there), the predicted total and its "
                        "memory-bound share")
    p.add_argument("--plot", metavar="PNG", help="also write a roofline plot (needs matplotlib)")
    p.add_argument("--model-class", metavar="NAME",
                   help="config.json: the transformers class to build (e.g. BertForMaskedLM), instead of the "
                        "config's architectures[0]")
    train = p.add_argument_group("training step (--train)")
    train.add_argument("--train", action="store_true",
                       help="profile one training step: forward, loss, backward (and --optimizer's step), with "
                            "forward/backward/optimizer columns")
    train.add_argument("--loss", choices=tuple(_LOSSES), default="sum",
                       help="sum: the output summed; mse: against a zero target; ce: cross entropy against "
                            "fixed random classes of the last dimension (default: sum)")
    train.add_argument("--optimizer", choices=tuple(_OPTIMIZERS), default=None,
                       help="also profile this optimizer's step (default: none)")
    _generation_flags(p)
    compiled = p.add_argument_group("compiled model (--compiled)")
    compiled.add_argument("--compiled", action="store_true",
                          help="profile the model eagerly and torch.compile'd (Inductor) on the same inputs and "
                               "compare them per module (time, speed-up, kernel launches, bytes before and after "
                               "fusion, FLOPs), then the compiled program region by region; with --hardware, the "
                               "roofline of the compiled regions (--warmup default 1, --repeat default 5)")
    p.add_argument("--quiet", action="store_true", help="no progress line, no 'wrote FILE' lines on stderr")
    p.add_argument("--traceback", action="store_true", help="show the full traceback on errors")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return p


def _version() -> str:
    from torch_flops import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["merge"]:
            code = _merge_main(args[1:])
        elif args[:1] == ["diff"]:
            code = _diff_main(args[1:])
        else:
            code = _profile_main(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
    except BrokenPipeError:  # the reader went away (`| head`): nothing more to say
        _silence_stdout()
        return 0
    return code


def _profile_main(args: list[str]) -> int:
    command = _mistyped_command(args)
    if command is not None:
        print(f"torch-flops: error: unknown command or model {args[0]!r} (did you mean torch-flops {command}?)",
              file=sys.stderr)
        return 2
    parser = _parser()
    try:
        ns = parser.parse_args(args)
    except CLIError as e:
        print(f"torch-flops: error: {e}", file=sys.stderr)
        return e.code
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else 0
    if ns.list:
        print(_zoo_listing())
        return 0
    if ns.list_hardware:
        print(report.hardware_text([hardware.get(name) for name in hardware.names()]))
        return 0
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            return _run(ns)
        except KeyboardInterrupt:
            print("torch-flops: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            raise
        except Exception as e:
            if ns.traceback:
                raise
            code = e.code if isinstance(e, CLIError) else 1
            print(f"torch-flops: error: {_one_line(e)}", file=sys.stderr)
            return code


def _mistyped_command(args: list[str]) -> str | None:
    """The command a first argument that is neither a model nor a file seems to mistype."""
    if not args or args[0].startswith("-") or args[0] in zoo.ZOO or os.path.exists(args[0]) or ":" in args[0]:
        return None
    close = difflib.get_close_matches(args[0], list(_COMMANDS), n=1, cutoff=0.7)
    zoo_close = difflib.get_close_matches(args[0], list(zoo.ZOO), n=1, cutoff=0.7)
    return close[0] if close and not zoo_close else None


def _wrote(path: str, quiet: bool) -> None:
    if not quiet:
        print(f"torch-flops: wrote {path}", file=sys.stderr)


def _merge_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="torch-flops merge",
                description="One report from the JSON profiles the ranks of a distributed run wrote "
                            "(to_json / --format json --output 'profile-{rank}.json').")
    p.add_argument("files", nargs="+", metavar="FILE", help="the ranks' JSON profiles")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output (default: text)")
    p.add_argument("--depth", type=int, default=-1, help="module tree depth, 0 = root, -1 = all (default)")
    p.add_argument("--output", metavar="FILE", help="write the output here instead of stdout")
    return p


def _merge_main(argv: list[str]) -> int:
    """``torch-flops merge FILE...``: :func:`torch_flops.distributed.merge_profiles` as text or JSON."""
    try:
        ns = _merge_parser().parse_args(argv)
        if ns.depth < -1:
            raise CLIError(f"--depth must be >= -1, got {ns.depth}", 2)
        for path in ns.files:
            if not os.path.isfile(path):
                raise CLIError(f"no such profile: {path}", 2)
        if ns.output is not None:
            _check_writable("--output", ns.output)
        merged = merge_profiles(ns.files)
        text = merged.to_json() if ns.format == "json" else merged.text(ns.depth)
    except CLIError as e:
        print(f"torch-flops merge: error: {e}", file=sys.stderr)
        return e.code
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except (ValueError, TypeError, OSError) as e:  # files that are no profiles, or no ranks of one run: bad input
        print(f"torch-flops merge: error: {_one_line(CLIError(str(e)))}", file=sys.stderr)
        return 2
    if ns.output is not None:
        if not _written("merge", ns.output, text + "\n", False):
            return 2
    else:
        print(text)
    return 0


def _written(tool: str, path: str, text: str, quiet: bool) -> bool:
    """``text`` written to ``path`` (said on stderr), or the reason it was not (False)."""
    try:
        report.write_atomic(path, text)
    except OSError as e:
        print(f"torch-flops {tool}: error: --output: {_one_line(CLIError(str(e)))}", file=sys.stderr)
        return False
    _wrote(path, quiet)
    return True


_DIFF_FORMATS = ("text", "markdown", "json", "html")


def _diff_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="torch-flops diff",
                description="Compare two JSON profiles (to_json / --format json --output FILE) module by module and "
                            "operator by operator; with --fail-on, exit 1 when a change crosses a threshold.",
                epilog="EXPR: METRIC[@SCOPE] OP THRESHOLD. METRIC: flops, macs, params, bytes, time, backward_flops, "
                       "backward_time, optimizer_flops; SCOPE: the whole model (default), a module path, or * for "
                       "every module; OP: > >= < <=; THRESHOLD: a signed number, relative with %. Examples: "
                       "'flops>+1%' 'params>0' 'time>+10%' (time only when both were timed with --repeat 3 or more: "
                       "medians) 'flops@*<-50%'. Exit status: 0 passed, 1 a threshold crossed, 2 bad arguments.")
    p.add_argument("a", metavar="A.json", help="the profile before")
    p.add_argument("b", metavar="B.json", help="the profile after")
    p.add_argument("--format", choices=_DIFF_FORMATS, default="text", help="output (default: text)")
    p.add_argument("--fail-on", action="append", default=[], metavar="EXPR",
                   help="a gate: exit 1 naming what crossed it (repeat for several)")
    p.add_argument("--top", type=int, default=30, metavar="K",
                   help="text and markdown: the K largest changes (default 30; 0 = all)")
    p.add_argument("--depth", type=int, default=-1, help="text and markdown: modules down to this depth (-1 = all)")
    p.add_argument("--output", metavar="FILE", help="write the output here instead of stdout")
    p.add_argument("--quiet", action="store_true", help="no 'wrote FILE' line")
    return p


def _diff_main(argv: list[str]) -> int:
    """``torch-flops diff A.json B.json``: :func:`torch_flops.diff` in a format, and the gate."""
    try:
        ns = _diff_parser().parse_args(argv)
        if ns.top < 0 or ns.depth < -1:
            raise CLIError("--top must be >= 0 and --depth >= -1", 2)
        if ns.format in ("json", "html") and (ns.top != 30 or ns.depth != -1):
            raise CLIError(f"--top and --depth shape the text and markdown tables; --format {ns.format} holds every "
                           "row", 2)
        for expr in ns.fail_on:
            parse_check(expr)  # a bad expression is refused before anything is read
        for path in (ns.a, ns.b):
            if not os.path.isfile(path):
                raise CLIError(f"no such profile: {path}", 2)
        if ns.output is not None:
            _check_writable("--output", ns.output)
        result = diff(ns.a, ns.b)
        violations = result.check(ns.fail_on)
        top = ns.top or None
        if ns.format == "text":
            text = result.text(top, ns.depth, ns.fail_on)
        elif ns.format == "markdown":
            text = result.markdown(top, ns.depth, ns.fail_on)
        elif ns.format == "json":
            text = result.to_json(ns.fail_on)
        else:
            text = result.html(ns.fail_on)
    except CLIError as e:
        print(f"torch-flops diff: error: {e}", file=sys.stderr)
        return e.code
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except (ValueError, TypeError, OSError) as e:  # a bad expression, file or gate: the message says which
        print(f"torch-flops diff: error: {_one_line(CLIError(str(e)))}", file=sys.stderr)
        return 2
    if ns.output is not None:
        if not _written("diff", ns.output, text if text.endswith("\n") else text + "\n", ns.quiet):
            return 2
    else:
        try:
            print(text.rstrip("\n"))
            sys.stdout.flush()
        except BrokenPipeError:  # `| head`: the gate's verdict and exit status still stand
            _silence_stdout()
    for v in violations:
        print(f"torch-flops diff: FAIL {v.expr}: {v.message}", file=sys.stderr)
    return 1 if violations else 0


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    print(f"torch-flops: warning: {_one_line(message)}", file=sys.stderr)


def _one_line(e: BaseException | str) -> str:
    if isinstance(e, KeyError) and e.args:
        text = str(e.args[0])
    else:
        text = str(e)
        if isinstance(e, BaseException) and not isinstance(e, CLIError):
            text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[0] if lines else text
    notes = [n for n in getattr(e, "__notes__", ()) if isinstance(n, str) and n.startswith("torch_flops: ")]
    if notes:  # where the model raised: the node, its module and inputs
        line += f" ({notes[0].splitlines()[0].removeprefix('torch_flops: ')})"
    return line


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _zoo_listing() -> str:
    width = max(len(name) for name in zoo.ZOO)
    return "\n".join(f"{name:<{width}}  {entry.description}" for name, entry in sorted(zoo.ZOO.items()))


# ---------------------------------------------------------------------- running
def _check_combinations(ns: argparse.Namespace) -> None:
    """Refuse options that cannot apply to the output asked for (rather than ignore them), then put
    the defaults of the options left out in place."""
    text_formats = ("table", "csv", "markdown")
    if ns.generate is not None:  # one recorded generation: the per-step table, the module tree per phase
        for option, given in (("--warmup", ns.warmup is not None), ("--repeat", ns.repeat is not None),
                              ("--tracer", ns.tracer in ("fx", "export")), ("--group-by", ns.group_by is not None),
                              ("--all-nodes", ns.all_nodes), ("--roofline", ns.roofline),
                              ("--top", ns.top is not None)):
            if given:
                raise CLIError(f"{option} does not apply to --generate, which records one generation as it runs "
                               "(a table per step; --hardware for its prediction, --depth for its module trees)", 2)
        if ns.format == "table":
            raise CLIError("--format table does not apply to --generate: its steps table is in --format tree "
                           "(the default), markdown and csv", 2)
        if ns.sweep is not None and ns.depth is not None:
            raise CLIError("--depth does not apply to --sweep, whose points are rows of one table", 2)
        if ns.sweep is not None and ns.convention != "torch_flops":
            raise CLIError("--sweep prices the torch_flops count of every point: leave --convention out", 2)
        if ns.sweep is None and ns.format == "csv" and ns.hardware is not None and not (ns.plot or ns.html):
            raise CLIError("--hardware prices a --generate run in its text, markdown, json and --html outputs; "
                           "--format csv holds the measured steps only (a --sweep's csv holds the prices)", 2)
    elif ns.sweep is not None:
        raise CLIError("--sweep goes with --generate N (and --meta): it prices generation at each point", 2)
    if ns.group_by is not None and ns.format not in text_formats:
        raise CLIError(f"--group-by chooses the rows of --format table, csv or markdown, not --format {ns.format}", 2)
    group_by = ns.group_by or "node"
    if ns.all_nodes and (ns.format not in text_formats or group_by != "node"):
        raise CLIError("--all-nodes adds the graph's plumbing to node tables: --format table, csv or markdown with "
                       "--group-by node", 2)
    if ns.depth is not None:
        if ns.format == "json":
            raise CLIError("--depth does not apply to --format json, which holds every module", 2)
        if ns.format in ("csv", "markdown") and group_by != "module":
            raise CLIError(f"--depth applies to --group-by module with --format {ns.format} (its {group_by} rows "
                           "have no depth)", 2)
        if ns.format == "table" and group_by != "module" and ns.top == 0:
            raise CLIError(f"--depth places the table's top modules (its {group_by} rows have no depth), and --top 0 "
                           "lists none", 2)
    if ns.top is not None and (ns.format == "json" or (ns.format in ("csv", "markdown") and not ns.roofline)):
        # (with --roofline, --top is the number of slowest nodes its text tables list; json holds them all)
        raise CLIError(f"--top lists the top modules of --format tree and table, not --format {ns.format}", 2)
    # (--generate's own rule is above: it prices every format but a run's csv)
    if ns.hardware is not None and ns.format in text_formats and not (ns.roofline or ns.plot or ns.html
                                                                      or ns.generate is not None):
        raise CLIError(f"--hardware puts the roofline in the tree, in json, in --html and with --roofline/--plot: "
                       f"with --format {ns.format}, add --roofline (or --html / --plot)", 2)
    if ns.meta and (ns.warmup is not None or ns.repeat is not None):
        raise CLIError("--warmup and --repeat time the model, and --meta measures no time", 2)
    if ns.train and (ns.warmup is not None or ns.repeat is not None):
        raise CLIError("--train profiles one step as it runs: --warmup and --repeat do not apply", 2)
    ns.group_by = group_by
    ns.depth = -1 if ns.depth is None else ns.depth
    ns.top = 3 if ns.top is None else ns.top
    ns.warmup = (0 if ns.meta or ns.train else 1) if ns.warmup is None else ns.warmup
    ns.repeat = 1 if ns.repeat is None else ns.repeat


def _run(ns: argparse.Namespace) -> int:
    if ns.model is None:
        raise CLIError("MODEL is required (a zoo name, package.module:factory or config.json), or --list", 2)
    for name in ("warmup", "repeat", "top", "depth"):
        value, low = getattr(ns, name), (1 if name == "repeat" else -1 if name == "depth" else 0)
        if value is not None and value < low:
            raise CLIError(f"--{name} must be >= {low}, got {value}", 2)
    if ns.meta and ns.device not in (None, "meta"):
        raise CLIError("--meta and --device are exclusive (--meta puts everything on the meta device)", 2)
    if ns.compiled:
        return _run_compiled(ns)
    _check_combinations(ns)
    input_shape = _parse_dims(ns.input_shape, "--input-shape") if ns.input_shape is not None else None
    tokens = _parse_dims(ns.tokens, "--tokens", length=2) if ns.tokens is not None else None
    device = torch.device("meta") if ns.meta else _device(ns.device or "cpu")
    dtype = _DTYPES[ns.dtype]
    if ns.chrome_trace and device.type == "meta":
        raise CLIError("--chrome-trace: a chrome trace needs measured times, and --meta measures none", 2)
    if ns.roofline and ns.format == "csv":
        raise CLIError("--roofline prints text tables, which would break --format csv: use --format json "
                       "--hardware NAME (a 'roofline' object) or a text format", 2)
    if ns.train and ns.tracer in ("fx", "export"):
        raise CLIError("--train profiles the step as it runs (the eager front end): leave --tracer out", 2)
    if (ns.optimizer is not None or ns.loss != "sum") and not ns.train:
        raise CLIError("--loss and --optimizer go with --train", 2)
    if ns.optimizer == "adafactor" and ns.meta:
        raise CLIError("--optimizer adafactor cannot step on meta tensors (torch's Adafactor reads its step "
                       "count with .item()): use another optimizer with --meta, or a real device", 2)
    spec = _hardware(ns, device)
    for option in ("output", "chrome_trace", "plot", "html"):  # {rank}: each rank of a distributed run its own file
        if getattr(ns, option) is not None:
            setattr(ns, option, rank_path(getattr(ns, option)))
    outputs = [(option, path) for option, path in (("--output", ns.output), ("--chrome-trace", ns.chrome_trace),
                                                   ("--plot", ns.plot), ("--html", ns.html)) if path is not None]
    for i, (option, path) in enumerate(outputs):
        _check_writable(option, path)  # before a profile that may take minutes
        for other, other_path in outputs[:i]:
            if os.path.realpath(other_path) == os.path.realpath(path) and not report.write_target(path)[1]:
                # (a link to the other file too; devices and streams are written into, both)
                raise CLIError(f"{other} and {option} name the same file ({path}): one would overwrite the other", 2)
    if ns.plot is not None:
        _check_matplotlib()

    if ns.generate is not None:
        return _run_generate(ns, device, dtype, tokens, spec)
    model, args, kwargs = _build(ns.model, device, dtype, input_shape, tokens, ns.model_class,
                                 graph_front_end=ns.tracer in ("fx", "export"))
    step_text = None
    if ns.train:
        result, step_text = _train_step(model, args, kwargs, ns.loss, ns.optimizer, ns.convention)
    else:
        model.eval()
        result = profile(model, *args, tracer=ns.tracer, warmup=ns.warmup, repeat=ns.repeat,
                         progress=False if ns.quiet else None, **kwargs).with_convention(ns.convention)

    line = roofline(result, spec) if spec is not None else None
    if ns.format == "tree":
        text = report.model_profile_text(result, depth=ns.depth, top=ns.top, roofline=line)
        if step_text is not None:
            text = step_text + "\n\n" + text
    elif ns.format == "table":
        parts = [report.summary_text(result), report.table_text(result, ns.group_by, ns.all_nodes, depth=ns.depth
                                                                if ns.group_by == "module" else -1),
                 report.legend_text(result, ns.group_by)]
        if ns.top:
            parts.append(report.top_modules_text(result, ns.top, ns.depth))
        text = "\n\n".join(parts)
    elif ns.format == "json":
        text = report.profile_to_json(result, roofline=line)
    elif ns.format == "csv":
        text = report.csv_text(result, ns.group_by, ns.all_nodes, depth=ns.depth).rstrip("\n")
    else:
        text = report.markdown(result, ns.group_by, ns.all_nodes, depth=ns.depth)
    if ns.roofline and line is not None and ns.format != "json":  # json carries the roofline object
        text += "\n\n" + report.roofline_text(line, ns.top or 10)
    if ns.output:
        report.write_atomic(ns.output, text + "\n")
        _wrote(ns.output, ns.quiet)
    else:
        print(text)
    if ns.chrome_trace:
        report.write_chrome_trace(result, ns.chrome_trace)
        _wrote(ns.chrome_trace, ns.quiet)
    if ns.plot and line is not None:
        from torch_flops.plot import save_roofline_plot

        save_roofline_plot(line, ns.plot)
        _wrote(ns.plot, ns.quiet)
    if ns.html:
        write_html(result, ns.html, roofline=line)
        _wrote(ns.html, ns.quiet)
    return 0


def _run_compiled(ns: argparse.Namespace) -> int:
    """``--compiled``: :func:`torch_flops.compare_compiled`'s table and the compiled program's
    regions; with ``--hardware``, the compiled regions' roofline."""
    given = [option for option, on in (
        ("--train", ns.train), ("--meta", ns.meta), ("--tracer", ns.tracer != "auto"), ("--format", ns.format != "tree"),
        ("--group-by", ns.group_by is not None), ("--all-nodes", ns.all_nodes),
        ("--convention", ns.convention != "torch_flops"), ("--chrome-trace", ns.chrome_trace is not None),
        ("--html", ns.html is not None), ("--plot", ns.plot is not None),
        ("--roofline", ns.roofline and ns.hardware is None), ("--generate", ns.generate is not None),
        ("--sweep", ns.sweep is not None), ("--loss", ns.loss != "sum"), ("--optimizer", ns.optimizer is not None),
        ("--top", ns.top is not None and ns.hardware is None)) if on]
    if given:
        raise CLIError(f"--compiled prints the eager vs compiled comparison (and, with --hardware NAME, the compiled "
                       f"regions' roofline): {', '.join(given)} does not apply to it", 2)
    input_shape = _parse_dims(ns.input_shape, "--input-shape") if ns.input_shape is not None else None
    tokens = _parse_dims(ns.tokens, "--tokens", length=2) if ns.tokens is not None else None
    device = _device(ns.device or "cpu")
    spec = _hardware(ns, device)
    if ns.output is not None:
        ns.output = rank_path(ns.output)
        _check_writable("--output", ns.output)
    model, args, kwargs = _build(ns.model, device, _DTYPES[ns.dtype], input_shape, tokens, ns.model_class,
                                 graph_front_end=False)
    model.eval()
    comparison = compare_compiled(model, *args, warmup=1 if ns.warmup is None else ns.warmup,
                                  repeat=5 if ns.repeat is None else ns.repeat, **kwargs)
    text = comparison.text(depth=-1 if ns.depth is None else ns.depth) + "\n\n" + comparison.result.text()
    if spec is not None:
        text += "\n\n" + report.roofline_text(roofline(comparison.compiled, spec), ns.top or 10)
    if ns.output:
        report.write_atomic(ns.output, text + "\n")
        _wrote(ns.output, ns.quiet)
    else:
        print(text)
    return 0


def _train_step(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], loss_name: str,
                optimizer_name: str | None, convention: str) -> tuple[Profile, str]:
    """One training step of ``model`` under a :class:`TrainingProfiler`: its profile and summary."""
    model.train()
    optimizer = _OPTIMIZERS[optimizer_name](model.parameters()) if optimizer_name is not None else None
    prof = TrainingProfiler(model, optimizer)
    with prof:
        output = model(*args, **kwargs)
        _loss(loss_name, output).backward()
        if optimizer is not None:
            optimizer.step()
    profile = prof.profiles[0].with_convention(convention)
    return profile, step_summary_text(profile, prof._durations[0], prof._peaks[0])


def _loss(name: str, output: Any) -> torch.Tensor:
    """--loss on the model's main output tensor (``logits``/``last_hidden_state``, or the first tensor)."""
    out = _main_tensor(output)
    if name == "sum":
        return out.float().sum()
    if name == "mse":
        return nn.functional.mse_loss(out.float(), torch.zeros_like(out, dtype=torch.float32))
    if out.dim() < 2:
        raise CLIError(f"--loss ce needs an output with a class dimension last, got shape {tuple(out.shape)}", 2)
    classes = out.shape[-1]
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, classes, tuple(out.shape[:-1]), generator=g).to(out.device)
    return nn.functional.cross_entropy(out.float().reshape(-1, classes), target.reshape(-1))


def _main_tensor(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    for name in ("logits", "last_hidden_state"):
        value = getattr(output, name, None)
        if isinstance(value, torch.Tensor):
            return value
    for value in output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ():
        if isinstance(value, torch.Tensor):
            return value
    raise CLIError(f"--train needs a tensor output to compute the loss of, got {type(output).__name__}", 2)


def _hardware(ns: argparse.Namespace, device: torch.device) -> HardwareSpec | None:
    """The roofline's hardware: --hardware, or with --roofline/--plot the CUDA device profiled on."""
    if ns.hardware is not None:
        try:
            return hardware.get(ns.hardware)
        except ValueError as e:
            raise CLIError(f"--hardware: {e}", 2) from None
    if not (ns.roofline or ns.plot):
        return None
    option = "--roofline" if ns.roofline else "--plot"
    if device.type != "cuda":
        raise CLIError(f"{option} needs --hardware NAME on {device.type} (see --list-hardware)", 2)
    try:
        return hardware.detect(device)
    except ValueError as e:
        raise CLIError(f"{option}: {e}; give --hardware NAME", 2) from None


def _check_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError("--plot needs matplotlib: pip install matplotlib (or torch_flops[plot])", 2) from None


def _check_writable(option: str, path: str) -> None:
    try:
        report.check_writable(path)
    except OSError as e:
        raise CLIError(f"{option}: {e}", 2) from None


def _parse_dims(text: str, option: str, length: int | None = None) -> tuple[int, ...]:
    example = "1,128" if length == 2 else "1,8,64" if option.startswith("--sweep") else "1,3,224,224"
    parts = [p.strip() for p in text.replace("x", ",").split(",")]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if not dims or any(d <= 0 for d in dims) or (length is not None and len(dims) != length):
        what = f"{length} " if length else ""
        raise CLIError(f"bad {option} {text!r}: expected {what}comma-separated positive integers like {example}", 2)
    if any(d >= 2**63 for d in dims):  # (torch sizes are 64-bit)
        raise CLIError(f"bad {option} {text!r}: a size must be below 2^63", 2)
    return dims


def _device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise CLIError(f"bad --device {name!r}: {e}", 2) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CLIError(f"--device {name}: there is no CUDA device here (torch {torch.__version__}, "
                       f"CUDA build: {torch.version.cuda or 'no'})", 2)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise CLIError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here", 2)
    return device


@contextlib.contextmanager
def _on(device: torch.device) -> Iterator[None]:
    """Build on the meta device directly (no weights allocated); elsewhere build, then move."""
    if device.type == "meta":
        with torch.device("meta"):
            yield
    else:
        yield


def _build(spec: str, device: torch.device, dtype: torch.dtype, input_shape: tuple[int, ...] | None,
           tokens: tuple[int, ...] | None, model_class: str | None = None,
           graph_front_end: bool = False) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    if model_class is not None and not (spec.endswith(".json") or os.path.isdir(spec)):
        raise CLIError("--model-class is for a transformers config.json", 2)
    if spec in zoo.ZOO:
        return _build_zoo(spec, device, dtype, input_shape, tokens)
    if spec.endswith(".json") or os.path.isdir(spec):
        return _build_transformers(spec, device, dtype, input_shape, tokens, model_class, graph_front_end)
    if ":" in spec and os.sep not in spec.partition(":")[0]:
        return _build_import(spec, device, dtype, input_shape, tokens)
    if os.path.exists(spec):  # a Python file, a checkpoint: not a MODEL this command can build
        raise CLIError(f"{spec} is a file, not a MODEL: name a zoo model, an import path package.module:factory "
                       "(a function returning the nn.Module; for a file, its module name on the path: "
                       f"{os.path.splitext(os.path.basename(spec))[0]}:factory), or a transformers config.json", 2)
    if os.sep in spec or spec.endswith((".py", ".pt", ".pth", ".json")):
        raise CLIError(f"no such file: {spec}")
    close = difflib.get_close_matches(spec, zoo.ZOO, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise CLIError(f"unknown model {spec!r}{hint}: not a zoo name ({', '.join(sorted(zoo.ZOO))}), an import path "
                   "package.module:factory, or a transformers config.json")


def _finish(model: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    if device.type != "meta":
        model = model.to(device)
    return model.to(dtype)


def _float_input(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    if device.type == "meta":
        return torch.empty(shape, device=device, dtype=dtype)
    gen = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def _build_zoo(name: str, device: torch.device, dtype: torch.dtype, input_shape: tuple[int, ...] | None,
               tokens: tuple[int, ...] | None) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    entry = zoo.get(name)
    takes_tokens = "seq_len" in inspect.signature(entry.example_inputs).parameters
    if tokens is not None and not takes_tokens:
        raise CLIError(f"--tokens is for token models; {name} takes images: use --input-shape B,C,H,W", 2)
    if input_shape is not None and takes_tokens:
        raise CLIError(f"{name} takes token ids: use --tokens B,S instead of --input-shape", 2)
    with _on(device):
        model = entry.build()
    model = _finish(model, device, dtype)
    if tokens is not None:
        _check_positions(model, tokens[1])
        args = entry.example_inputs(batch_size=tokens[0], device=device, seq_len=tokens[1])
    elif input_shape is not None:
        args = (_float_input(input_shape, device, dtype),)
    else:
        args = entry.example_inputs(batch_size=1, device=device)
    args = tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    return model, args, {}


def _build_import(spec: str, device: torch.device, dtype: torch.dtype, input_shape: tuple[int, ...] | None,
                  tokens: tuple[int, ...] | None) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CLIError(f"bad import path {spec!r}: expected package.module:factory", 2)
    if input_shape is None and tokens is None:
        raise CLIError(f"{spec} needs its input: give --input-shape B,C,H,W or --tokens B,S", 2)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules in the current directory import
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise CLIError(f"cannot import {module_name!r} (from {spec!r}): {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CLIError(f"{module_name!r} has no attribute {attr!r}") from None
    if isinstance(obj, nn.Module):
        model = obj.to(device)  # an instance: moved (to meta too: its weights are dropped, counts need shapes only)
    elif callable(obj):
        with _on(device):
            model = obj()
        if not isinstance(model, nn.Module):
            raise CLIError(f"{spec}() returned {type(model).__name__}, not a torch.nn.Module")
    else:
        raise CLIError(f"{spec} is a {type(obj).__name__}: expected a model factory or a torch.nn.Module")
    model = _finish(model, device, dtype)
    if tokens is not None:
        _check_positions(model, tokens[1])
        return model, (torch.zeros(tokens, dtype=torch.long, device=device),), {}
    return model, (_float_input(input_shape, device, dtype),), {}  # type: ignore[arg-type]


_POSITION_LIMITS = ("max_position_embeddings", "n_positions", "max_seq_len", "max_sequence_length", "block_size")


def _check_positions(model: nn.Module, seq: int, what: str | None = None) -> None:
    """``CLIError`` for more tokens than the model has positions (a learned position table would
    fail deep inside, or, on meta, count a sequence the model cannot run); ``what`` names the
    options asking for them."""
    for holder in (getattr(model, "config", None), model):
        for name in _POSITION_LIMITS:
            limit = getattr(holder, name, None)
            if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < seq:
                asks = f"{what} reaches {seq} tokens per sequence, and" if what else f"--tokens asks for {seq} tokens but"
                raise CLIError(f"{asks} {type(model).__name__} takes at most {limit} ({name} = {limit})", 2)


def _build_transformers(spec: str, device: torch.device, dtype: torch.dtype, input_shape: tuple[int, ...] | None,
                        tokens: tuple[int, ...] | None, model_class: str | None = None,
                        graph_front_end: bool = False) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    if not os.path.exists(spec):
        raise CLIError(f"no such file: {spec}")
    try:
        import transformers
    except ImportError:
        raise CLIError("a config.json model needs transformers: pip install transformers") from None
    config = transformers.AutoConfig.from_pretrained(spec)
    architectures = getattr(config, "architectures", None) or []
    if model_class is not None:
        cls = getattr(transformers, model_class, None)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise CLIError(f"--model-class {model_class!r} is not a transformers model class", 2)
        with _on(device):
            model = cls(config)
        print(f"torch-flops: built {type(model).__name__} (--model-class)", file=sys.stderr)
    elif architectures:
        name = architectures[0]
        cls = getattr(transformers, name, None)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise CLIError(f"{spec}: architectures[0] is {name!r}, which this transformers "
                           f"({transformers.__version__}) does not have; pick a class with --model-class", 2)
        with _on(device):
            model = cls(config)
        print(f"torch-flops: built {name} (architectures[0] of {spec}; another class: --model-class)",
              file=sys.stderr)
    else:
        with _on(device):
            model = transformers.AutoModel.from_config(config)
        print(f"torch-flops: {spec} names no architectures: built {type(model).__name__}; "
              "pick another class with --model-class", file=sys.stderr)
    model = _finish(model, device, dtype)
    if graph_front_end and hasattr(model.config, "use_cache"):
        model.config.use_cache = False  # a cache object in the output cannot be carried through a graph
    main_input = getattr(model, "main_input_name", "input_ids")
    if input_shape is not None:
        return model, (), {main_input: _float_input(input_shape, device, dtype)}
    if main_input != "input_ids":
        raise CLIError(f"{type(model).__name__} takes {main_input!r}: give --input-shape", 2)
    batch, seq = tokens or _DEFAULT_TOKENS
    _check_positions(model, seq)
    vocab = int(getattr(config, "vocab_size", 0) or 1)
    if device.type == "meta":
        ids = torch.empty((batch, seq), dtype=torch.long, device=device)
    else:
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (batch, seq), generator=gen).to(device)
    return model, (), {"input_ids": ids}


# ---------------------------------------------------------------------- generation (--generate, --sweep)
def _generation_flags(p: argparse.ArgumentParser) -> None:
    gen = p.add_argument_group("generation (--generate)")
    gen.add_argument("--generate", type=int, metavar="N",
                     help="profile model.generate() of N new tokens (greedy) from --tokens B,S random prompts: the "
                          "prefill and every decode step, the KV cache, TTFT/TPOT/tokens/s (a transformers causal "
                          "LM); with --hardware, the prediction there")
    gen.add_argument("--sweep", nargs="+", action="extend", metavar="KEY=V1,V2",
                     help="with --generate N and --meta: a sweep on the meta device over batch=..., prompt=... (and "
                          "generated=..., default N), priced on --hardware; --plot PNG draws it")


def _sweep_axes(items: Sequence[str], tokens: tuple[int, ...] | None, new_tokens: int) -> dict[str, tuple[int, ...]]:
    axes: dict[str, tuple[int, ...]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or key not in ("batch", "prompt", "generated"):
            raise CLIError(f"bad --sweep {item!r}: expected batch=1,8,64, prompt=128,2048 or generated=32,256", 2)
        if key in axes:
            raise CLIError(f"--sweep gives {key}= twice: give its values once, comma-separated ({key}=1,8,64)", 2)
        axes[key] = _parse_dims(values, f"--sweep {key}")
    batch, prompt = tokens or _DEFAULT_TOKENS
    return {"batch": axes.get("batch", (batch,)), "prompt": axes.get("prompt", (prompt,)),
            "generated": axes.get("generated", (new_tokens,))}


def _run_generate(ns: argparse.Namespace, device: torch.device, dtype: torch.dtype, tokens: tuple[int, ...] | None,
                  spec: HardwareSpec | None) -> int:
    """``--generate N``: :func:`torch_flops.profile_generate` (or, with ``--sweep``,
    :func:`torch_flops.sweep_generation`) of the model built from MODEL."""
    from torch_flops.generation import profile_generate
    from torch_flops.generation_sweep import sweep_generation

    if ns.generate < 1:
        raise CLIError(f"--generate must be >= 1, got {ns.generate}", 2)
    if ns.train or ns.input_shape is not None:
        raise CLIError("--generate takes token prompts (--tokens B,S), not --train or --input-shape", 2)
    if ns.chrome_trace:
        raise CLIError("--chrome-trace is for one call of the model, not a --generate run", 2)
    if ns.sweep is not None and ns.html:
        raise CLIError("--html writes the steps of one --generate run: with --sweep, draw the sweep with --plot PNG", 2)
    for option, path in (("--html", ns.html), ("--plot", ns.plot)):
        if path:
            _check_writable(option, path)
    if ns.sweep is not None:
        if device.type != "meta":
            raise CLIError("--sweep runs on the meta device: add --meta", 2)
        if spec is None:
            raise CLIError("--sweep prices every point on a hardware spec: give --hardware NAME "
                           "(see --list-hardware)", 2)
        axes = _sweep_axes(ns.sweep, tokens, ns.generate)
        model = _generate_model(ns, device, dtype, (1, 1))
        longest = max(axes["prompt"]) + max(axes["generated"])
        _check_positions(model, longest, f"--sweep prompt={max(axes['prompt'])} with generated={max(axes['generated'])}")
        sweep = sweep_generation(model, axes["batch"], axes["prompt"], axes["generated"], hardware=spec,
                                 inputs=zoo.generation_inputs(model) if isinstance(model, _ZOO_DECODERS) else None)
        text = {"json": lambda: sweep.to_json(), "markdown": sweep.markdown, "csv": lambda: sweep.csv_text().rstrip("\n")
                }.get(ns.format, sweep.text)()
        _emit(ns, text)
        if ns.plot:
            sweep.save_plot(ns.plot)
            _wrote(ns.plot, ns.quiet)
        return 0
    if device.type == "meta":
        raise CLIError("--generate runs the model (sampling reads the logits): drop --meta, or add --sweep", 2)
    batch, prompt = tokens or _DEFAULT_TOKENS
    model = _generate_model(ns, device, dtype, (batch, prompt))
    _check_positions(model, prompt + ns.generate, f"--tokens {batch},{prompt} with --generate {ns.generate}")
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 2)
    ids = torch.randint(0, vocab, (batch, prompt), generator=torch.Generator().manual_seed(0)).to(device)
    model.eval()
    if isinstance(model, _ZOO_DECODERS):  # the zoo's own greedy decode loop over its KV cache
        cache = zoo.KVCache()
        gp = profile_generate(model, loop=functools.partial(zoo.generate, model, ids, ns.generate, cache=cache),
                              kv_cache=lambda: cache, max_new_tokens=ns.generate)
    else:
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        pad = eos[0] if isinstance(eos, list) and eos else eos if isinstance(eos, int) else 0
        gp = profile_generate(model, ids, max_new_tokens=ns.generate, min_new_tokens=ns.generate, do_sample=False,
                              attention_mask=torch.ones_like(ids), pad_token_id=pad)
    gp = gp.with_convention(ns.convention)
    if ns.format == "json":
        doc = gp.to_dict(profiles=False)
        if spec is not None:
            doc["prediction"] = gp.predict(spec).as_dict()
        text = json.dumps(doc, indent=2, default=str)
    elif ns.format == "markdown":
        text = gp.markdown(spec)
    elif ns.format == "csv":
        text = gp.csv_text().rstrip("\n")
    else:
        text = gp.text(depth=ns.depth, hardware=spec)
    _emit(ns, text)
    if ns.html:
        gp.to_html(ns.html, hardware=spec)
        _wrote(ns.html, ns.quiet)
    if ns.plot and spec is not None:
        from torch_flops.plot import save_roofline_plot

        save_roofline_plot(roofline(gp.decode[0] if gp.decode else gp.prefill, spec), ns.plot)
        _wrote(ns.plot, ns.quiet)
    return 0


def _generate_model(ns: argparse.Namespace, device: torch.device, dtype: torch.dtype,
                    tokens: tuple[int, int]) -> nn.Module:
    needs = "--generate needs a causal LM: the zoo's gpt2 or llama, or a transformers one (a config.json, or an " \
        "import path returning one)"
    if ns.model in zoo.ZOO and zoo.ZOO[ns.model].build not in (zoo.gpt2, zoo.llama):
        raise CLIError(f"{needs}; the zoo's {ns.model} is not one", 2)
    model, _, _ = _build(ns.model, device, dtype, None, tokens, ns.model_class)
    if isinstance(model, _ZOO_DECODERS):
        return model
    if not callable(getattr(model, "generate", None)) or getattr(model, "config", None) is None:
        raise CLIError(f"{needs}; {type(model).__name__} has no generate(){_causal_lm_hint(model)}", 2)
    return model


#: the zoo's decoders, which --generate runs with zoo.generate (greedy, over a zoo.KVCache)
_ZOO_DECODERS = (zoo.GPT2, zoo.Llama)


def _causal_lm_hint(model: nn.Module) -> str:
    """'; build its causal LM with --model-class NAME' for a transformers base model (a config.json
    naming no architectures builds one), else ''."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        return ""
    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type) if isinstance(model_type, str) else None
    return f"; build its causal LM with --model-class {name}" if isinstance(name, str) else ""


def _emit(ns: argparse.Namespace, text: str) -> None:
    if ns.output:
        report.write_atomic(ns.output, text + "\n")
        _wrote(ns.output, ns.quiet)
    else:
        print(text)
