"""The Python side of ``offload-shim run PROGRAM``: runs inside the program.

``offload-shim run`` starts ``PROGRAM`` with ``LD_PRELOAD=libosh_interposer.so`` and
``OFFLOAD_SHIM_EMBED=1``.  The program's first offload call (the ``__tgt_register_lib``
of its registration constructor, before ``main``; under ``OFFLOAD_SHIM_EMBED_LAZY=1``
its first construct or other call past the registrations: ``native/interposer.c``
"deferred boot") makes the interposer ``dlopen`` the
shared ``libpython`` named by ``OFFLOAD_SHIM_LIBPYTHON``, ``Py_InitializeEx(0)``, extend
``sys.path`` from ``OFFLOAD_SHIM_PYTHONPATH`` and call :func:`start`; it then releases the
GIL, and every later callback takes it (``PyGILState_Ensure``/``Release``), whichever
program thread offloads.  The runtime lives for the whole process, as libomptarget's
does: unregistering the last image leaves plugins and devices up, and a library loaded
later is loaded into them.  :func:`stop` runs once, while the process exits, at the
latest point at which the plugins and the interpreter are still alive (the interposer's
own destructor, or earlier when an exit handler of a plugin is about to run:
``native/interposer.c``, "Teardown"), or -- when the program is itself a Python
interpreter -- from Python's ``atexit``, before the interpreter is finalised; nothing
enters Python after that.

Options come as JSON in ``OFFLOAD_SHIM_RUN_OPTIONS``: ``plugins`` (paths; default the
host plugins libomptarget 16 would load, :func:`default_plugins`: the x86_64
``.nextgen`` plugin, or the classic one under ``LIBOMPTARGET_NEXTGEN_PLUGINS=0`` for a
program that links libomptarget 16 -- 19.1 and 22.1 have no such variable),
``bundled`` (add the bundled host plugin),
``policy`` (``OMP_TARGET_OFFLOAD`` override), ``gomp_host_device`` (GCC-built code gets
:mod:`offload_shim.interposer.gomp.target`'s host device), ``report`` (path of a JSON report
written by :func:`stop`: interposed call counts, devices, initialised devices, errors,
and under ``gomp`` the GCC side: registrations and unregistrations, each construct with
where it ran and why, and on the host device every mapping with address, size and map
kind; ``fixed_upstream``: id -> count of the data-losing bugs of the program's
libomptarget release that constructs met and offload_shim did not reproduce,
:data:`offload_shim.interposer.llvm.profile.FIXED_UPSTREAM`).  GCC-built code unregisters its images from destructors; one that runs after
:func:`stop` (a linked library's, or any after an exit handler of a plugin stopped the
runtime early) is counted by :func:`late_gomp_unregister`, which writes the report again.
Nothing here runs at import time.
"""

from __future__ import annotations

import os
import sys
import threading

_state: dict | None = None
_lock = threading.Lock()


def options() -> dict:
    """``OFFLOAD_SHIM_RUN_OPTIONS`` decoded ({} when unset)."""
    raw = os.environ.get("OFFLOAD_SHIM_RUN_OPTIONS", "")
    if not raw:
        return {}
    from ..jsontext import loads        # json.loads without importing json (start-up)
    return loads(raw)


def _policy(opts: dict) -> str:
    """``disabled`` / ``default`` / ``mandatory``: the ``policy`` option, else
    ``OMP_TARGET_OFFLOAD`` (case-insensitive, as libomp reads it)."""
    raw = opts.get("policy") or os.environ.get("OMP_TARGET_OFFLOAD", "default")
    raw = str(raw).strip().lower()
    return raw if raw in ("disabled", "mandatory") else "default"


