"""bench/gpu/timeline.py: busy time, idle gaps and compute/communication overlap of a kernel
timeline, on hand-made timelines whose answers are known.  Run: python3 test_timeline.py SRCDIR"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "bench", "gpu"))
import timeline  # noqa: E402


class Timeline(unittest.TestCase):
    def test_union_merges_overlapping_and_touching_intervals(self):
        self.assertEqual(timeline.union([(5, 7), (0, 2), (1, 3), (3, 4), (6, 6)]), [(0, 4), (5, 7)])

    def test_intersection_of_two_lists(self):
        self.assertEqual(timeline.intersect([(0, 10), (20, 30)], [(5, 25)]), 10)
        self.assertEqual(timeline.intersect([(0, 1)], [(1, 2)]), 0)

    def test_compute_beside_communication(self):
        ks = [("ampere_gemm", 0, 100), ("ncclDevKernel_AllReduce_Sum_f32", 50, 150),
              ("elementwise", 200, 230), ("ncclKernel_AllGather", 300, 310)]
        s = timeline.summarize(ks)
        self.assertEqual(s["window"], 310)
        self.assertEqual(s["kernels"], 4)
        self.assertEqual(s["busy"], 150 + 30 + 10)
        self.assertEqual(s["idle"], 310 - 190)
        self.assertEqual((s["gaps"], s["gap_time"]), (2, 50 + 70))
        self.assertEqual(s["compute"], 130)
        self.assertEqual(s["comm"], 110)
        self.assertEqual(s["overlap"], 50)
        self.assertEqual(s["comm_alone"], 60)

    def test_small_gaps_are_not_counted_but_are_idle(self):
        s = timeline.summarize([("a", 0, 10), ("b", 15, 20), ("c", 60, 70)], gap_us=20)
        self.assertEqual((s["gaps"], s["gap_time"], s["idle"]), (1, 40, 45))

    def test_window_clips_kernels(self):
        s = timeline.summarize([("a", 0, 100), ("nccl_x", 90, 200)], window=(50, 150))
        self.assertEqual((s["window"], s["busy"], s["compute"], s["comm"], s["overlap"]), (100, 100, 50, 60, 10))
        s = timeline.summarize([("a", 0, 10)], window=(20, 30))
        self.assertEqual((s["kernels"], s["busy"], s["idle"]), (0, 0, 10))

    def test_no_kernels(self):
        self.assertEqual(timeline.summarize([])["busy"], 0.0)

    def test_bad_input_is_refused_with_a_message(self):
        with self.assertRaisesRegex(ValueError, "ends .* before it starts"):
            timeline.summarize([("k", 10, 5)])
        with self.assertRaisesRegex(ValueError, "empty window"):
            timeline.summarize([("k", 0, 5)], window=(3, 3))

    def test_report_line(self):
        line = timeline.report(timeline.summarize([("g", 0, 1000), ("nccl", 500, 3000)]), "rank 0: ")
        self.assertEqual(line, "rank 0: window 3.0 ms, 2 kernels: busy 3.0, idle 0.0 (0 gaps > 20 us: "
                               "0.0), compute 1.0, communication 2.5 (beside compute 0.5, alone 2.0)")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
