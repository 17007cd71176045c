"""Tests of userloop's host work, calibration and preparer thread, which
need NumPy and not torch or a GPU (experiments/apps/suite's
TestUserLoopHostWork runs them: python3 -m unittest test_userloop)."""
import contextlib
import io
import json
import os
import sys
import threading
import unittest

import numpy as np

import userloop


class TextTest(unittest.TestCase):
    def test_tokenise(self):
        vocab = {"alpha": 3, "beta": 5}
        x = userloop.tokenise(["Alpha, beta beta! zzz", "beta"], vocab, 16)
        self.assertEqual(x.shape, (2, 16))
        self.assertEqual(x.dtype, np.float32)
        # Counts 1 and 2 at ids 3 and 5 (punctuation and case gone): 5 ranks above 3.
        self.assertGreater(x[0, 5], x[0, 3])
        self.assertGreater(x[0, 3], x[0, 0])
        np.testing.assert_allclose(x.mean(axis=1), 0, atol=1e-5)
        # An unknown word hashes the same in every process (crc32, not hash()).
        self.assertTrue(np.array_equal(x, userloop.tokenise(["Alpha, beta beta! zzz", "beta"], vocab, 16)))

    def test_decode(self):
        probs = np.array([[0.1, 0.5, 0.2, 0.05, 0.15], [0.6, 0.1, 0.1, 0.1, 0.1]], np.float32)
        out = json.loads(userloop.decode(probs, ["a", "b", "c", "d", "e"], k=3))
        self.assertEqual(out[0], {"request": 0, "labels": ["b", "c", "e"], "scores": [0.5, 0.2, 0.15]})
        # The second row's runners-up tie: only its best is fixed.
        self.assertEqual((out[1]["labels"][0], out[1]["scores"]), ("a", [0.6, 0.1, 0.1]))

    def test_pipeline(self):
        labels = ["l%d" % i for i in range(32)]
        t = userloop.TextPipeline(40, 8, 64, labels)
        self.assertTrue(all(len(s.split()) == 40 for s in t.texts))
        a, b = t.pre(), t.pre()
        self.assertEqual(a.shape, (8, 64))
        self.assertFalse(np.array_equal(a, b), "the requests rotate")
        self.assertEqual(len(json.loads(t.post(np.random.default_rng(0).random((8, 32))))), 8)


class AugmentTest(unittest.TestCase):
    def test_prepare(self):
        aug = userloop.Augment(10, 4)
        idx = aug.sample()
        self.assertEqual(idx.tolist(), [0, 1, 2, 3])
        self.assertEqual(aug.sample().tolist(), [4, 5, 6, 7])
        x, y = aug.prepare(idx)
        self.assertEqual((x.shape, x.dtype, y.dtype), ((4, 256), np.float32, np.int64))
        self.assertTrue(x.flags["C_CONTIGUOUS"])
        self.assertEqual(y.tolist(), aug.labels[:4].tolist())
        self.assertAlmostEqual(float(x.mean()), 0, places=4)

    def test_ops_spread(self):
        # 10 ops over 4 samples: 3, 3, 2, 2.
        calls = []
        ops = userloop.OPS
        try:
            userloop.OPS = [lambda a, rng: calls.append(1) or a]
            aug = userloop.Augment(10, 4)
            aug.prepare(aug.sample())
        finally:
            userloop.OPS = ops
        self.assertEqual(len(calls), 10)

    def test_each_op_keeps_the_shape(self):
        rng = np.random.default_rng(0)
        a = rng.random((32, 32), dtype=np.float32) * 255
        for op in userloop.OPS:
            b = op(a, rng)
            self.assertEqual((b.shape, b.dtype), ((32, 32), np.float32), op.__name__)


class CalibrateTest(unittest.TestCase):
    def cost(self, fixed, per):
        # make(units) -> a callable returning what it "took": measure calls it.
        return lambda units: lambda: fixed + per * units

    def test_converges(self):
        # share 0.5 of a 100 µs device part: 100 µs of host work, 10 + 3/unit.
        u = userloop.calibrate(self.cost(10e-6, 3e-6), 100e-6, 0.5, measure=lambda run: run())
        self.assertEqual(u, 30)
        u = userloop.calibrate(self.cost(0, 1e-6), 300e-6, 0.6, measure=lambda run: run())
        self.assertEqual(u, 450)

    def test_fixed_part_over_target(self):
        u = userloop.calibrate(self.cost(200e-6, 1e-6), 100e-6, 0.5, measure=lambda run: run())
        self.assertEqual(u, 1)


class PreparerTest(unittest.TestCase):
    def test_in_order_and_ahead(self):
        n = iter(range(100))
        prep = userloop.Preparer(lambda req: (threading.current_thread().name, req * 10), lambda: next(n), depth=2)
        got = [prep.get() for _ in range(5)]
        prep.stop()
        self.assertEqual([g[1] for g in got], [0, 10, 20, 30, 40])
        self.assertTrue(all(g[0] == "preparer" for g in got), "prepared in the side thread")
        # Requests handed over: 2 at the start, one per get.
        self.assertEqual(next(n), 7)

    def test_error_reaches_the_caller(self):
        def prepare(req):
            if req == 1:
                raise ValueError("bad batch")
            return req
        n = iter(range(10))
        prep = userloop.Preparer(prepare, lambda: next(n))
        self.assertEqual(prep.get(), 0)
        with self.assertRaisesRegex(RuntimeError, "bad batch"):
            prep.get()


class SettingsTest(unittest.TestCase):
    def test_defaults_and_bounds(self):
        self.assertEqual(userloop.host_settings(0.3, 5), (0.3, 5))
        for share, units in [(0, 0), (0.95, 0), (0.5, -1), ("x", 0)]:
            with self.assertRaises(SystemExit) as e:
                userloop.host_settings(share, units)
            self.assertEqual(e.exception.code, 2)

    def test_environment(self):
        # inproc.py calls build() without arguments: the environment sets them.
        old = dict(os.environ)
        try:
            os.environ.update(APPS_HOST_SHARE="0.3", APPS_HOST_UNITS="12")
            self.assertEqual(userloop.host_settings(), (0.3, 12))
            self.assertEqual(userloop.host_settings(0.5, None), (0.5, 12))
            del os.environ["APPS_HOST_SHARE"], os.environ["APPS_HOST_UNITS"]
            self.assertEqual(userloop.host_settings(), (userloop.DEFAULT_SHARE, 0))
        finally:
            os.environ.clear()
            os.environ.update(old)


class MainTest(unittest.TestCase):
    def test_standalone_line(self):
        # A program's standalone run: the flags reach setup, warm-up steps
        # are left out of the line, and report()'s float keys are
        # differences over the timed loop.
        state = {"steps": 0, "host": 0.0}
        got = {}

        def setup(batch, share, units):
            got.update(batch=batch, share=share, units=units)

            def step():
                state["steps"] += 1
                state["host"] += 0.5
            return step, lambda: {"host_units": units, "host_s": state["host"]}
        argv, out = sys.argv, io.StringIO()
        try:
            sys.argv = ["prog", "--steps", "3", "--host-units", "7"]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                userloop.main("prog", setup, batch=16, warmup=5)
        finally:
            sys.argv = argv
        self.assertEqual(got, {"batch": 16, "share": None, "units": 7})
        line = json.loads(out.getvalue())
        self.assertEqual((line["program"], line["steps"], line["host_units"], line["host_s"]), ("prog", 3, 7, 1.5))
        self.assertEqual(state["steps"], 8, "5 warm-up steps, then 3 timed")


if __name__ == "__main__":
    unittest.main()
