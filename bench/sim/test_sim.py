#!/usr/bin/env python3
"""test_sim.py — bench/sim/sim.py against rounds known in closed form:
one trainer and one server (2 x latency + bytes / bandwidth + costs), k
trainers serialised on one server link, max-min sharing, processor
sharing of a host's cores, the shard cut and round-robin placement, a
class of k trainers against k classes of one, and SSP's pace."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sim  # noqa: E402

MB = 1 << 20
ZERO = sim.Costs(srv_msg=0, srv_byte=0, srv_apply=0, cli_msg=0,
                 cli_byte=0, lat=0)


def one(trainers, **kw):
    kw.setdefault("overhead", 0)
    return sim.Job_(trainers=trainers, **kw)


class ClosedForm(unittest.TestCase):
    def test_one_trainer_one_server(self):
        b, bw, lat = MB, 1e9, 1e-3
        c = sim.Costs(srv_msg=3e-5, srv_byte=1e-9, srv_apply=2e-9,
                      cli_msg=4e-5, cli_byte=0.5e-9, lat=0)
        r = sim.simulate(one([sim.TrainerClass(1, 0, bw, lat)],
                             servers=1, bytes=b), c)
        costs = (c.cli_msg + c.cli_byte * b + c.srv_msg + c.srv_byte * b
                 + c.srv_apply * b + c.srv_byte * b + c.cli_byte * b)
        want = 2 * lat + 2 * b / bw + costs
        self.assertAlmostEqual(r["round_s"], want, delta=want * 1e-9)

    def test_compute_adds(self):
        r = sim.simulate(one([sim.TrainerClass(1, 0.25, 1e9, 1e-3)],
                             servers=1, bytes=MB), ZERO)
        self.assertAlmostEqual(r["round_s"], 0.25 + 2e-3 + 2 * MB / 1e9)

    def test_k_trainers_serialise_on_server_link(self):
        b, bw, lat = 4 * MB, 1e9, 1e-3
        for k in (2, 5, 16):
            for mode in ("sync", "async"):
                job = one([sim.TrainerClass(k, 0, float("inf"), lat)],
                          servers=1, bytes=b, server_nic_bps=bw,
                          mode=mode)
                r = sim.simulate(job, ZERO)
                want = 2 * lat + 2 * k * b / bw
                self.assertAlmostEqual(r["round_s"], want,
                                       delta=want * 1e-9, msg=(k, mode))

    def test_class_of_k_equals_k_classes(self):
        c = sim.Costs()
        grouped = sim.simulate(one([sim.TrainerClass(6, 0.01, 1e9, 1e-4)],
                                   servers=3, bytes=5 * MB,
                                   server_nic_bps=2e9), c)
        split = sim.simulate(one([sim.TrainerClass(1, 0.01, 1e9, 1e-4)
                                  for _ in range(6)], servers=3,
                                 bytes=5 * MB, server_nic_bps=2e9), c)
        self.assertAlmostEqual(grouped["round_s"], split["round_s"],
                               delta=grouped["round_s"] * 1e-9)

    def test_slow_trainer_paces_sync(self):
        fast = sim.TrainerClass(9, 0, 1.25e9, 0)
        slow = sim.TrainerClass(1, 0, 12.5e6, 0)
        r = sim.simulate(one([fast, slow], servers=2, bytes=2 * MB), ZERO)
        # the slow NIC carries its 2 shards up, then both back
        self.assertAlmostEqual(r["round_s"], 2 * 2 * MB / 12.5e6,
                               delta=1e-6)


class Engine(unittest.TestCase):
    def test_max_min_with_cap(self):
        eng = sim.Engine()
        link = sim.Resource("link", 10.0)
        ends = {}
        eng.start(10, [(link, 1)], 2.0, lambda: ends.setdefault("a", eng.now))
        eng.start(40, [(link, 1)], 100.0,
                  lambda: ends.setdefault("b", eng.now))
        eng.run(lambda: len(ends) == 2)
        # a at its cap 2, b takes the other 8: both end at 5 s
        self.assertAlmostEqual(ends["a"], 5.0)
        self.assertAlmostEqual(ends["b"], 5.0)

    def test_processor_sharing_of_host(self):
        # 4 async trainers on 2 cores, no latency: the cores are never
        # idle, so a step costs 4 x (client + server work) / 2.
        c = sim.Costs(srv_msg=0, srv_byte=1e-4 / MB, srv_apply=0,
                      cli_msg=0, cli_byte=1e-4 / MB, lat=0)
        r = sim.simulate(one([sim.TrainerClass(4)], servers=1, bytes=MB,
                             host_cores=2, mode="async", lock=False), c)
        self.assertAlmostEqual(r["round_s"], 4 * 4e-4 / 2, delta=1e-9)
        self.assertAlmostEqual(r["util"]["host cpu"], 1.0, delta=1e-6)

    def test_one_core_each_without_host(self):
        c = sim.Costs(srv_msg=0, srv_byte=1e-4 / MB, srv_apply=0,
                      cli_msg=0, cli_byte=1e-4 / MB, lat=0)
        r = sim.simulate(one([sim.TrainerClass(4)], servers=1, bytes=MB,
                             server_cores=4, mode="async", lock=False), c)
        self.assertAlmostEqual(r["round_s"], 4e-4, delta=1e-9)

    def test_server_mu_serialises(self):
        # the same job holding the server's mu for its LOCK_PUSH_ASYNC
        # share: four holds a step once that exceeds a rank's own chain
        c = sim.Costs(srv_msg=0, srv_byte=2e-4 / MB, srv_apply=0,
                      cli_msg=0, cli_byte=0.5e-4 / MB, lat=0)
        r = sim.Model(one([sim.TrainerClass(4)], servers=1, bytes=MB,
                          server_cores=4, mode="async"), c).run(8, 8)
        held = sim.LOCK_PUSH_ASYNC * 2e-4 + sim.LOCK_REPLY * 2e-4
        self.assertAlmostEqual(r["round_s"], 4 * held, delta=1e-9)
        # sync: the closing thread answers the ranks in turn, so the
        # first answered builds its next push while mu serves the rest
        c = sim.Costs(srv_msg=0, srv_byte=1e-10, srv_apply=0, cli_msg=0,
                      cli_byte=1e-10, lat=0)
        r = sim.simulate(one([sim.TrainerClass(4)], servers=1, bytes=MB,
                             server_cores=4, mode="sync"), c)
        b = 1e-10 * MB
        # build b and the unlocked 3/4 of the decode (in parallel); the
        # closing thread's 4 x b/4 sum and 4 reply copies of b/2 in
        # turn; the last send (b/2) and take-apart (b)
        lp, lr = sim.LOCK_PUSH_SYNC, sim.LOCK_REPLY
        want = b + (1 - lp) * b + 4 * lp * b + 4 * lr * b + \
            (1 - lr) * b + b
        self.assertAlmostEqual(r["round_s"], want, delta=1e-9)


class Placement(unittest.TestCase):
    def test_cut(self):
        job = one([sim.TrainerClass(1)], servers=2, bytes=3 * MB + MB // 2)
        sizes = sim.cut(job)
        self.assertEqual(len(sizes), 4)
        self.assertEqual(sum(sizes), 3 * MB + MB // 2)
        self.assertLessEqual(max(sizes) - min(sizes), 4)

    def test_round_robin_leaves_servers_idle(self):
        job = one([sim.TrainerClass(1)], servers=4, bytes=MB)
        self.assertEqual(sim.server_classes(job), [(1, [MB])])
        job = one([sim.TrainerClass(1)], servers=2, bytes=5 * MB)
        self.assertEqual(sorted(n for n, _ in sim.server_classes(job)),
                         [1, 1])

    def test_requests_follow_the_window(self):
        # 16 MiB on one server: requests of 1 MiB (PIPE_MAX_BYTES), 8 in
        # flight for 2 trainers, 2 for 64 (128/64), 1 for 1000
        self.addCleanup(setattr, sim, "PIPE_MAX_BYTES", sim.PIPE_MAX_BYTES)
        sim.PIPE_MAX_BYTES = MB
        for t, w in ((2, 8), (64, 2), (1000, 1)):
            job = one([sim.TrainerClass(t)], servers=1, bytes=16 * MB)
            (cnt, reqs), = sim.server_classes(job)
            self.assertEqual(len(reqs), 16, msg=t)
            self.assertEqual(sim.window(job), w, msg=t)

    def test_window_of_one_waits_for_each_reply(self):
        # 4 requests, one in flight: 4 round trips, the bytes once
        self.addCleanup(setattr, sim, "PIPE_MAX_BYTES", sim.PIPE_MAX_BYTES)
        sim.PIPE_MAX_BYTES = MB
        b, bw, lat = 4 * MB, 1e9, 1e-3
        job = one([sim.TrainerClass(200, 0, float("inf"), lat)],
                  servers=1, bytes=b, server_nic_bps=bw)
        self.assertEqual(sim.window(job), 1)
        r = sim.simulate(job, ZERO)
        want = 4 * 2 * lat + 2 * 200 * b / bw
        self.assertAlmostEqual(r["round_s"], want, delta=want * 1e-9)


class Wakeups(unittest.TestCase):
    def test_paid_only_when_idle(self):
        # one trainer: every request finds the server idle and every
        # reply a waiting client, so both wake-ups are in each step
        c = sim.Costs(srv_msg=1e-3, srv_byte=0, srv_apply=0, cli_msg=2e-3,
                      cli_byte=0, lat=0)
        r = sim.simulate(one([sim.TrainerClass(1)], servers=1, bytes=MB,
                             server_cores=1, mode="async"), c)
        self.assertAlmostEqual(r["round_s"], 3e-3, delta=1e-9)
        self.assertAlmostEqual(r["srv_cpu_per_pp"], 1e-3, delta=1e-9)
        # eight trainers on one server core: the requests queue behind
        # each other, so most find it busy and pay no wake-up
        r = sim.simulate(one([sim.TrainerClass(8)], servers=1, bytes=MB,
                             server_cores=1, mode="async"), c)
        self.assertLess(r["srv_cpu_per_pp"], 0.5e-3)


class Parked(unittest.TestCase):
    def test_sync_pays_for_each_parked_call(self):
        # k ranks of one sync round: the closing push answers itself, the
        # k - 1 parked calls are answered by its thread, under mu, one
        # after another; async parks nothing (a latency keeps a step
        # from taking no time, which the engine cannot end)
        c = sim.Costs(srv_msg=0, srv_park=1e-3, srv_byte=0, srv_apply=0,
                      cli_msg=0, cli_byte=0, lat=1e-4)
        for k in (1, 2, 5):
            for mode, park in (("sync", (k - 1) * 1e-3), ("async", 0.0)):
                r = sim.simulate(one([sim.TrainerClass(k)], servers=1,
                                     bytes=MB, mode=mode), c)
                self.assertAlmostEqual(r["round_s"], 2e-4 + park,
                                       delta=1e-9, msg=(k, mode))
                self.assertAlmostEqual(r["srv_cpu_per_pp"], park / k,
                                       delta=1e-9, msg=(k, mode))

    def test_class_of_k_parks_k_minus_one(self):
        # the members of one class are parked but for the closing one,
        # whatever the split into sub-classes
        c = sim.Costs(srv_msg=0, srv_park=1e-3, srv_byte=0, srv_apply=0,
                      cli_msg=0, cli_byte=0, lat=0)
        for parts in (1, 3, 8):
            r = sim.simulate(one([sim.TrainerClass(8)], servers=1,
                                 bytes=MB, split=parts), c)
            self.assertAlmostEqual(r["srv_cpu_per_pp"], 7e-3 / 8,
                                   delta=1e-9, msg=parts)


class Background(unittest.TestCase):
    def test_other_threads_take_their_share(self):
        # one job on 2 cores beside w threads of other work: it gets
        # min(1, 2 / (1 + w)) of a core
        for w, want in ((0.0, 1.0), (0.5, 1.0), (1.0, 1.0), (3.0, 2.0),
                        (7.0, 4.0)):
            eng = sim.Engine()
            cpu = sim.Resource("cpu", 2.0)
            eng.background(cpu, w)
            end = []
            eng.start(1.0, [(cpu, 1)], 1.0, lambda: end.append(eng.now))
            eng.run(lambda: end)
            self.assertAlmostEqual(end[0], want, delta=1e-9, msg=w)

    def test_share_grows_with_the_sweeps_threads(self):
        # 4 async trainers beside 4 other threads on 2 cores: the sweep
        # gets 2 x 4 / 8 of a core, half of test_processor_sharing's
        c = sim.Costs(srv_msg=0, srv_byte=1e-4 / MB, srv_apply=0,
                      cli_msg=0, cli_byte=1e-4 / MB, lat=0)
        r = sim.simulate(one([sim.TrainerClass(4)], servers=1, bytes=MB,
                             host_cores=2, host_bg=4, mode="async",
                             lock=False), c)
        self.assertAlmostEqual(r["round_s"], 4 * 4e-4, delta=1e-9)


class PerRequest(unittest.TestCase):
    def test_paid_by_every_request(self):
        # a 16-shard model on S servers: one request per server per step
        # (each server's shards fit one request), each costing srv_req
        # on its server and cli_req on the client, busy or not
        c = sim.Costs(srv_msg=0, srv_req=1e-3, srv_byte=0, srv_apply=0,
                      cli_msg=0, cli_req=2e-3, cli_byte=0, lat=0)
        for servers in (1, 2, 4, 8):
            for k, mode in ((1, "sync"), (8, "async"), (8, "sync")):
                job = one([sim.TrainerClass(k)], servers=servers,
                          bytes=MB, shard_bytes=MB // 16,
                          server_cores=1, mode=mode)
                r = sim.simulate(job, c)
                # (eight trainers: the window's edges, a few %)
                self.assertAlmostEqual(r["srv_cpu_per_pp"],
                                       1e-3 * servers,
                                       delta=1e-9 + 0.05e-3 * servers,
                                       msg=(servers, k, mode))
                if k == 1:  # serial: the client's, then the servers'
                    want = 2e-3 * servers + 1e-3
                    self.assertAlmostEqual(r["round_s"], want,
                                           delta=1e-9, msg=servers)


class Constants(unittest.TestCase):
    def test_read_from_the_client(self):
        for name in ("PIPE_MIN_BYTES", "PIPE_MAX_BYTES", "PIPE_SLOTS",
                     "PIPE_CTX_BUDGET", "CONTEXTS_GROW", "SYNC_SLOT_COPY"):
            self.addCleanup(setattr, sim, name, getattr(sim, name))
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "..", "..")
        got = sim.read_constants(root)
        self.assertEqual(got.get("FERRY_PIPE_SLOTS"), sim.PIPE_SLOTS)
        self.assertEqual(sim.PIPE_MAX_BYTES, got.get("PIPE_MAX_BYTES", 0))


class Staleness(unittest.TestCase):
    def test_ssp_fast_runs_ahead_then_at_slow_pace(self):
        fast = sim.TrainerClass(1, 0.01, 1e12, 0)
        slow = sim.TrainerClass(1, 0.05, 1e12, 0)
        job = one([fast, slow], servers=1, bytes=MB, mode="ssp",
                  staleness=2)
        r = sim.Model(job, ZERO).run(steps=10, warmup=10)
        self.assertAlmostEqual(r["round_s_by_class"][0], 0.05, delta=1e-5)
        asy = one([fast, slow], servers=1, bytes=MB, mode="async")
        r = sim.Model(asy, ZERO).run(steps=10, warmup=10)
        self.assertAlmostEqual(r["round_s_by_class"][0], 0.01, delta=1e-5)

    def test_ssp_runs_k_steps_ahead(self):
        # a pull is answered once every clock reaches the caller's - K:
        # when the slow trainer ends a step, the fast one has ended
        # exactly K more (K = 0: sync's pace)
        for k in range(4):
            fast = sim.TrainerClass(1, 0.01, 1e12, 0)
            slow = sim.TrainerClass(1, 0.05, 1e12, 0)
            m = sim.Model(one([fast, slow], servers=1, bytes=MB,
                              mode="ssp", staleness=k), ZERO)
            m.run(steps=5, warmup=2)
            self.assertEqual(m.step[0] - m.step[1], k, msg=k)

    def test_local_steps_amortise(self):
        job = one([sim.TrainerClass(1, 0.01, 1e9, 1e-3)], servers=1,
                  bytes=MB, mode="local", local_steps=32)
        r = sim.simulate(job, ZERO)
        self.assertAlmostEqual(r["round_s"], 0.32 + 2e-3 + 2 * MB / 1e9)


if __name__ == "__main__":
    unittest.main()
