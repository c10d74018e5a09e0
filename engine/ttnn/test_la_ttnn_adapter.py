"""Tests of the TT-NN adapter's parts that need no chip: settings and knobs, the file
checks, the warm-up prompt, the protocol surface, and a clear error from open() where
ttnn is missing. Run: cd engine/ttnn && /usr/bin/python3 -m unittest -v
(engine/native's Go tests run them too)."""

import os
import tempfile
import unittest
from unittest import mock

import la_ttnn_adapter as A

CONFIG = {"weights_dir": "/snap", "max_seq_len": 4096, "image_token_id": 151665, "vocab": 152681,
          "hidden": 2048, "merge_kernel": 2, "llm_dir": ""}


class SettingsTest(unittest.TestCase):
    def test_defaults_are_the_validated_recipe(self):
        s = A.Settings.from_config(CONFIG, {"TT_DIT_CACHE_DIR": "/cache/weights"})
        self.assertEqual(s.llm_dir, "/cache/weights/la-qwen2_5-3b")
        self.assertEqual(s.grid, (24, 44))
        self.assertEqual(s.image_tokens(), 264)
        self.assertEqual((s.precision, s.trace, s.trace_region_size), ("accuracy", True, 50_000_000))
        self.assertEqual((s.warmup_runs, s.warmup_decode_steps), (2, 4))
        self.assertEqual((s.mesh_shape, s.device_ids), ((1, 1), ()))

    def test_llm_dir_precedence(self):
        env = {"TT_DIT_CACHE_DIR": "/cache", "LA_LLM_DIR": "/llm"}
        self.assertEqual(A.Settings.from_config(CONFIG, env).llm_dir, "/llm")
        self.assertEqual(A.Settings.from_config(dict(CONFIG, llm_dir="/given"), env).llm_dir, "/given")
        with self.assertRaisesRegex(ValueError, "LA_LLM_DIR or TT_DIT_CACHE_DIR"):
            A.Settings.from_config(CONFIG, {})

    def test_knobs(self):
        env = {"LA_LLM_DIR": "/llm", "LA_CANON_GRID": "(16, 28)", "LA_PREC": "bfp8attn", "LA_TRACE": "0",
               "LA_TRACE_REGION_SIZE": "160000000", "LA_WARMUP_RUNS": "1", "TT_MESH_SHAPE": "1,1", "TT_DEVICE_ID": "3"}
        s = A.Settings.from_config(CONFIG, env)
        self.assertEqual((s.grid, s.precision, s.trace, s.trace_region_size, s.warmup_runs, s.device_ids),
                         ((16, 28), "bfp8attn", False, 160_000_000, 1, (3,)))

    def test_bad_knobs_say_which(self):
        cases = {
            "LA_PREC": ("fast", "LA_PREC"),
            "LA_TRACE": ("maybe", "LA_TRACE"),
            "LA_CANON_GRID": ("25x44", "multiples of the merge kernel"),
            "TT_MESH_SHAPE": ("one", "TT_MESH_SHAPE"),
            "LA_WARMUP_RUNS": ("0", "LA_WARMUP_RUNS"),
            "TT_DEVICE_ID": ("a", "TT_DEVICE_ID"),
        }
        for name, (value, want) in cases.items():
            with self.subTest(name=name), self.assertRaisesRegex(ValueError, want):
                A.Settings.from_config(CONFIG, {"LA_LLM_DIR": "/llm", name: value})
        with self.assertRaisesRegex(ValueError, "paged KV"):
            A.Settings.from_config(dict(CONFIG, max_seq_len=40000), {"LA_LLM_DIR": "/llm"})
        with self.assertRaisesRegex(ValueError, "config lacks 'vocab'"):
            A.Settings.from_config({k: v for k, v in CONFIG.items() if k != "vocab"}, {"LA_LLM_DIR": "/llm"})

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

    def settings(self, **env):
        return A.Settings.from_config(dict(CONFIG, weights_dir=self.snap, llm_dir=self.llm), env)

    def test_missing_extraction_says_what_to_do(self):
        with self.assertRaisesRegex(FileNotFoundError, "first-boot extraction"):
            self.settings().check_files()

    def test_more_than_one_chip_is_refused(self):
        for f in ("model.safetensors", "config.json"):
            open(os.path.join(self.llm, f), "w").close()
        self.settings().check_files()
        with self.assertRaisesRegex(ValueError, "one chip"):
            self.settings(TT_MESH_SHAPE="1x2").check_files()

    def test_open_without_ttnn_is_a_clear_error(self):
        for f in ("model.safetensors", "config.json"):
            open(os.path.join(self.llm, f), "w").close()
        with mock.patch.dict(os.environ, {"LA_CANON_GRID": "24x44"}), \
                self.assertRaisesRegex(RuntimeError, "TT-NN stack is not importable"):
            A.open(dict(CONFIG, weights_dir=self.snap, llm_dir=self.llm))


class SiteDirsTest(unittest.TestCase):
    def test_site_dirs_process_pth_files(self):
        with tempfile.TemporaryDirectory() as site_dir, tempfile.TemporaryDirectory() as extra:
            with open(os.path.join(extra, "la_site_probe.py"), "w") as f:
                f.write("VALUE = 42\n")
            with open(os.path.join(site_dir, "probe.pth"), "w") as f:
                f.write(extra + "\n")
            saved = list(A.sys.path)
            try:
                self.assertEqual(A.add_site_dirs({"LA_PYTHON_SITE": site_dir}), [site_dir])
                import la_site_probe
                self.assertEqual(la_site_probe.VALUE, 42)
            finally:
                A.sys.path[:] = saved
                A.sys.modules.pop("la_site_probe", None)
        with self.assertRaisesRegex(FileNotFoundError, "LA_PYTHON_SITE"):
            A.add_site_dirs({"LA_PYTHON_SITE": "/no/such/site"})


class ProtocolTest(unittest.TestCase):
    def test_surface(self):
        for name in ("open", "vision", "prefill", "decode", "reset", "close", "logits"):
            self.assertTrue(callable(getattr(A, name)), name)

    def test_warmup_prompt_is_shaped_like_a_request(self):
        s = A.Settings.from_config(CONFIG, {"LA_LLM_DIR": "/llm"})
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
