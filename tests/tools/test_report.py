"""bench/gpu/report.py's DDP/FSDP2 table: where gmlake's driver time fell, from each rank's
per-step figures (rank_gmlake_steps) and the time in its pool, on hand-made rows.  Run: python3 tests/tools/test_report.py"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import report  # noqa: E402


def row(allocator, gm_steps, step_times=(0.5, 0.2, 0.1, 0.1)):
    return {"mode": "ddp", "world_size": 2, "allocator": allocator, "warmup": 2, "steady": 2,
            "step_times": list(step_times), "first_s_per_step": 0.35, "losses": [1.0] * 4,
            "nvml": True, "nvml_peak_used_mib": [100.0, 101.0], "gmlake": None,
            "rank_gmlake_steps": gm_steps, "torch": "x"}


class StepsByLength(unittest.TestCase):
    def test_new_and_repeated_lengths_of_the_timed_steps(self):
        r = row("gmlake", None, step_times=(0.5, 0.2, 0.3, 0.1, 0.4, 0.05))
        r["steady"], r["seq_lengths"] = 4, [128, 256, 512, 128, 1024, 512]
        lines = report.steps_by_length([r], ["gmlake"])
        # timed: 512 (new) 0.3, 128 (seen in warm-up) 0.1, 1024 (new) 0.4, 512 (seen) 0.05
        self.assertIn("| gmlake | 0.2000 (0.2000-0.2000) | 0.700 (0.700-0.700) | 0.150 (0.150-0.150) |", lines)

    def test_nothing_without_lengths(self):
        self.assertEqual(report.steps_by_length([row("gmlake", None)], ["gmlake"]), [])


class DriverByPhase(unittest.TestCase):
    def test_splits_warmup_and_timed_steps_by_the_larger_rank(self):
        r = row("gmlake", [[[0.10, 50, 2], [0.0, 0, 0], [0.02, 9, 1], [0.0, 0, 0]],
                           [[0.12, 50, 2], [0.01, 3, 0], [0.0, 0, 0], [0.0, 0, 0]]])
        line = report.driver_by_phase([r])
        self.assertIn("warm-up steps 0.130 s", line)   # rank 1: 0.12 + 0.01
        self.assertIn("timed steps 0.020 s", line)     # rank 0: 0.02
        self.assertIn("device calls: 0, 1, 2 of 0..3", line)

    def test_median_over_runs_and_none_without_figures(self):
        a = row("gmlake", [[[0.1, 1, 0], [0.0, 0, 0], [0.3, 1, 0], [0.0, 0, 0]]])
        b = row("gmlake", [[[0.2, 1, 0], [0.0, 0, 0], [0.1, 1, 0], [0.0, 0, 0]]])
        c = row("gmlake", [[[0.3, 1, 0], [0.0, 0, 0], [0.2, 1, 0], [0.0, 0, 0]]])
        self.assertIn("timed steps 0.200 s a run (the larger rank; median of 3)",
                      report.driver_by_phase([a, b, c]))
        self.assertIsNone(report.driver_by_phase([row("expandable", None)]))
        self.assertIsNone(report.driver_by_phase([row("gmlake", [None, None])]),
                          "gmlake loaded, no pool on any rank: nothing to say, no error")
        self.assertIn("timed steps 0.200 s a run (the larger rank; median of 3)",
                      report.driver_by_phase([a, b, row("gmlake", [None, None]), c]),
                      "a run without a pool on any rank: not counted among the runs of the median")

    def test_the_pools_host_time_by_phase_when_every_step_has_it(self):
        r = row("gmlake", [[[0.10, 50, 2, 0.15], [0.0, 0, 0, 0.01], [0.0, 0, 0, 0.004], [0.0, 0, 0, 0.003]],
                           [[0.12, 50, 2, 0.13], [0.0, 0, 0, 0.01], [0.0, 0, 0, 0.002], [0.0, 0, 0, 0.009]]])
        line = report.driver_by_phase([r])
        self.assertIn("allocations and frees (the device calls made in them included) 0.160 s in the "
                      "warm-up steps, 0.011 s in the timed steps (median of the 1 runs", line)  # larger rank
        old = row("gmlake", [[[0.1, 1, 0], [0.0, 0, 0], [0.3, 1, 0], [0.0, 0, 0]]])
        self.assertNotIn("allocations and frees", report.driver_by_phase([old]),
                         "rows recorded before the host time: nothing said of it")
        older_lib = row("gmlake", [[[0.1, 1, 0, None], [0.0, 0, 0, None], [0.3, 1, 0, None], [0.0, 0, 0, None]]])
        self.assertNotIn("allocations and frees", report.driver_by_phase([older_lib]),
                         "a library without the host time (gmlake@DIR of an older build): not 0.000 s")
        self.assertIn("(median of the 1 runs that give it)", report.driver_by_phase([r, older_lib, old]))

    def test_the_table_says_it_for_gmlake_only(self):
        g = row("gmlake", [[[0.1, 5, 1], [0.0, 0, 0], [0.0, 0, 0], [0.0, 0, 0]]])
        e = row("expandable", None)
        text = "\n".join(report.distributed([g, e]))
        self.assertIn("gmlake: driver time in the warm-up steps 0.100 s", text)
        self.assertNotIn("expandable: driver time", text)



class OwnTime(unittest.TestCase):
    def test_the_pools_time_as_a_share_of_the_timed_steps(self):
        def run(a, pool, drv, times=(0.9, 0.9, 0.2, 0.2)):
            r = {"workload": "gpt2", "allocator": a, "warmup": 2, "step_times": list(times),
                 "first17_s_per_step": 0.5, "steady_s_per_step": 0.2, "torch_peak_allocated": 0,
                 "nvml": False}
            if pool is not None:
                r.update(gmlake_pool_s_after_warmup=pool, gmlake_driver_s_after_warmup=drv)
            return r
        # timed steps 0.4 s: 4 ms is 1%, 8 ms 2%, 12 ms 3%; the warm-up steps never count
        rows = [run("gmlake", 0.004, 0.0), run("gmlake", 0.008, 0.002), run("gmlake", 0.012, 0.004),
                run("expandable", None, None), run("gmlake", None, None)]
        lines = report.own_time(rows)
        self.assertEqual(len(lines), 1, "gmlake only, and only its runs that give it")
        self.assertIn("gmlake: its own time in the timed steps", lines[0])
        self.assertIn("2.00 (1.00-3.00)% of those steps' wall time, of which driver calls "
                      "0.50 (0.00-1.00)% (median (range) of 3 runs)", lines[0])
        self.assertIn(lines[0], "\n".join(report.training(rows, {})))
        old = run("gmlake", 0.004, 0.0)
        del old["warmup"]
        self.assertEqual(report.own_time([old]), [], "rows from before train.py wrote its warm-up")


class PairedRounds(unittest.TestCase):
    def test_ratio_to_the_reference_within_each_round(self):
        rows = []
        # round 0: expandable 0.1, gmlake 0.11; round 1 (drift: everything slower): 0.2 and 0.19
        for order, a, t in [(0, "expandable", 0.1), (1, "gmlake", 0.11), (2, "gmlake", 0.19), (3, "expandable", 0.2)]:
            r = row(a, None, step_times=(0.5, 0.5, t, t))
            r["order"] = order
            rows.append(r)
        lines = report.paired_rounds(rows, ["expandable", "gmlake"], "expandable")
        self.assertEqual(len(lines), 1)
        self.assertIn("1.025 (0.950-1.100), 2 rounds (1.100, 0.950)", lines[0])
        self.assertIn("the faster in 1 of 2", lines[0])

    def test_train_rows_pair_each_metric_by_round(self):
        # run_all.sh rows: two allocators, two rounds, the metrics train.py writes
        rows = []
        for order, a, f17, st in [(0, "expandable", 0.2, 0.1), (1, "gmlake", 0.22, 0.1),
                                  (2, "gmlake", 0.3, 0.19), (3, "expandable", 0.3, 0.2)]:
            rows.append({"workload": "gpt2", "allocator": a, "order": order, "first17_s_per_step": f17,
                         "steady_s_per_step": st, "torch_peak_allocated": 0, "nvml": False})
        text = "\n".join(report.training(rows, {}))
        self.assertIn("gmlake: first 17 steps over expandable's in the same round 1.050 (1.000-1.100)", text)
        self.assertIn("gmlake: step after warm-up over expandable's in the same round 0.975 (0.950-1.000)", text)

    def test_runs_of_several_folders_pair_within_their_own_folder(self):
        # two invocations (report.py A B), each numbering its runs from 0: a round of one folder
        # never pairs with the same round number of the other
        rows = []
        for batch, pairs in enumerate([[(0, "expandable", 0.1), (1, "gmlake", 0.11)],
                                       [(0, "gmlake", 0.19), (1, "expandable", 0.2)]]):
            for order, a, t in pairs:
                rows.append(dict(row(a, None, step_times=(0.5, 0.5, t, t)), order=order, batch=batch))
        lines = report.paired_rounds(rows, ["expandable", "gmlake"], "expandable")
        self.assertEqual(len(lines), 1)
        self.assertIn("1.025 (0.950-1.100), 2 rounds (1.100, 0.950)", lines[0])

    def test_the_command_reads_several_folders(self):
        import subprocess, tempfile
        script = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu", "report.py")
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            for d, runs in [(a, [(0, "expandable", 0.2, 0.1), (1, "gmlake", 0.22, 0.1)]),
                            (b, [(0, "gmlake", 0.3, 0.19), (1, "expandable", 0.3, 0.2)])]:
                with open(os.path.join(d, "train.jsonl"), "w") as f:
                    for order, al, f17, st in runs:
                        f.write(json.dumps({"workload": "gpt2", "allocator": al, "order": order,
                                            "first17_s_per_step": f17, "steady_s_per_step": st,
                                            "torch_peak_allocated": 0, "nvml": False}) + "\n")
            out = subprocess.run([sys.executable, script, a, b], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("gmlake: step after warm-up over expandable's in the same round 0.975 (0.950-1.000), 2 rounds",
                          out.stdout)
            bad = subprocess.run([sys.executable, script, a, os.path.join(b, "missing")],
                                 capture_output=True, text=True)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("missing", bad.stderr)

    def test_an_allocator_that_failed_every_run_keeps_its_place_in_the_rounds(self):
        # run_dist.sh, 3 allocators rotating over 5 rounds (order = round x 3 + position), gmlake
        # failing every run (error lines only): cudaMallocAsync 5% slower than expandable in each
        # round, everything slower round by round (drift)
        allocs, rows = ["expandable", "cudaMallocAsync", "gmlake"], []
        for rnd in range(5):
            for j in range(3):
                a = allocs[(j + rnd) % 3]
                if a == "gmlake":
                    rows.append({"mode": "ddp", "world_size": 2, "allocator": a, "error": "rc 1"})
                    continue
                t = 0.1 * (1 + rnd) * (1.05 if a == "cudaMallocAsync" else 1)
                rows.append(dict(row(a, None, step_times=(0.5, 0.5, t, t)), order=rnd * 3 + j))
        text = "\n".join(report.distributed(rows))
        self.assertIn("cudaMallocAsync: mean timed step over expandable's in the same round "
                      "1.050 (1.050-1.050), 5 rounds", text)
        # the same in run_all.sh's train.jsonl
        train = [{"workload": "gpt2", "allocator": r["allocator"], "error": r["error"]} if "error" in r
                 else {"workload": "gpt2", "allocator": r["allocator"], "order": r["order"],
                       "first17_s_per_step": r["step_times"][-1], "steady_s_per_step": r["step_times"][-1],
                       "torch_peak_allocated": 0, "nvml": False} for r in rows]
        self.assertIn("cudaMallocAsync: step after warm-up over expandable's in the same round "
                      "1.050 (1.050-1.050), 5 rounds", "\n".join(report.training(train, {})))

    def test_two_invocations_appended_to_one_folder_pair_within_each(self):
        # run_all.sh twice into one folder (its rows are appended, each invocation numbering its
        # runs from 0): the second on a host twice as fast, its last run cut by the budget.  gmlake
        # is 1.1 x expandable in every round; pairing across the invocations would say 0.55 once
        import subprocess, tempfile
        script = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu", "report.py")
        runs = [(0, "expandable", 0.1), (1, "gmlake", 0.11), (2, "gmlake", 0.11), (3, "expandable", 0.1),
                (0, "expandable", 0.05), (1, "gmlake", 0.055), (2, "gmlake", 0.055)]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "train.jsonl"), "w") as f:
                for order, al, t in runs:
                    f.write(json.dumps({"workload": "gpt2", "allocator": al, "order": order,
                                        "first17_s_per_step": t, "steady_s_per_step": t,
                                        "torch_peak_allocated": 0, "nvml": False}) + "\n")
                f.write(json.dumps({"workload": "gpt2", "allocator": "expandable",
                                    "error": "skipped: time budget"}) + "\n")
            out = subprocess.run([sys.executable, script, d], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("gmlake: step after warm-up over expandable's in the same round 1.100 "
                          "(1.100-1.100), 3 rounds", out.stdout)
            self.assertIn("holds the runs of 2 invocations", out.stdout)

    def test_nothing_with_one_round(self):
        rows = [dict(row(a, None), order=i) for i, a in enumerate(["expandable", "gmlake"])]
        self.assertEqual(report.paired_rounds(rows, ["expandable", "gmlake"], "expandable"), [])

if __name__ == "__main__":
    unittest.main()