def start(python_host: bool = False) -> None:
    """Build the Runtime and install the interposer's callbacks (replaying the
    registrations the interposer recorded so far).  Idempotent.  ``python_host``: the
    program is a Python interpreter; :func:`stop` is registered with ``atexit``.

    When that fails (a plugin that cannot be loaded, no usable runtime...), one line
    ``offload_shim: the embedded runtime failed to start: ...`` goes to stderr, then:
    under an ``OMP_TARGET_OFFLOAD=mandatory`` policy a program that maps a libomptarget
    ends like its libomptarget does when offloading is mandatory and cannot happen (``Libomptarget
    fatal error 1: failure of target construct while offloading is mandatory``,
    ``omptarget ...`` for 19.1 and 22.1; ``abort()``);
    otherwise (a GCC-built program: libgomp decides) it continues without a device
    (the interposer's "no device" answers: host fallback)."""
    try:
        _start()
        if python_host:
            import atexit
            atexit.register(stop)
    except Exception as exc:  # noqa: BLE001 - reported here, never into C as a traceback
        opts = {}
        try:
            opts = options()
        except ValueError:
            pass
        sys.stdout.flush()
        line = (f"offload_shim: the embedded runtime failed to start: "
                f"{type(exc).__name__}: {exc}")
        if _policy(opts) == "mandatory" and _links_libomptarget():
            sys.stderr.write(line + "\n")
            name = "Libomptarget"
            try:
                from .llvm.profile import detect
                name = detect().name
            except Exception:  # noqa: BLE001 - the message matters more than the name
                pass
            sys.stderr.write(f"{name} fatal error 1: failure of target construct "
                             "while offloading is mandatory\n")
            sys.stderr.flush()
            os.abort()
        sys.stderr.write(line + "; running without it (no device: host fallback)\n")
        sys.stderr.flush()


def _links_libomptarget() -> bool:
    """True when a ``libomptarget.so.N`` is mapped (clang-built offload code): only then
    does a failed start end the program with libomptarget's mandatory fatal message.  A
    GCC-built program maps libgomp alone; its entry points pass through to libgomp
    without a callback table, and libgomp applies ``OMP_TARGET_OFFLOAD`` itself (GCC 12
    ``target.c`` ``resolve_device``: with no device, device 0 is the initial device and a
    mandatory policy runs it on the host), as without offload-shim
    (``native/interposer.c`` ``boot_failed`` decides the same way)."""
    try:
        from ..abi.interposer import loaded_libomptarget
        return loaded_libomptarget() is not None
    except Exception:  # noqa: BLE001 - when in doubt, the clang program's behaviour
        return True


def _start() -> None:
    global _state
    with _lock:
        if _state is not None:
            return
        import offload_shim as osh
        opts = options()
        plugins = opts.get("plugins") or []
        bundled = bool(opts.get("bundled"))
        rec = None
        if opts.get("record"):                  # run --record TRACE (offload_shim.trace)
            from ..trace import record
            rec = record.start(opts["record"], argv=_argv())
        try:
            rt = osh.Runtime(plugins or default_plugins(), bundled=bundled,
                             pool=rec.pool_options() if rec is not None else None)
            cm = osh.interpose(rt, policy=opts.get("policy"),
                               gomp_host_device=bool(opts.get("gomp_host_device")))
            try:
                ip = cm.__enter__()
            except BaseException:
                rt.close()
                raise
            if rec is not None:
                rec.attach(rt, ip)
        except BaseException as exc:
            if rec is not None:
                record.stop(error=f"{type(exc).__name__}: {exc}")
            raise
        _state = {"runtime": rt, "cm": cm, "interposer": ip, "options": opts}


