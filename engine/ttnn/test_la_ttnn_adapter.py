"""Tests of the TT-NN adapter's parts that need no chip: settings from the option lines
(never from the environment), the file checks, the warm-up prompt, the protocol surface,
and a clear error from open() where ttnn is missing.
Run: cd engine/ttnn && /usr/bin/python3 -m unittest -v (engine/native's Go tests run them too)."""

import os
import tempfile
import unittest
from unittest import mock

import la_ttnn_adapter as A

CONFIG = {"weights_dir": "/snap", "max_seq_len": 4096, "image_token_id": 151665, "vocab": 152681,
          "hidden": 2048, "merge_kernel": 2, "llm_dir": "/llm"}

# The option lines the Go worker passes, at its configuration's defaults (package config),
# with the grid the pipeline adds.
OPTIONS = {"python_lib": "", "adapter": "la_ttnn_adapter", "path": "", "python_site": "", "llm_dir": "/llm",
           "canon_grid": "24x44", "precision": "accuracy", "trace": "1", "trace_region_size": "50000000",
           "warmup_runs": "2", "warmup_decode_steps": "4", "mesh_shape": "1x1", "device_id": ""}

# Every knob the adapter cannot do without, with the worker variable it comes from.
REQUIRED = {"canon_grid": "LA_CANON_GRID", "precision": "LA_PREC", "trace": "LA_TRACE",
            "trace_region_size": "LA_TRACE_REGION_SIZE", "warmup_runs": "LA_WARMUP_RUNS",
            "warmup_decode_steps": "LA_WARMUP_DECODE_STEPS", "mesh_shape": "TT_MESH_SHAPE"}


def option_lines(options):
    """options as native.Open writes them: sorted "key=value" lines."""
    return "".join(f"{k}={v}\n" for k, v in sorted(options.items()))


def config(options=None, drop=(), **keys):
    """CONFIG as the bridge hands it to open(): OPTIONS updated by options, less the keys in
    drop, as config["options"]; keys override the config's own entries."""
    o = dict(OPTIONS, **(options or {}))
    for k in drop:
        o.pop(k)
    return dict(CONFIG, options=option_lines(o), **keys)


class SettingsTest(unittest.TestCase):
    def test_worker_defaults_are_the_validated_recipe(self):
        s = A.Settings.from_config(config())
        self.assertEqual(s.llm_dir, "/llm")
        self.assertEqual(s.grid, (24, 44))
        self.assertEqual(s.image_tokens(), 264)
        self.assertEqual((s.precision, s.trace, s.trace_region_size), ("accuracy", True, 50_000_000))
        self.assertEqual((s.warmup_runs, s.warmup_decode_steps), (2, 4))
        self.assertEqual((s.mesh_shape, s.device_ids, s.python_site), ((1, 1), (), ""))

    def test_llm_dir_comes_from_the_config(self):
        self.assertEqual(A.Settings.from_config(config(llm_dir="/given")).llm_dir, "/given")
        with self.assertRaisesRegex(ValueError, "no llm_dir option: .*LA_LLM_DIR"):
            A.Settings.from_config(config(llm_dir=""))

    def test_knobs(self):
        options = {"canon_grid": "(16, 28)", "precision": "bfp8attn", "trace": "0", "trace_region_size": "160000000",
                   "warmup_runs": "1", "warmup_decode_steps": "7", "mesh_shape": "1,1", "device_id": "3",
                   "python_site": "/site/a:/site/b"}
        s = A.Settings.from_config(config(options))
        self.assertEqual((s.grid, s.precision, s.trace, s.trace_region_size, s.warmup_runs, s.warmup_decode_steps,
                          s.device_ids, s.python_site),
                         ((16, 28), "bfp8attn", False, 160_000_000, 1, 7, (3,), "/site/a:/site/b"))

    def test_bad_knobs_say_which(self):
        cases = {
            "precision": ("fast", "LA_PREC='fast': choose one of"),
            "trace": ("maybe", "LA_TRACE"),
            "canon_grid": ("25x44", "multiples of the merge kernel"),
            "mesh_shape": ("one", "TT_MESH_SHAPE"),
            "warmup_runs": ("0", "LA_WARMUP_RUNS"),
            "warmup_decode_steps": ("two", "LA_WARMUP_DECODE_STEPS"),
            "trace_region_size": ("big", "LA_TRACE_REGION_SIZE"),
            "device_id": ("a", "TT_DEVICE_ID"),
        }
        for key, (value, want) in cases.items():
            with self.subTest(key=key), self.assertRaisesRegex(ValueError, want):
                A.Settings.from_config(config({key: value}))
        with self.assertRaisesRegex(ValueError, "paged KV"):
            A.Settings.from_config(config(max_seq_len=40000))
        with self.assertRaisesRegex(ValueError, "config lacks 'vocab'"):
            A.Settings.from_config({k: v for k, v in config().items() if k != "vocab"})

    def test_missing_required_option_is_a_clear_error(self):
        for key, variable in REQUIRED.items():
            want = f"no {key} option: the worker passes {variable} as option {key}"
            with self.subTest(key=key, missing="line"), self.assertRaisesRegex(ValueError, want):
                A.Settings.from_config(config(drop=[key]))
            with self.subTest(key=key, missing="value"), self.assertRaisesRegex(ValueError, want):
                A.Settings.from_config(config({key: ""}))
        with self.assertRaisesRegex(ValueError, "no canon_grid option"):
            A.Settings.from_config({k: v for k, v in config().items() if k != "options"})

    def test_native_grid_is_refused(self):
        for value in ("native", "NATIVE"):
            with self.subTest(value=value), self.assertRaisesRegex(
                    ValueError, "LA_CANON_GRID=native: the ttnn backend needs a fixed grid HxW"):
                A.Settings.from_config(config({"canon_grid": value}))

    def test_environment_is_ignored(self):
        bogus = {"LA_CANON_GRID": "native", "LA_PREC": "fast", "LA_TRACE": "maybe", "LA_WARMUP_RUNS": "0",
                 "TT_MESH_SHAPE": "8x4", "TT_DEVICE_ID": "x", "LA_LLM_DIR": "/env/llm", "TT_DIT_CACHE_DIR": "/env",
                 "LA_PYTHON_SITE": "/no/such/site"}
        with mock.patch.dict(os.environ, bogus):
            s = A.Settings.from_config(config())
            self.assertEqual((s.grid, s.precision, s.trace, s.warmup_runs, s.mesh_shape, s.device_ids, s.llm_dir,
                              s.python_site), ((24, 44), "accuracy", True, 2, (1, 1), (), "/llm", ""))
            # Nor does the environment stand in for a missing option.
            with self.assertRaisesRegex(ValueError, "no precision option"):
                A.Settings.from_config(config(drop=["precision"]))

    def test_parse_options(self):
        self.assertEqual(A.parse_options("a=1\n\nb = x=y \nc=\n"), {"a": "1", "b": "x=y", "c": ""})
        self.assertEqual(A.parse_options(""), {})
        self.assertEqual(A.parse_options(None), {})
        with self.assertRaisesRegex(ValueError, "option line 'oops': want key=value"):
            A.parse_options("a=1\noops\n")

    def test_parse_pair(self):
        for text in ("24x44", "24X44", "(24, 44)", "24,44"):
            self.assertEqual(A.parse_pair(text, "grid"), (24, 44))
        for text in ("24", "0x4", "axb", "1x2x3", ""):
            with self.subTest(text=text), self.assertRaises(ValueError):
                A.parse_pair(text, "grid")


class FilesAndOpenTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.snap = os.path.join(self.tmp.name, "snap")
        self.llm = os.path.join(self.tmp.name, "llm")
        os.makedirs(self.snap)
        os.makedirs(self.llm)
        open(os.path.join(self.snap, "config.json"), "w").close()

    def config(self, **options):
        return config(dict(options, llm_dir=self.llm), weights_dir=self.snap, llm_dir=self.llm)

    def settings(self, **options):
        return A.Settings.from_config(self.config(**options))

    def test_missing_extraction_says_what_to_do(self):
        with self.assertRaisesRegex(FileNotFoundError, "first-boot extraction"):
            self.settings().check_files()

    def test_more_than_one_chip_is_refused(self):
        for f in ("model.safetensors", "config.json"):
            open(os.path.join(self.llm, f), "w").close()
        self.settings().check_files()
        with self.assertRaisesRegex(ValueError, "one chip"):
            self.settings(mesh_shape="1x2").check_files()

    def test_open_without_ttnn_is_a_clear_error(self):
        for f in ("model.safetensors", "config.json"):
            open(os.path.join(self.llm, f), "w").close()
        with self.assertRaisesRegex(RuntimeError, "TT-NN stack is not importable"):
            A.open(self.config())

    def test_open_checks_settings_first(self):
        with self.assertRaisesRegex(ValueError, "LA_CANON_GRID=native"):
            A.open(self.config(canon_grid="native"))


class SiteDirsTest(unittest.TestCase):
    def test_site_dirs_process_pth_files(self):
        with tempfile.TemporaryDirectory() as site_dir, tempfile.TemporaryDirectory() as extra:
            with open(os.path.join(extra, "la_site_probe.py"), "w") as f:
                f.write("VALUE = 42\n")
            with open(os.path.join(site_dir, "probe.pth"), "w") as f:
                f.write(extra + "\n")
            saved = list(A.sys.path)
            try:
                python_site = A.Settings.from_config(config({"python_site": site_dir})).python_site
                self.assertEqual(A.add_site_dirs(python_site), [site_dir])
                import la_site_probe
                self.assertEqual(la_site_probe.VALUE, 42)
            finally:
                A.sys.path[:] = saved
                A.sys.modules.pop("la_site_probe", None)
        with self.assertRaisesRegex(FileNotFoundError, "LA_PYTHON_SITE"):
            A.add_site_dirs("/no/such/site")
        self.assertEqual(A.add_site_dirs(""), [])


class ProtocolTest(unittest.TestCase):
    def test_surface(self):
        for name in ("open", "vision", "prefill", "decode", "reset", "close", "logits"):
            self.assertTrue(callable(getattr(A, name)), name)

    def test_warmup_prompt_is_shaped_like_a_request(self):
        s = A.Settings.from_config(config())
        ids = A.warmup_prompt(s, s.image_tokens())
        self.assertEqual(ids.count(151665), 264)
        self.assertTrue(256 < len(ids) <= 512, len(ids))  # the 512-token prefill bucket, like a real prompt
        self.assertTrue(all(0 <= i < s.vocab for i in ids))

    def test_steps_delegate_to_the_handle(self):
        calls = []

        class Handle:
            def __getattr__(self, name):
                return lambda *a: calls.append((name, a)) or 7

        h = Handle()
        A.vision(h, b"p", 2, 4)
        self.assertEqual(A.prefill(h, [1, 2]), 7)
        self.assertEqual(A.decode(h, 3), 7)
        A.reset(h)
        A.close(h)
        self.assertEqual([c[0] for c in calls], ["vision", "prefill", "decode", "reset", "close"])


if __name__ == "__main__":
    unittest.main()
