"""What every command module shares, defined once: the group class, error handling and exit codes, JSON output,
the pass/fail report, shared options and parsers, progress bars on stderr, and the renderers two commands share."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

import click

from qnndeploy.api._errors import Unverified
from qnndeploy.base import interrupt
from qnndeploy.base.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, BadInput, QnnDeployError

if TYPE_CHECKING:
    from qnndeploy.api import VerifyReport

EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM (README "Exit codes")

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Group(click.Group):
    """A command group that lists its commands in the order they were added and, run with no arguments, prints
    its help on stdout and exits 0 (click itself treats a bare group as a usage error, exit 2). It keeps the
    arguments it ran with, so that a command can run again under another QAIRT toolchain (cli/_toolchain.py)."""

    args: ClassVar[list[str]] = []

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        Group.args = list(sys.argv[1:] if args is None else args)
        return super().main(args, *rest, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # in the order they were added: the pipeline's, not the alphabet's

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)


# --- output -------------------------------------------------------------------------------------------------------

def size_text(nbytes: int) -> str:
    """Bytes in decimal units, as a person reads them (1.2 GB, 49.2 kB)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def jsonable(value: object) -> object:
    """Dataclasses, dicts, lists and paths as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def emit_json(value: object) -> None:
    click.echo(json.dumps(jsonable(value), indent=2))


# C0 and C1 controls with DEL (ESC starts every terminal escape sequence, CSI is also \x9b), and the invisible
# marks that reorder or hide text on screen: zero-width characters, bidi embeddings, overrides and isolates, line
# and paragraph separators, the byte-order mark.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def escaped(text: object) -> str:
    """Untrusted text (a phone's properties, shell output, file names from elsewhere) made safe for a terminal:
    control characters and terminal escape sequences shown as visible escapes (\\x1b[2J, \\u202e), never
    emitted raw; a newline becomes \\x0a too, so one value stays on one line. For text output only: JSON output needs
    nothing (json.dumps escapes every control character)."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", str(text))


def report(result: Any, as_json: bool, render: Callable[[Any], None], failed: int = EXIT_CHECK_FAILED) -> None:
    """Print a result that has `ok` as JSON or text; exit `failed` when it is not ok (the documented exit code)."""
    if as_json:
        emit_json(result)
    else:
        render(result)
    if not result.ok:
        sys.exit(failed)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """The one way a command ends in error: `error: <one line>` on stderr and the exit code. Messages quote paths
    and names from the user, bundles and phones: escaped, so that one stays one line and no escape sequence runs."""
    click.echo(f"error: {escaped(message)}", err=True)
    sys.exit(code)


# --- interrupts ---------------------------------------------------------------------------------------------------

def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (CI cancel, kill): only ask the running command's Run to stop; the work stops at its next safe point
    (a hashed or copied chunk, a compile poll) and unwinds through the usual cleanup. Raising here instead could land
    anywhere, e.g. inside a native module's import, and crash the interpreter. A second SIGTERM, or one while no
    command runs, ends the process at once (the default action); what it leaves (a staging folder) is removed by the
    next run."""
    run = interrupt.current()
    if run is None or run.stopping:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    run.stop()


def install_signal_handlers() -> None:
    """SIGTERM stops like Ctrl-C, at a safe point (on_sigterm). Ctrl-C keeps Python's own KeyboardInterrupt."""
    signal.signal(signal.SIGTERM, on_sigterm)


def interrupted_message(run: interrupt.Run | None = None) -> str:
    """The one line for an interrupted run, true to what was published: publication is the commit point, so what
    was published before the interrupt (and is still there) is complete and is named."""
    done = [p for p in dict.fromkeys(run.published if run else []) if p.exists()]
    if not done:
        return "interrupted; nothing was left half-written"
    names = ", ".join(shown(p) for p in done[:3]) + (f" and {len(done) - 3} more" if len(done) > 3 else "")
    return (f"interrupted after {names} {'was' if len(done) == 1 else 'were'} published (complete); "
            "nothing was left half-written")


def handles_errors(fn: Callable[..., None]) -> Callable[..., None]:
    """Run the command in a Run of its own (its stop request and publications), and turn the library's one error
    type into a one-line message and its exit code, never a traceback; a bundle refused as Unverified shows its
    report first (as JSON with --json: the verify report is the JSON output then). A SIGTERM that came too late to stop
    anything (after the output was published) still ends in exit 130, saying so."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        with interrupt.Run() as run:
            try:
                fn(*args, **kwargs)
            except Unverified as e:
                if kwargs.get("as_json"):
                    emit_json(e.report)
                else:
                    render_verify(e.report)
                fail(str(e), e.exit_code)
            except QnnDeployError as e:
                if kwargs.get("as_json"):  # a script reading stdout gets the failure too, not an empty stream
                    emit_json({"error": str(e), "exit_code": e.exit_code})
                fail(str(e), e.exit_code)
            except KeyboardInterrupt:
                fail(interrupted_message(run), EXIT_INTERRUPTED)
            if run.stopping:
                fail(interrupted_message(run), EXIT_INTERRUPTED)

    return wrapper


def gathered(args: type[Any]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The command's parsed options handed to it as one frozen dataclass `args` (a field per option, named as the
    option's parameter), not as a parameter each: the command is `def cmd(args: XArgs, as_json: bool)`. Put it
    right above the function; tests/cli/test_cli.py checks that every option is a field and every field an option."""
    names = [f.name for f in dataclasses.fields(args)]

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def wrapper(**options: Any) -> None:
            fn(args(**{name: options.pop(name) for name in names}), **options)

        return wrapper

    return decorate


def as_enum(kind: Callable[[str], Any]) -> Callable[[click.Context, click.Parameter, str | None], Any]:
    """A click callback: the choice given, as the member of the enum `kind` the command's request takes."""
    return lambda _ctx, _param, value: None if value is None else kind(value)


def shown(path: Path | str) -> str:
    """A path as short as it can be: relative to the current folder when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# --- options and parsers ------------------------------------------------------------------------------------------

GLOSSARY = "data/options.json"  # every option's one name, meaning, type and old spellings (docs/options.md)


@functools.cache
def glossary() -> dict[str, dict[str, Any]]:
    """The option glossary by option name (the long name, e.g. --performance-mode)."""
    entries = json.loads(resources.files("qnndeploy").joinpath(GLOSSARY).read_text(encoding="utf-8"))["options"]
    return {entry["name"]: entry for entry in entries}


class Renamed(click.Option):
    """An option whose old spellings (the glossary's `old_names` for its long name) still work for one release:
    hidden from --help, each one used says so once on stderr, never on stdout (so --json stays clean). They are
    parsed into a slot of their own, so the option knows which spelling was given. The glossary's `old_units`: an
    old name whose number was in another unit, and how many of the new one it is (--minutes M is --duration M*60)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        entry = glossary()[max(self.opts, key=len)]
        self.old_names: tuple[str, ...] = tuple(entry["old_names"])
        self.old_units: dict[str, float] = entry.get("old_units", {})
        assert self.old_names, f"{entry['name']} has no old names in {GLOSSARY}: a plain option then"

    def _slot(self, old: str) -> str:
        return f"{self.name} {old}"  # a parser slot no parameter name can take (it has a space)

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        action = "append" if self.multiple else "store"
        extra = {"action": f"{action}_const", "const": self.flag_value} if self.is_flag \
            else {"action": action, "nargs": self.nargs}
        for old in self.old_names:
            parser.add_option(obj=self, opts=[old], dest=self._slot(old), **extra)

    def consume_value(self, ctx: click.Context, opts: Any) -> Any:
        given = [old for old in self.old_names if self._slot(old) in opts]
        if given and not ctx.resilient_parsing:
            old, new = given[0], max(self.opts, key=len)
            if len(given) > 1 or self.name in opts:
                raise click.UsageError(f"{old} is the old name of {new}: give {new} alone", ctx)
            value, factor = opts[self._slot(old)], self.old_units.get(old)
            if factor is None:
                click.echo(f"warning: {old} is renamed {new}; the old name goes in the next release", err=True)
                # a run again under another toolchain (cli/_toolchain.py) gets the new name: the warning is said once
                Group.args = [new + arg.removeprefix(old) if arg == old or arg.startswith(f"{old}=") else arg
                              for arg in Group.args]
            else:  # (no command that runs again under a toolchain has one)
                click.echo(f"warning: {old} is renamed {new}, which takes {factor:g} times the number ({old} 2 is "
                           f"{new} {2 * factor:g}); the old name goes in the next release", err=True)
                with suppress(ValueError):  # not a number: the type's own error says so
                    value = float(value) * factor
            opts = {**opts, self.name: value}
        return super().consume_value(ctx, opts)


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of text.")
# How a bundle is verified, the same two options on every command that verifies one before using it.
shallow_option = click.option("--shallow", is_flag=True,
                              help="Do not load the context binaries on the host HTP emulator (the metadata, "
                                   "checksums and rules are still checked).")
unchecked_option = click.option("--allow-unchecked", is_flag=True,
                                help="Accept context binaries that no libQnnSystem here can read (no onnxruntime-qnn "
                                     "on this machine); the report lists them.")
cache_dir_option = click.option(
    "--cache-dir", type=click.Path(path_type=Path), metavar="DIR",
    help="The compile cache [default: $QNNDEPLOY_CACHE_DIR, else $XDG_CACHE_HOME/qnndeploy/compile, "
         "else ~/.cache/qnndeploy/compile].")


def soc_option(help_: str, *, dest: str = "socs", required: bool = False) -> Callable[[Any], Any]:
    """--soc, the same in every command that takes SoCs: repeatable and comma-separated alike (`--soc SM8650,SM8750`
    is `--soc SM8650 --soc SM8750`), each name once, in the order given. The command gets the names as a tuple;
    the catalog resolves each where it is used (an alias to its SoC, counted once there), so an unknown one is the
    catalog's one-line error (exit 2). No catalog here: `--help` stays fast."""

    def split(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
        names: dict[str, str] = {}  # upper-cased -> as first given
        for value in values:
            for name in (part.strip() for part in value.split(",")):  # an empty one is the catalog's to refuse
                names.setdefault(name.upper(), name)
        return tuple(names.values())

    return click.option("--soc", dest, multiple=True, required=required, metavar="SOC[,SOC]", callback=split,
                        help=f"{help_} Repeatable, or comma-separated: --soc SM8650,SM8750 (qnndeploy socs lists "
                             "them).")


# The sample option set of every command that feeds a model samples (validate, diagnose, device verify; compile's
# calibration takes the folder as --calib): what each option means is written once, here.
SAMPLES_HELP = ("*.npz (one per sample) or INPUT.npy; for a one-input graph .wav or .png/.jpg files (one per sample, "
                "through --preprocess); DIR/GRAPH/ per graph.")
PREPROCESS_HELP = ("How audio and image files become the input, e.g. image:resize=224x224,scale=1/255,"
                   "mean=0.485/0.456/0.406,std=0.229/0.224/0.225 or audio:logmel,n_mels=80,rate=16000 or audio:raw "
                   "[default: from the input's shape: image scale=1/255, audio raw].")


def sample_options(folder: str = "--inputs", purpose: str = "Real input samples:", random: bool = True,
                   random_default: str = "1") -> Callable[[Any], Any]:
    """`--inputs DIR [--preprocess SPEC|FILE.json] | --random N [--seed S]`, defined once; the command passes
    them to samples.sample_source, the one function that resolves them. `folder` names the folder option
    (compile's is --calib, its calibration data) and `random` says whether random samples are allowed. The command
    receives the folder as `inputs` (`calib` for --calib), `preprocess`, `random_`, `seed` and `ranges` (NAME ->
    (LO, HI))."""

    options = [
        click.option(folder, folder.lstrip("-"), type=click.Path(path_type=Path), metavar="DIR",
                     help=f"{purpose} {SAMPLES_HELP}"),
        click.option("--preprocess", metavar="SPEC|FILE.json", help=PREPROCESS_HELP),
    ]
    if random:
        options += [
            click.option("--random", "random_", cls=Renamed, type=int, metavar="N",
                         help=f"N seeded random samples, instead of {folder} [default: {random_default}]."),
            click.option("--seed", type=int, default=0, show_default=True, metavar="S",
                         help="Seed of the random samples."),
            click.option("--range", "ranges", multiple=True, metavar="NAME=LO:HI", callback=_ranges,
                         help="The integers input NAME takes (LO to HI, both included), for random samples: a "
                              "length, a count, an index the graph does not bound. Repeatable [default: what the "
                              "graph implies (an index below its table's size, a length up to the positions it "
                              "masks), else 0 to 9, and the output says so]."),
        ]

    def decorate(fn: Any) -> Any:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def _ranges(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    try:
        return assignments(values, "--range", _parse_range)
    except BadInput as e:
        raise click.UsageError(str(e), ctx) from None


def _parse_range(text: str) -> tuple[str, tuple[int, int]]:
    """`NAME=LO:HI` (integers, LO <= HI, both included) -> (NAME, (LO, HI)): the values an integer input takes."""
    name, _, span = text.rpartition("=")
    lo_text, _, hi_text = span.partition(":")
    try:
        if not name:
            raise ValueError
        lo, hi = int(lo_text), int(hi_text)
    except ValueError:
        raise BadInput(f"--range {text}: give NAME=LO:HI, the integers an input takes (LO to HI, both included), "
                       "e.g. x_lens=1:1500") from None
    if lo > hi or max(abs(lo), abs(hi)) >= 2**63:
        raise BadInput(f"--range {text}: LO must be at most HI, both 64-bit integers")
    return name, (lo, hi)


def next_step(*commands: str) -> None:
    """The `next:` line every stage prints when it succeeds: the command(s) to run next, ready to paste."""
    click.echo("next: " + ", then ".join(commands))


def command_line(*words: object) -> str:
    """A command line with each word quoted for a POSIX shell (paths as shown())."""
    return shlex.join(shown(w) if isinstance(w, Path) else str(w) for w in words)


def assignments(values: tuple[str, ...], option: str, parse: Callable[[str], tuple[str, Any]]) -> dict[str, Any]:
    """NAME=VALUE options into a dict, refusing a NAME given twice."""
    out: dict[str, Any] = {}
    for v in values:
        name, value = parse(v)
        if name in out:
            raise BadInput(f"{option} gives {name} twice")
        out[name] = value
    return out


# --- progress on stderr ---------------------------------------------------------------------------------------------

@contextmanager
def byte_progress(description: str, quiet: bool = False) -> Iterator[Callable[[int], None] | None]:
    """A live byte counter on stderr for long reads; the library only calls back with byte counts."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    # rich.progress takes ~50 ms to import: only a terminal pays for it, never `--help` or a pipe.
    from rich.console import Console
    from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn, TransferSpeedColumn

    with Progress(SpinnerColumn(), TextColumn(description), DownloadColumn(), TransferSpeedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda n: bar.advance(task, n)


@contextmanager
def job_progress(what: str) -> Iterator[Callable[[int, int, Any], None] | None]:
    """Progress on stderr fed by the library's (done, total, JobStarted | result) callback, for compile and
    validate: a bar on a terminal; elsewhere (a CI log, a pipe) one plain line when a job starts and one when it
    ends, with its elapsed seconds. stdout (and so --json) carries none of it. A start (records.JobStarted) is told
    from a result by having no status: importing records here would load it for every command's --help."""
    if not sys.stderr.isatty():
        started: dict[tuple[str, str], float] = {}

        def line(done: int, total: int, event: Any) -> None:
            if event is None:
                return
            key = (event.graph, event.soc)
            if not hasattr(event, "status"):
                started[key] = time.monotonic()
                counted = f" ({done} of {total} done)" if total else ""  # 0: before the jobs are planned
                click.echo(f"{what}: {event.graph} {event.soc} started{counted}", err=True)
                return
            seconds = time.monotonic() - started.pop(key, time.monotonic())
            click.echo(f"{what}: {event.graph} {event.soc} {event.status} in {seconds:.1f} s ({done} of {total} "
                       "done)", err=True)

        yield line
        return
    # rich.progress takes ~50 ms to import: only a terminal pays for it, never `--help` or a pipe.
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[last]}"), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None, last="")

        def update(done: int, total: int, result: Any) -> None:
            if result is not None and not hasattr(result, "status"):
                bar.update(task, total=total or None, last=f"{result.graph} {result.soc} running")
                return
            last = f"{result.graph} {result.soc} {result.status}" if result is not None else ""
            bar.update(task, completed=done, total=total, last=last)

        yield update


@dataclasses.dataclass(frozen=True)
class Shown:
    """What step_progress hands the command: `step` for the library's steps callback (told each long step as it
    starts, in words), `read` for its byte counter (None where no bar is drawn)."""

    step: Callable[[str], None]
    read: Callable[[int], None] | None


QUIET_S = 2.0  # a command that ends sooner prints no progress (a bad input's error stays the one line on stderr)
QUIET_ENV = "QNNDEPLOY_PROGRESS_QUIET_S"  # the seconds before progress lines start, where output is not a terminal


@contextmanager
def step_progress(what: str) -> Iterator[Shown]:
    """Progress on stderr fed by the library's steps callback, for the commands whose steps run long (diagnose's
    compiles, bundle verify's hashing and emulator runs, a phone's runs, report's records): on a terminal a spinner
    with the current step, the bytes read and the time; elsewhere (a CI log, a pipe) one line per step as it
    starts, with the seconds since the command started, and a last line with the total, once the command has run
    QUIET_S (the step under way then is said at once). stdout (and so --json) carries none of it."""
    start = time.monotonic()
    if not sys.stderr.isatty():
        quiet = float(os.environ.get(QUIET_ENV) or QUIET_S)
        now: list[str | None] = [None]  # the step under way
        shown, lock = [False], threading.Lock()

        def emit(text: str) -> None:
            click.echo(f"[{time.monotonic() - start:6.1f} s] {what}: {text}", err=True)
            shown[0] = True

        def line(text: str) -> None:
            with lock:
                now[0] = text
                if time.monotonic() - start >= quiet:
                    emit(text)

        def late() -> None:  # the quiet period is over: the step under way is said, and every one after it
            with lock:
                if not shown[0] and now[0] is not None:
                    emit(now[0])

        timer = threading.Timer(quiet, late)
        timer.daemon = True
        timer.start()
        try:
            yield Shown(line, None)
        finally:
            timer.cancel()
        with lock:
            if shown[0]:
                emit("done")
        return
    # rich.progress takes ~50 ms to import: only a terminal pays for it, never `--help` or a pipe.
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn(what), TextColumn("{task.description}"),
                  TextColumn("{task.fields[read]}"), TimeElapsedColumn(), console=Console(stderr=True),
                  transient=True, redirect_stdout=False) as bar:  # stdout stays the command's own
        task = bar.add_task("", total=None, read="")
        read, lock = [0], threading.Lock()

        def advance(n: int) -> None:  # called from the library's hashing threads
            with lock:
                read[0] += n
                bar.update(task, read=size_text(read[0]))

        yield Shown(lambda text: bar.update(task, description=text), advance)


# --- renderers shared by two commands -----------------------------------------------------------------------------

def render_verify(result: VerifyReport, shallow: bool = False) -> None:
    """A bundle's verify report, as bundle verify shows it and every command shows the report of a bundle it
    refuses. Paths and messages come from the bundle (file names, manifest text): printed escaped."""
    where = escaped(f"{result.name}-{result.version}" if result.name else result.bundle)
    if result.ok:
        click.echo(f"OK  {escaped(result.bundle)}: {where}, QAIRT {escaped(result.qairt)}, {result.files} files, "
                   f"{result.bytes / 1e6:.1f} MB")
        click.echo(f"    targets: {escaped(', '.join(result.targets)) or 'none (CPU only)'}; "
                   f"runtime: {escaped(result.runtime)}")
    else:
        click.echo(f"FAIL {escaped(result.bundle)}: {len(result.problems)} problem(s)")
        for p in result.problems:
            click.echo(f"  - {escaped(p.path)}: {escaped(p.message)}")
    if result.deep or shallow:
        deep = escaped(result.deep) if result.deep else "not loaded on the host emulator (--shallow)"
        click.echo(f"    binaries: {deep}")
    if result.unchecked:
        click.echo(f"    unchecked (no libQnnSystem here): {escaped(', '.join(result.unchecked))}")
    for line in result.licences:
        click.echo(f"    licence: {escaped(line)}")
    for w in result.warnings:
        click.echo(f"  warning: {escaped(w.path)}: {escaped(w.message)}")


def num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A plain-text table on stdout: a header, then one line per row, each column as wide as its widest cell. Cells
    are escaped (they may hold a bundle's or a phone's text); None is shown as '-'."""
    cells = [list(head), *([escaped("-" if c is None else c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def render_output(m: Any) -> None:
    """One output's comparison with the CPU, as validate and device verify show it."""
    click.echo(f"        {'ok ' if m.passed else 'BAD'} {m.name}: max|d| {m.max_abs_diff:.2e}  "
               f"rel L2 {num(m.rel_l2, '.2e')}  cos {num(m.cosine, '.6f')}  SNR {num(m.snr_db, '.1f')} dB"
               + (f"  argmax {m.argmax_agreement:.1%}" if m.argmax_agreement is not None else ""))
    if m.note:
        click.echo(f"            {m.note}")
