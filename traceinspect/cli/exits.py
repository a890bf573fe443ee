"""How a command ends: its exit code, and one line on stderr when it did not succeed.

    0  ok
    1  a finding reached --fail-on
    2  a usage or input error (one line naming the option or file; no traceback)
    3  an internal error, a bug: one line, and the file the full traceback was saved to (a new private file in the
       system's temporary folder, never the trace folder)
  130  interrupted (Ctrl-C);  143  terminated (SIGTERM): the worker processes are stopped first

A closed stdout (``| head -1``, or ``>&-``: started without one) ends the command quietly with 0; a stdout that
cannot be written (a full disk, ``> /dev/full``) is one line and 2. Nothing, whatever happens, prints a traceback:
the process entry point (``entry``) turns even a failure of this module into one line and 3.
"""

from __future__ import annotations

import atexit
import errno
import os
import signal
import sys
import tempfile
import threading
import traceback

import click

from ..render.safe import one_line, path

from ..errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, TraceInspectError

EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 128 + signal.SIGTERM


class Terminated(SystemExit):
    """SIGTERM, raised in the main thread so that pools kill their workers and files are left whole."""


def say(line: str) -> None:
    try:
        click.echo(path(f"traceinspect: {line}"), err=True)  # one line, control characters made visible
    except OSError:
        pass  # stderr gone too: the exit code is all that is left


def save_traceback(exc: BaseException) -> str | None:
    """The full traceback in a new file only this user can read; its path (None when nothing could be written)."""
    try:
        fd, path = tempfile.mkstemp(prefix="traceinspect-crash-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(f"traceinspect {' '.join(sys.argv[1:])}\n\n")
            fh.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return path
    except OSError:
        return None


def _closed_pipe(exc: BaseException | None) -> bool:
    return isinstance(exc, OSError) and exc.errno == errno.EPIPE


def _writing_stdout(exc: OSError) -> bool:
    """The error came from a write to stdout (``click.echo`` without ``err``), or stdout fails now."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "echo" and "click" in frame.f_code.co_filename and not frame.f_locals.get("err"):
            return True
        tb = tb.tb_next
    return _stdout_broken() is not None


def _stdout_broken() -> OSError | None:
    """The error stdout gives now, if it cannot be written."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError as exc:
        return exc
    return None


def open_missing_streams() -> None:
    """A process started with stdout or stderr closed (``>&-``: Python then has ``sys.stdout`` None) gets
    /dev/null there: what it prints is dropped, as for a reader that stopped reading (exit 0, nothing else)."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        if getattr(sys, name) is not None:
            continue
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False))
        except OSError:
            pass


def exit_process(code: int) -> None:
    """Exit the process with ``code``. A stdout that failed is pointed at /dev/null first, so that the
    interpreter's own flush at exit has nothing left to complain about (no "Exception ignored" lines).

    Once the streams are flushed and the exit handlers have run (``multiprocessing``'s among them: it reaps the
    worker processes), the process ends without the interpreter's own shutdown. That shutdown freed every object
    one by one (0.2 s after a report of a 1 GB trace, for nothing), and after an interrupt it woke the manager
    thread of the process pool the interrupt left, whose wake-up pipe Python 3.11 can find closed by then: an
    "Exception ignored ... Bad file descriptor" traceback under the one line. Every thread of ours is a daemon;
    the pool's manager has nothing left to manage once its workers are killed."""
    if _stdout_broken() is not None:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        sys.exit(code)
    atexit._run_exitfuncs()
    os._exit(code)


def run(command, argv: list[str] | None) -> int:
    """``command.main(argv)`` with every way of ending mapped to an exit code and at most one line on stderr."""
    streams = sys.stdout, sys.stderr
    try:
        try:
            command.main(args=argv, prog_name="traceinspect", standalone_mode=False)
        finally:
            sys.stdout.flush()
    except Terminated:
        say("terminated")
        return EXIT_TERMINATED
    except SystemExit as exc:
        if sys.stdout is not streams[0]:  # click met a closed stdout: it wrapped the streams and exits 1
            sys.stdout, sys.stderr = streams
            return EXIT_OK
        return int(exc.code or 0)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            say("interrupted")
            return EXIT_INTERRUPTED
        say("aborted")
        return EXIT_INPUT
    except click.ClickException as exc:
        say(exc.format_message())
        return EXIT_INPUT
    except TraceInspectError as exc:
        say(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        say("interrupted")
        return EXIT_INTERRUPTED
    except OSError as exc:
        if _closed_pipe(exc):
            return EXIT_OK  # the reader has what it wanted (``| head``)
        if _writing_stdout(exc):
            say(f"cannot write to standard output ({exc.strerror or exc})")
            return EXIT_INPUT
        return _internal(exc)
    except Exception as exc:  # noqa: BLE001 - a bug: one line and where its traceback is, never a bare traceback
        return _internal(exc)
    return EXIT_OK


def escaped(exc: BaseException) -> int:
    """The exit code of what got past ``run`` (a signal that arrived between its steps): one line, no traceback."""
    if isinstance(exc, Terminated):
        say("terminated")
        return EXIT_TERMINATED
    if isinstance(exc, KeyboardInterrupt):
        say("interrupted")
        return EXIT_INTERRUPTED
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else EXIT_INPUT
    return _internal(exc)


def _internal(exc: BaseException) -> int:
    where = save_traceback(exc)
    saved = f"; the full traceback is in {where}" if where else "; the traceback could not be saved"
    say(f"internal error ({type(exc).__name__}: {one_line(exc, 300)}){saved}. Please report it with that file.")
    return EXIT_INTERNAL


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    _quiet_threads()
    raise Terminated(EXIT_TERMINATED)


def _on_sigint(signum, frame) -> None:
    _quiet_threads()
    raise KeyboardInterrupt


def _quiet_threads() -> None:
    """From a signal on, the process is ending with its one line: what a thread of a process pool raises while the
    pool is torn down is not printed. (Python 3.11's pool manager, finding its workers killed, sets an error on
    futures the interrupted loop has cancelled already, and raises ``InvalidStateError``.)"""
    threading.excepthook = lambda args: None


def install_signal_handlers() -> None:
    """SIGTERM becomes ``Terminated`` and SIGINT ``KeyboardInterrupt`` in the main thread (the process entry point
    only, not an embedding), each first silencing the threads that the teardown it starts may trip."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where Ctrl-C was set to be ignored
        signal.signal(signal.SIGINT, _on_sigint)
