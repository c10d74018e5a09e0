"""Hand the uvicorn process over to the Go worker, listening where uvicorn was told to.

tt-model's ``kind: tt-dit-server`` launches::

    python -m uvicorn --host H --port P --lifespan on la_launcher.app:app

uvicorn parses its command line, then imports this module to find the ASGI app. At that
moment nothing is bound yet and uvicorn has installed no signal handlers, so this module
replaces the process image with the Go worker (``os.execve``) and sets ``LA_HTTP_ADDR`` to
H:P. The worker keeps the PID (PID 1 in the container), so ``docker stop``'s SIGTERM reaches
it directly and it drains; it prints uvicorn's ``Application startup complete.`` landmark
once the model is loaded, which is the line tt-model waits for.

The exec happens only when uvicorn is the program importing us. Any other import (tt-model's
image verification runs ``importlib.import_module("la_launcher.app")``, unit tests, a REPL)
gets a module whose ``app`` is a placeholder ASGI callable that refuses every request.

Environment:

``LA_WORKER_BIN``
    the worker executable (default :data:`DEFAULT_WORKER_BIN`, where the tt-model image
    ships it).
``LA_WORKER_ARGS``
    extra arguments for the worker, split like a shell would (default none).

With ``LA_ENGINE=ttnn`` the worker embeds CPython to drive TT-NN. An embedded interpreter
knows neither which libpython nor which virtual environment uvicorn ran under, so unless
they are already set the worker also gets ``LA_PYTHON_LIB`` (this interpreter's shared
libpython), ``LA_PYTHON_SITE`` (its site-packages, the venv's in the tt-model image) and
``PYTHONHOME`` (its base prefix, where the standard library is).
"""

import os
import shlex
import signal
import site
import sys
import sysconfig

#: Where the tt-model image ships the worker: ``source.extra_code`` stages
#: ``la_worker/la-worker`` into ``code/``, which the image copies to ``/opt/tt-metal``.
DEFAULT_WORKER_BIN = "/opt/tt-metal/la_worker/la-worker"

#: uvicorn's own defaults, used when neither the command line nor UVICORN_* says otherwise.
_DEFAULT_HOST = "127.0.0.1"
_DEFAULT_PORT = 8000


class LaunchError(RuntimeError):
    """The uvicorn command line asks for something the worker cannot take over."""


def started_by_uvicorn(argv):
    """True when argv is uvicorn's: ``python -m uvicorn ...`` or the ``uvicorn`` script."""
    if not argv:
        return False
    prog = os.path.normpath(argv[0])
    name = os.path.basename(prog)
    if name == "uvicorn":
        return True
    # python -m uvicorn (and python -m uvicorn.main) run a file of the uvicorn package
    return name in ("__main__.py", "main.py") and os.path.basename(os.path.dirname(prog)) == "uvicorn"


def uvicorn_options(args):
    """Parse uvicorn's arguments (argv without the program) the way uvicorn itself did.

    Uses uvicorn's own click command, so ``--port 1``, ``--port=1``, ``UVICORN_PORT`` (read
    from os.environ, as uvicorn reads it) and the defaults all resolve exactly as they did
    for uvicorn. Returns a dict with host, port, uds, fd, reload and workers.
    """
    try:
        from uvicorn.main import main as uvicorn_cli
    except ImportError:
        return scan_options(args)
    ctx = uvicorn_cli.make_context("uvicorn", list(args), resilient_parsing=True)
    params = ctx.params
    workers = params.get("workers")
    if workers is None:
        workers = int(os.environ.get("WEB_CONCURRENCY", "1"))
    return {
        "host": params.get("host") or _DEFAULT_HOST,
        "port": params.get("port") if params.get("port") is not None else _DEFAULT_PORT,
        "uds": params.get("uds"),
        "fd": params.get("fd"),
        "reload": bool(params.get("reload")),
        "workers": workers,
    }