def _argv() -> list[str]:
    """This process's command line (``/proc/self/cmdline``; [] where unreadable)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


def default_plugins() -> list[str]:
    """The host plugins libomptarget 16 loads here, in its order
    (:func:`offload_shim.interposer.llvm.rtl.select_plugins`, with the release the program
    links: :func:`offload_shim.interposer.llvm.profile.detect`); every host plugin found
    when there is no LLVM 16 installation."""
    from .llvm.profile import detect
    from .llvm.rtl import select_plugins
    from ..plugins import discovery
    found = select_plugins(profile=detect())
    if found:
        return found
    return [c.path for c in discovery.candidates(bundled=False)
            if discovery.is_host_plugin(c.path)]


def stop(at_exit: bool = False) -> None:
    """Unregister what is still registered, free mappings, close the runtime (device
    teardown), write the report.  Idempotent; never raises (runs at exit).

    ``at_exit``: called by the interposer while the process exits
    (``native/interposer.c``, "Teardown").  If a plugin call is still running then
    (``exit()`` from inside a target region, or from one thread while another's kernel
    runs), a teardown would wait for it for ever: the callbacks are uninstalled
    (:meth:`~offload_shim.interposer.llvm.interface.Interposer.abandon`), nothing is
    unregistered or freed (the process's exit releases it; libomptarget's own teardown
    does not wait for kernels either), and the report says ``"abandoned"``."""
    global _state
    with _lock:
        st, _state = _state, None
    if st is None:
        return
    rt, ip, opts = st["runtime"], st["interposer"], st["options"]
    report: dict = {}
    try:
        from . import call_counts
        report = {"plugins": [p.name for p in rt.plugins],
                  "devices": [d.label for d in ip.devices],
                  "initialised": [d.label for d in ip.devices if d.initialized],
                  "libraries": len(ip.libraries),
                  "unsupported": [m for _, m in ip.unsupported],
                  "compilers": ip.compilers(),
                  "gomp_registrations": len(ip.gomp_registrations)}
        busy = [d.label for d in rt.devices if d.calls_in_flight] if at_exit else []
        if at_exit and not busy and ip.kernels_repeating():
            # a kernel construct the C side repeats (interposer_repeat.c) still runs
            busy = [d.label for d in ip.devices if d.initialized]
        if busy:
            ip.abandon()
            report["abandoned"] = busy
            report["errors"] = list(ip.errors)
            held = {}               # a construct still runs: its rows are in use, not leaked
        else:
            # counted before Interposer.close() frees the rows' memory and rt.close()
            # the rest (both silently, as libomptarget does)
            held = ip.leaks()
            st["cm"].__exit__(None, None, None)      # Interposer.close()
            report["errors"] = list(ip.errors)
            rt.close()
        report["leaks"] = {dev: [sum(n for n, _ in kinds.values()),
                                 sum(b for _, b in kinds.values())]
                           for dev, kinds in held.items()}
        report["leaks_by_kind"] = {dev: {k: list(v) for k, v in kinds.items()}
                                   for dev, kinds in held.items()}
        report["calls"] = call_counts()
        if opts.get("report") or ip._gomp.built is not None:
            report["gomp"] = ip.gomp.report()   # not built for it only (start-up cost)
        report["fixed_upstream"] = ip.fixed_upstream()
    except BaseException as exc:  # noqa: BLE001 - at exit: report, never raise
        report.setdefault("errors", []).append(f"stop: {type(exc).__name__}: {exc}")
        sys.stderr.write(f"offload_shim: error while stopping: {exc}\n")
    if opts.get("record"):
        from ..trace import record
        record.stop(errors=report.get("errors", []), leaks=report.get("leaks", {}),
                    abandoned=report.get("abandoned", []))
    global _stopped
    _stopped = {"report": report, "path": opts.get("report"), "interposer": ip}
    _write_report(report, opts.get("report"))


_stopped: dict | None = None


def _write_report(report: dict, path: str | None) -> None:
    if path:
        import json
        try:
            with open(path, "w") as f:
                json.dump(report, f)
        except OSError as exc:
            sys.stderr.write(f"offload_shim: cannot write the report {path}: {exc}\n")


def late_gomp_unregister(version: int, host_table: int, target_type: int,
                         target_data: int) -> None:
    """``GOMP_offload_unregister_ver`` after :func:`stop` (native/interposer_gomp.c calls
    this from the executable's destructor): counted in the report, which is written
    again.  Never raises."""
    st = _stopped
    if st is None:
        return
    try:
        from . import call_counts
        gomp = st["interposer"].gomp
        gomp.on_late_unregister(host_table, target_data)
        report = st["report"]
        report["gomp"] = gomp.report()
        report["calls"] = call_counts()
        _write_report(report, st["path"])
    except BaseException as exc:  # noqa: BLE001 - at exit, inside a C destructor
        sys.stderr.write(f"offload_shim: error after exit: {exc}\n")


__all__ = ["default_plugins", "late_gomp_unregister", "options", "start", "stop"]
