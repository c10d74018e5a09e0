"""Unit tests of the launcher shim. Run: cd launcher && /usr/bin/python3 -m unittest -v

They need Debian's python3-uvicorn (apt-get install -y python3-uvicorn). The end-to-end test
with the real Go worker is launcher_test.go (go test ./launcher/).
"""

import asyncio
import os
import stat
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from la_launcher import app as launcher

HERE = os.path.dirname(os.path.abspath(__file__))


class StartedByUvicorn(unittest.TestCase):
    def test_module_and_script(self):
        self.assertTrue(launcher.started_by_uvicorn(["/usr/lib/python3/dist-packages/uvicorn/__main__.py"]))
        self.assertTrue(launcher.started_by_uvicorn(["/opt/tt-venv/bin/uvicorn", "--port", "1"]))
        self.assertTrue(launcher.started_by_uvicorn(["/venv/lib/python3.12/site-packages/uvicorn/main.py"]))

    def test_other_programs(self):
        for argv in ([], ["-c"], [""], ["/usr/bin/python3"], ["/x/pytest/__main__.py"], ["/x/uvicorn.py"], ["/x/app/main.py"]):
            self.assertFalse(launcher.started_by_uvicorn(argv), argv)


class Options(unittest.TestCase):
    def check(self, parse, args, host, port):
        opts = parse(args)
        self.assertEqual((opts["host"], opts["port"]), (host, port), args)

    def test_both_spellings_with_uvicorns_parser_and_the_scan(self):
        for parse in (launcher.uvicorn_options, launcher.scan_options):
            with self.subTest(parse=parse.__name__), mock.patch.dict(os.environ, clear=True):
                self.check(parse, ["--host", "0.0.0.0", "--port", "20000", "--lifespan", "on", "m:app"], "0.0.0.0", 20000)
                self.check(parse, ["--host=10.1.2.3", "--port=1", "m:app"], "10.1.2.3", 1)
                self.check(parse, ["--port", "7", "--host", "::", "m:app"], "::", 7)
                self.check(parse, ["m:app"], "127.0.0.1", 8000)

    def test_uvicorn_env_vars(self):
        env = {"UVICORN_HOST": "0.0.0.0", "UVICORN_PORT": "9123"}
        for parse in (launcher.uvicorn_options, launcher.scan_options):
            with self.subTest(parse=parse.__name__), mock.patch.dict(os.environ, env, clear=True):
                self.check(parse, ["m:app"], "0.0.0.0", 9123)
                self.check(parse, ["--port", "5", "m:app"], "0.0.0.0", 5)

    def test_scan_refuses_a_missing_or_bad_port(self):
        with self.assertRaisesRegex(launcher.LaunchError, "no value"):
            launcher.scan_options(["--port"])
        with self.assertRaisesRegex(launcher.LaunchError, "not a number"):
            launcher.scan_options(["--port=http"])