def scan_options(args):
    """A plain reading of --host/--port (both ``--opt v`` and ``--opt=v``), for a uvicorn
    whose command-line module is not importable."""
    found = {}
    wanted = ("--host", "--port", "--uds", "--fd", "--workers")
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        name, sep, value = arg.partition("=")
        if name in wanted:
            if not sep:
                if i + 1 >= len(args):
                    raise LaunchError(f"uvicorn option {name} has no value")
                i += 1
                value = args[i]
            found[name] = value
        elif arg == "--reload":
            found["--reload"] = "1"
        i += 1
    environ = os.environ
    port = found.get("--port", environ.get("UVICORN_PORT", str(_DEFAULT_PORT)))
    try:
        port = int(port)
    except ValueError:
        raise LaunchError(f"uvicorn --port {port!r} is not a number") from None
    return {
        "host": found.get("--host", environ.get("UVICORN_HOST", _DEFAULT_HOST)),
        "port": port,
        "uds": found.get("--uds"),
        "fd": found.get("--fd"),
        "reload": "--reload" in found,
        "workers": int(found.get("--workers", environ.get("WEB_CONCURRENCY", "1"))),
    }


def listen_address(host, port):
    """host:port as Go's net.Listen wants it (IPv6 literals in brackets)."""
    if not 0 <= port <= 65535:
        raise LaunchError(f"port {port} is outside 0-65535")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def worker_command(args, environ):
    """The worker's argv and environment for a uvicorn command line.

    Raises LaunchError for what the worker cannot take over: a UNIX socket or inherited
    descriptor instead of host/port, and --reload or several workers (uvicorn binds in a
    parent process and imports the app in children, so there is no one process to replace).
    """
    opts = uvicorn_options(args)
    if opts["uds"] or opts["fd"] is not None:
        raise LaunchError("the worker listens on TCP only: use --host/--port, not --uds/--fd")
    if opts["reload"] or opts["workers"] != 1:
        raise LaunchError(
            "the worker replaces the uvicorn process: --reload and --workers (or "
            "WEB_CONCURRENCY) are not supported; run one worker per chip instead"
        )
    binary = environ.get("LA_WORKER_BIN") or DEFAULT_WORKER_BIN
    env = dict(environ)
    env["LA_HTTP_ADDR"] = listen_address(opts["host"], opts["port"])
    if environ.get("LA_ENGINE") == "ttnn":
        for name, value in embedded_python_env().items():
            env.setdefault(name, value)
    argv = [binary] + shlex.split(environ.get("LA_WORKER_ARGS", ""))
    return argv, env


def libpython_path():
    """The shared libpython of this interpreter, or None when it is linked statically."""
    name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    if not name or ".so" not in name:  # "libpython3.X.a": no shared library to load
        return None
    # LIBDIR is where it was built; a relocated Python (uv's) has it under its prefix.
    for directory in (os.path.join(sys.base_prefix, "lib"), sysconfig.get_config_var("LIBDIR")):
        if directory and os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    return None


def embedded_python_env():
    """LA_PYTHON_LIB, LA_PYTHON_SITE and PYTHONHOME describing this interpreter (see above)."""
    env = {"PYTHONHOME": sys.base_prefix}
    lib = libpython_path()
    if lib:
        env["LA_PYTHON_LIB"] = lib
    sites = [p for p in site.getsitepackages() if os.path.isdir(p)]
    if sites:
        env["LA_PYTHON_SITE"] = ":".join(sites)
    return env


def exec_worker(args, environ):
    """Replace this process with the worker. Returns only by raising."""
    argv, env = worker_command(args, environ)
    binary = argv[0]
    if not os.access(binary, os.X_OK):
        raise LaunchError(
            f"LA_WORKER_BIN {binary!r} is not an executable file; the image ships the "
            f"worker at {DEFAULT_WORKER_BIN}"
        )
    print(
        f"la_launcher: exec {shlex.join(argv)} with LA_HTTP_ADDR={env['LA_HTTP_ADDR']}",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    # Python ignores SIGPIPE and an ignored signal stays ignored across exec; give the
    # worker the default dispositions a freshly started program expects.
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    os.execve(binary, argv, env)


async def app(scope, receive, send):
    """Placeholder ASGI app for imports that are not uvicorn's (never serves traffic)."""
    if scope["type"] == "lifespan":
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({
                "type": "lifespan.startup.failed",
                "message": "la_launcher.app was imported without exec'ing the worker",
            })
        return
    raise LaunchError("la_launcher.app only hands the process to the Go worker")


if started_by_uvicorn(sys.argv):
    exec_worker(sys.argv[1:], os.environ)