class WorkerCommand(unittest.TestCase):
    def test_listen_address_and_environment(self):
        env = {"LA_WORKER_BIN": "/w/la-worker", "LA_WORKER_ARGS": "--x 'a b'", "KEEP": "1"}
        with mock.patch.dict(os.environ, clear=True):
            argv, out = launcher.worker_command(["--host", "::", "--port=20000", "m:app"], env)
        self.assertEqual(argv, ["/w/la-worker", "--x", "a b"])
        self.assertEqual(out["LA_HTTP_ADDR"], "[::]:20000")
        self.assertEqual(out["KEEP"], "1")
        self.assertNotIn("LA_HTTP_ADDR", env, "the caller's environment must not change")

    def test_default_binary(self):
        with mock.patch.dict(os.environ, clear=True):
            argv, _ = launcher.worker_command(["m:app"], {})
        self.assertEqual(argv, [launcher.DEFAULT_WORKER_BIN])

    def test_refusals(self):
        cases = {
            "--uds": ["--uds", "/tmp/s", "m:app"],
            "--fd": ["--fd", "3", "m:app"],
            "--reload": ["--reload", "m:app"],
            "--workers": ["--workers", "2", "m:app"],
        }
        for name, args in cases.items():
            with self.subTest(name), mock.patch.dict(os.environ, clear=True):
                with self.assertRaisesRegex(launcher.LaunchError, name.lstrip("-")):
                    launcher.worker_command(args, {})
        with mock.patch.dict(os.environ, {"WEB_CONCURRENCY": "4"}, clear=True):
            with self.assertRaisesRegex(launcher.LaunchError, "WEB_CONCURRENCY"):
                launcher.worker_command(["m:app"], {})

    def test_embedded_python_for_ttnn(self):
        with mock.patch.dict(os.environ, clear=True):
            _, out = launcher.worker_command(["m:app"], {"LA_ENGINE": "ttnn"})
            _, cpu = launcher.worker_command(["m:app"], {"LA_ENGINE": "cpu"})
            _, preset = launcher.worker_command(
                ["m:app"], {"LA_ENGINE": "ttnn", "LA_PYTHON_LIB": "/x/libpython3.12.so.1.0", "PYTHONHOME": "/x"})
        self.assertEqual(out["PYTHONHOME"], sys.base_prefix)
        self.assertTrue(os.path.isdir(out["PYTHONHOME"]))
        lib = launcher.libpython_path()
        if lib:  # Debian's libpython3.X is installed with python3-dev; a static build has none
            self.assertEqual(out["LA_PYTHON_LIB"], lib)
            self.assertTrue(os.path.isfile(lib), lib)
        for path in out["LA_PYTHON_SITE"].split(":"):
            self.assertTrue(os.path.isdir(path), path)
        for name in ("PYTHONHOME", "LA_PYTHON_LIB", "LA_PYTHON_SITE"):
            self.assertNotIn(name, cpu, "only the ttnn engine embeds Python")
        self.assertEqual((preset["LA_PYTHON_LIB"], preset["PYTHONHOME"]), ("/x/libpython3.12.so.1.0", "/x"),
                         "values already set are kept")

    def test_bad_port(self):
        with self.assertRaisesRegex(launcher.LaunchError, "outside"):
            launcher.listen_address("0.0.0.0", 70000)

    def test_missing_binary(self):
        with mock.patch.dict(os.environ, clear=True):
            with self.assertRaisesRegex(launcher.LaunchError, "not an executable"):
                launcher.exec_worker(["m:app"], {"LA_WORKER_BIN": "/nonexistent/la-worker"})


class PlaceholderApp(unittest.TestCase):
    def test_lifespan_startup_fails(self):
        sent = []

        async def receive():
            return {"type": "lifespan.startup"}

        async def send(message):
            sent.append(message)

        asyncio.run(launcher.app({"type": "lifespan"}, receive, send))
        self.assertEqual(sent[0]["type"], "lifespan.startup.failed")


class ExecThroughUvicorn(unittest.TestCase):
    """uvicorn really imports the module and the process really becomes LA_WORKER_BIN."""

    def test_process_becomes_the_worker(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "la-worker")
            with open(fake, "w") as f:
                # prints what a worker would act on, and its PID, then exits 0
                f.write('#!/bin/sh\necho "addr=$LA_HTTP_ADDR pid=$$ args=$*"\n')
            os.chmod(fake, stat.S_IRWXU)
            env = dict(os.environ, PYTHONPATH=HERE, LA_WORKER_BIN=fake, LA_WORKER_ARGS="serve --v")
            proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port=20555",
                 "--lifespan", "on", "la_launcher.app:app"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(out.strip(), f"addr=127.0.0.1:20555 pid={proc.pid} args=serve --v")
        self.assertIn("la_launcher: exec", err)

    def test_refusal_is_a_clear_uvicorn_failure(self):
        env = dict(os.environ, PYTHONPATH=HERE, LA_WORKER_BIN="/bin/true")
        proc = subprocess.run(
            [sys.executable, "-m", "uvicorn", "--uds", "/tmp/la.sock", "la_launcher.app:app"],
            env=env, capture_output=True, text=True, timeout=60,
        )
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("TCP only", proc.stderr)

    def test_plain_import_does_not_exec(self):
        env = dict(os.environ, PYTHONPATH=HERE, LA_WORKER_BIN="/bin/false")
        proc = subprocess.run(
            [sys.executable, "-c",
             "import importlib; m = importlib.import_module('la_launcher.app'); assert hasattr(m, 'app'); print('imported')"],
            env=env, capture_output=True, text=True, timeout=60,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout.strip(), "imported")


if __name__ == "__main__":
    unittest.main()
