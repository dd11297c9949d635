"""sim.py — a discrete-event model of Ferry's sync, SSP, async and
local-step rounds (issue 30), fed by costs measured on this machine.

The engine is a fluid discrete-event simulator: work (CPU seconds, bytes on
a link) flows through resources (a machine's cores, a NIC) shared by
max-min fairness (processor sharing with a per-job cap), and events are
the instants a job finishes or a timer (latency, compute) fires. Between
two events every rate is constant, so time jumps from one to the next.

What a step is (docs/algorithms.md §3.3 model B, clients/src/exchange.c):

  trainer: compute -> build each request (caller's thread) -> link
  (trainer NIC and server NIC, capped by the pair's bandwidth) -> latency
  -> server CPU (decode, accumulate) -> [sync: the round of the request's
  shards closes when every trainer's copy is in] -> apply (optimizer) ->
  encode the reply -> link back -> latency -> caller's thread takes the
  reply apart. The step ends when every reply is in.

Assumptions (and where this simplifies Ferry):

* Shards: every tensor is cut into ceil(len / (shard_bytes/4)) pieces of
  nearly equal length (sharding/src/split.c, shard_split), 1 MiB shards
  (--shard-bytes default); placement is round-robin over the servers
  (shard_place_live, the default --placement uniform), so a model with
  fewer shards than servers leaves servers idle. Not modelled: the
  link-aware cut (shard_link_bytes) and the latency solver of probed jobs.
* Requests: per server a client cuts its shards into requests of whole
  shards of at least clamp(server bytes / window, 1 MiB, PIPE_MAX_BYTES)
  fp32 bytes and keeps `window` = clamp(128 / trainers, 1, 8) of them in
  flight per server (exchange.c, ferry__req_bytes; fast links); a reply
  taken apart frees its slot for the next request (validate.py reads
  these constants from clients/src: read_constants). The first window is
  built request-major (request k for every server, then k + 1) where
  the client goes server-major: the same work, a slightly different
  order.
* Identical members are simulated once: a class of n trainers (same
  compute, link) acts in lock step and weighs n on every shared resource;
  servers holding the same number of shards form one class. Exact for a
  fluid model, where identical jobs started together end together.
* Costs are linear: a server spends srv_byte per byte each way (decode
  and accumulate a push, encode its reply) and srv_apply per byte of each
  optimizer step (once per round in sync, per push in async/SSP); a
  client's caller thread spends cli_byte per byte each way; one-way
  latency per message. Every request costs srv_req on its server and
  cli_req on its client (the dispatch: nng's send and receive, a context,
  the header), so a push-pull to S servers pays S of each: the server
  sweep's server CPU per push-pull grows with the servers (0.61 ms at 1
  server, 1.29 at 8, 8 trainers, 16 shards). The costs srv_msg and cli_msg
  are a wake-up: paid by a server only when a request finds it idle and by a
  client only when a reply finds its caller thread waiting (H-load's
  perf: context switches cost 0.094 s/GB at 2 trainers, 0.018 at 64,
  where requests queue up behind each other). A call that waits for a
  round (sync, every push-pull of a round but the one that closes it) or
  for a clock (SSP) costs srv_park more when it is answered: it sits on
  the server's parked list and the thread that closes the round walks
  that list and answers it under mu (ps/src/server/pull.c,
  ps__pull_wake), where an async call is answered by the thread that
  took it in. Per-byte
  costs include the kernel's loopback copies (measured as process CPU).
  A byte costs more once a machine's working set (a server: its shards x
  (1 + 2 x trainers) in sync: weights, per trainer a staging slot and the
  held request the reply is built in (1 + trainers where the server sums
  the requests in place, SYNC_SLOT_COPY false, and in async), on the
  measuring machine with all the clients' too; a client: 2 x the model,
  its own buffers, wherever it runs) outgrows
  the cache: + cold_byte x (1 - llc / working set), llc fitted between
  the L2 and the last level (the 1 MB sweep's bend is at 2 -> 4
  trainers: 2 -> 4 MB in flight against a 2 MiB L2).
* CPU: a request's work runs on one thread (at most one core); a server's
  requests run in parallel up to its cores, except what holds its mu
  (one thread at a time, first come first served, as ps/src/server/push.c
  and pull.c do today): the LOCK_* shares below of an async or SSP push
  (decode and apply), of a sync round (the closing thread sums every
  rank's slot), and of each reply (the copy of the weights into it, by
  the thread that woke it); the rest (kernel copies, a sync decode) runs
  outside mu. A client's work is serial on its caller
  thread. A class of identical trainers is cut into up to 8 sub-classes
  so that the first served go on while mu serves the rest. On the
  measuring machine every process shares `host_cores` cores (processor
  sharing: loadgen's ranks and the servers compete; host_cores is fitted,
  at most the machine's, as other work may have run beside the sweep,
  and host_bg threads of that other work always want a core: each takes
  one thread's fair share, so the sweep's share of host_cores grows with
  its own runnable threads, min(n, host_cores x n / (n + host_bg)));
  in a large job each machine has its own cores.
* Links: loopback (the measured runs) has no bandwidth limit (its copy
  cost is CPU, above); in a large job a message crosses the trainer's NIC
  and the server's NIC, each shared max-min fairly, capped by the pair's
  bandwidth. No TCP slow start, no loss, no shard-lock contention.
* SSP(K): each push is applied on arrival; a reply waits until every
  trainer class's clock is within K of the caller's (docs/algorithms.md
  §6.1). Local steps H: H computes, then one sync exchange of the
  model (the outer step), §8.
* Scheduler: off the round's path in steady state; its load is members x
  heartbeat rate x the measured CPU per heartbeat, and a new map reaches
  all members in a time linear in members (bench/scale/sched.sh's
  measurement scaled).
"""

import heapq
import math
import os
from dataclasses import dataclass

SHARD_BYTES = 1 << 20  # --shard-bytes default
PIPE_MIN_BYTES = 1 << 20  # clients/src/exchange.c
PIPE_MAX_BYTES = 1 << 20  # exchange.c since h/model's 22ed8e4 (0: none)
PIPE_SLOTS = 8  # FERRY_PIPE_SLOTS
PIPE_CTX_BUDGET = 128
CONTEXTS_GROW = False  # a server grows its contexts with the trainers
SYNC_SLOT_COPY = True  # a sync push is copied into a staging slot
EPS = 1e-12
# The shares of a server's work done holding its mu, from H-load's perf
# profile of the 64-trainer sync sweep (s per GB aggregated): of a push's
# 0.27 the recv copy, the zero-fill and the decode into the staging slot
# run outside mu in sync and the rank-order sum (0.07) inside; an async
# push decodes and applies inside (0.16); of a reply's 0.21 the copy of
# the weights into the held request (0.11) is inside, the kernel's send
# copy outside.
LOCK_PUSH_SYNC = 0.25
LOCK_PUSH_ASYNC = 0.6
LOCK_REPLY = 0.5


def read_constants(root):
    """Set the request constants above from the client's source under
    root (clients/src), so the model follows the code it is checked
    against; a constant not found keeps its value here (PIPE_MAX_BYTES
    absent: no cap). Returns what it read."""
    import re
    names = {"PIPE_MIN_BYTES", "PIPE_MAX_BYTES", "FERRY_PIPE_SLOTS",
             "PIPE_CTX_BUDGET"}
    got = {}
    for f in ("exchange.c", "client_impl.h"):
        try:
            with open(os.path.join(root, "clients", "src", f)) as fh:
                text = fh.read()
        except OSError:
            continue
        for m in re.finditer(r"^#define (\w+) \(?(\d+)u?(?: << (\d+))?\)?",
                             text, re.M):
            if m.group(1) in names:
                got[m.group(1)] = int(m.group(2)) << int(m.group(3) or 0)
    g = globals()
    if got:
        g["PIPE_MAX_BYTES"] = got.get("PIPE_MAX_BYTES", 0)
    for k, v in got.items():
        g["PIPE_SLOTS" if k == "FERRY_PIPE_SLOTS" else k] = v
    # the server: contexts that grow with the trainers (h/agg 2b903b5),
    # a sync push-pull's gradient summed in its request instead of a
    # staging slot (h/agg ee56031)
    for name, path, mark in (
            ("CONTEXTS_GROW", ("ps", "src", "common", "rpc.c"),
             "ps__rpc_grow"),
            ("SYNC_SLOT_COPY", ("ps", "src", "server", "store.c"),
             "ps__shard_unborrow")):
        try:
            with open(os.path.join(root, *path)) as fh:
                found = mark in fh.read()
        except OSError:
            continue
        g[name] = found if name == "CONTEXTS_GROW" else not found
        got[name] = g[name]
    return got


class Resource:
    """A shared capacity (cores, bytes/s) of one instance of a class."""

    def __init__(self, name, capacity, instances=1):
        self.name = name
        self.capacity = float(capacity)
        self.instances = instances
        self.used = 0.0  # integral of usage over time (one instance)

    def __repr__(self):
        return f"Resource({self.name}, {self.capacity})"


class Job:
    __slots__ = ("left", "cap", "uses", "done", "rate")

    def __init__(self, work, cap, uses, done):
        self.left = float(work)
        self.cap = float(cap)
        self.uses = uses  # [(Resource, coefficient per instance)]
        self.done = done
        self.rate = 0.0


class Engine:
    """Timers and fluid jobs; rates by progressive filling (max-min)."""

    def __init__(self):
        self.now = 0.0
        self.timers = []
        self.seq = 0
        self.jobs = []
        self.bg = []  # background load: jobs that never end
        self.dirty = False

    def background(self, resource, weight):
        """`weight` threads of other work that always want `resource`,
        at most one unit each: they take their fair share of it."""
        if weight > 0 and math.isfinite(resource.capacity):
            self.bg.append(Job(math.inf, 1.0, [(resource, weight)], None))
            self.dirty = True

    def after(self, dt, fn):
        self.seq += 1
        heapq.heappush(self.timers, (self.now + max(dt, 0.0), self.seq, fn))

    def start(self, work, uses, cap, fn):
        """Run `work` units through `uses` at most `cap` per member."""
        uses = [(r, k) for r, k in uses if k > 0 and
                math.isfinite(r.capacity)]
        if work <= 0:
            self.after(0.0, fn)
        elif not uses:
            self.after(work / cap if math.isfinite(cap) else 0.0, fn)
        else:
            self.jobs.append(Job(work, cap, uses, fn))
            self.dirty = True

    def _rates(self):
        resid = {}
        unf = self.jobs + self.bg
        for j in unf:
            for r, _ in j.uses:
                resid[r] = r.capacity
        while unf:
            load = {}
            for j in unf:
                for r, k in j.uses:
                    load[r] = load.get(r, 0.0) + k
            lev = min(max(resid[r], 0.0) / k for r, k in load.items())
            capmin = min(j.cap for j in unf)
            if capmin < lev:
                keep = []
                for j in unf:
                    if j.cap <= capmin * (1 + 1e-9):
                        j.rate = j.cap
                        for r, k in j.uses:
                            resid[r] -= k * j.cap
                    else:
                        keep.append(j)
                unf = keep
                continue
            sat = {r for r, k in load.items()
                   if max(resid[r], 0.0) / k <= lev * (1 + 1e-9)}
            keep = []
            for j in unf:
                if any(r in sat for r, _ in j.uses):
                    j.rate = lev
                    for r, k in j.uses:
                        resid[r] -= k * lev
                else:
                    keep.append(j)
            unf = keep
        self.dirty = False

    def run(self, stop):
        """Advance until stop() is true or nothing is left to do."""
        while not stop():
            if self.dirty:
                self._rates()
            t_job = math.inf
            for j in self.jobs:
                if j.rate > 0:
                    j_end = self.now + j.left / j.rate
                    t_job = min(t_job, j_end)
            t_tim = self.timers[0][0] if self.timers else math.inf
            t = min(t_job, t_tim)
            if t == math.inf:
                return
            dt = t - self.now
            if dt > 0:
                for j in self.jobs:
                    j.left -= j.rate * dt
                    for r, k in j.uses:
                        r.used += k * j.rate * dt
            self.now = t
            # the jobs due now (rounding may leave a hair of work)
            fin = [j for j in self.jobs if j.rate > 0 and
                   j.left <= j.rate * max(EPS, 1e-9 * dt)] \
                if t_job <= t_tim else []
            if fin:
                self.jobs = [j for j in self.jobs if j not in fin]
                self.dirty = True
                for j in fin:
                    j.done()
            while self.timers and self.timers[0][0] <= self.now:
                _, _, fn = heapq.heappop(self.timers)
                fn()


class Serial:
    """One thread: CPU tasks one at a time, in order (a caller thread)."""

    def __init__(self, eng, uses):
        self.eng = eng
        self.uses = uses
        self.queue = []
        self.busy = False
        self.since = 0.0
        self.held = 0.0  # seconds busy, for utilisation

    def submit(self, work, fn, uses=None):
        self.queue.append((work, fn, uses or self.uses))
        if not self.busy:
            self._next()

    def _next(self):
        if not self.queue:
            self.busy = False
            return
        self.busy = True
        self.since = self.eng.now
        work, fn, uses = self.queue.pop(0)

        def fin():
            self.held += self.eng.now - self.since
            fn()
            self._next()
        self.eng.start(work, uses, 1.0, fin)


@dataclass
class Costs:
    """Per-message and per-byte costs (seconds), see the module text."""
    srv_msg: float = 20e-6
    srv_req: float = 0.0  # per request, always (see Model.srv_push)
    srv_park: float = 0.0  # per parked request woken (see Model.srv_send)
    srv_byte: float = 0.3e-9
    srv_apply: float = 0.3e-9
    cli_msg: float = 20e-6
    cli_req: float = 0.0  # per request, always (see Model.build)
    cli_byte: float = 0.3e-9
    cold_byte: float = 0.0  # extra per byte far beyond the cache
    llc: float = 32 << 20  # last-level cache, bytes
    lat: float = 50e-6  # one way, per message (loopback + wake-up)
    sched_hb: float = 20e-6  # scheduler CPU per heartbeat
    sched_map_per_member: float = 1e-3  # map hand-out time per member
    # the measuring machine's cores as its runs had them: all of them on
    # a quiet machine, fewer while other work ran beside the sweep
    host_cores: float = 2.0
    # other runnable threads on the measuring machine (other work beside
    # the sweep): each takes a thread's fair share of host_cores, so the
    # sweep's share grows with its own runnable threads
    host_bg: float = 0.0

    def byte(self, base, ws):
        """Per-byte cost `base` for a machine whose working set is ws."""
        return base + self.cold_byte * max(0.0, 1.0 - self.llc / max(ws, 1))

    def as_dict(self):
        return dict(self.__dict__)


@dataclass
class TrainerClass:
    n: int
    compute_s: float = 0.0
    nic_bps: float = math.inf  # bytes/s each way
    lat_s: float = 0.0  # one way, added to Costs.lat


@dataclass
class Job_:
    """A job to simulate."""
    trainers: list  # [TrainerClass]
    servers: int
    bytes: int  # fp32 model bytes
    tensors: int = 1
    mode: str = "sync"  # sync | async | ssp | local
    staleness: int = 4
    local_steps: int = 32
    server_cores: float = 16
    server_nic_bps: float = math.inf
    trainer_cores: float = 1  # for Ferry's work on a trainer
    lock: bool = True  # model the server's mu (see Model.srv_job)
    split: int = 8  # sub-classes per trainer class (see split)
    host_cores: float = None  # all on one machine with this many cores
    host_bg: float = 0.0  # other runnable threads sharing those cores
    shard_bytes: int = SHARD_BYTES
    overhead: int = 64  # header bytes per request


def split(classes, k):
    """Each class of n trainers as min(n, k) sub-classes of nearly equal
    size: a server's mu serves calls one after another, so the first
    trainers of a round get their replies (and go on) before the last;
    sub-classes let the model see that overlap at 1/k's grain."""
    out = []
    for c in classes:
        parts = max(1, min(c.n, k))
        base, extra = divmod(c.n, parts)
        for i in range(parts):
            out.append(TrainerClass(base + (i < extra), c.compute_s,
                                    c.nic_bps, c.lat_s))
    return out


def cut(job):
    """Shard sizes (bytes) as shard_split cuts the model's tensors."""
    per = job.shard_bytes // 4
    floats = job.bytes // 4
    sizes = []
    base, extra = divmod(floats, job.tensors)
    for t in range(job.tensors):
        ln = base + (t < extra)
        p = -(-ln // per)
        b, e = divmod(ln, p)
        sizes += [4 * (b + (j < e)) for j in range(p)]
    return sizes


def window(job):
    """Requests a client keeps in flight per server (exchange.c)."""
    ntr = sum(c.n for c in job.trainers)
    return max(1, min(PIPE_SLOTS, PIPE_CTX_BUDGET // max(ntr, 1)))


def server_classes(job):
    """[(n servers, [request fp32 bytes])] for round-robin placement."""
    sizes = cut(job)
    per_server = [[] for _ in range(job.servers)]
    for i, s in enumerate(sizes):
        per_server[i % job.servers].append(s)
    w = window(job)
    groups = {}
    for shards in per_server:
        if not shards:
            continue
        total = sum(shards)
        target = max(PIPE_MIN_BYTES, -(-total // w))
        if PIPE_MAX_BYTES:
            target = min(target, PIPE_MAX_BYTES)
        reqs, acc = [], 0
        for s in shards:
            acc += s
            if acc >= target:
                reqs.append(acc)
                acc = 0
        if acc:
            reqs.append(acc)
        key = tuple(reqs)
        groups[key] = groups.get(key, 0) + 1
    return [(n, list(k)) for k, n in sorted(groups.items())]


class Model:
    """One job's rounds on the engine; run() returns its figures."""

    def __init__(self, job, costs):
        self.job, self.c = job, costs
        self.eng = Engine()
        self.sc = server_classes(job)
        self.tc = split(job.trainers, job.split)
        shared = job.host_cores is not None
        if shared:
            host = Resource("host cpu", job.host_cores)
            self.eng.background(host, job.host_bg)
        nsc = len(self.sc)
        ntc = len(self.tc)
        self.srv_cpu = []
        self.srv_in, self.srv_out = [], []
        for s, (n, _) in enumerate(self.sc):
            if shared:
                self.srv_cpu.append((host, n))
            else:
                self.srv_cpu.append((Resource(f"server{s} cpu",
                                              job.server_cores, n), 1))
            self.srv_in.append(Resource(f"server{s} nic in",
                                        job.server_nic_bps, n))
            self.srv_out.append(Resource(f"server{s} nic out",
                                         job.server_nic_bps, n))
        # each server's mu: one thread at a time, first come first served
        self.srv_lock = [Serial(self.eng, [self.srv_cpu[s]])
                         for s in range(len(self.sc))]
        self.cli = []
        self.tr_in, self.tr_out = [], []
        for a, tc in enumerate(self.tc):
            if shared:
                uses = [(host, tc.n)]
            else:
                uses = [(Resource(f"trainer{a} cpu", job.trainer_cores,
                                  tc.n), 1)]
            self.cli.append(Serial(self.eng, uses))
            speed = f"{tc.nic_bps * 8e-6:g} Mbit/s"
            self.tr_in.append(Resource(f"trainer{a} nic in {speed}",
                                       tc.nic_bps, tc.n))
            self.tr_out.append(Resource(f"trainer{a} nic out {speed}",
                                        tc.nic_bps, tc.n))
        self.resources = ([host] if shared else []) + [
            r for r, _ in self.srv_cpu if not shared] + self.srv_in + \
            self.srv_out + [r for s in self.cli for r, _ in s.uses
                            if not shared] + self.tr_in + self.tr_out
        self.step = [0] * ntc
        self.win = window(job)
        self.nxt = [[0] * len(self.sc) for _ in range(ntc)]
        self.step_t = [[] for _ in range(ntc)]
        self.pending = [0] * ntc
        # sync/local rounds: (s, j, round) -> trainer classes in
        self.rounds = {}
        # SSP: clock[s][j][a], parked replies
        self.clock = [[[0] * ntc for _ in reqs] for _, reqs in self.sc]
        self.parked = [[[] for _ in reqs] for _, reqs in self.sc]
        self.srv_work = 0.0  # CPU seconds of all servers
        self.srv_active = [0] * nsc  # server jobs queued or running
        self.nsc = nsc
        # working sets and their per-byte costs (see Costs.byte)
        ntr = sum(tc.n for tc in self.tc)
        # a server: weights, and per trainer a held request (plus a
        # staging slot in sync: H-load's perf of the 1 MB sweep)
        per = 2 * ntr if SYNC_SLOT_COPY and job.mode in ("sync",
                                                          "local") else ntr
        ws_srv = [sum(r) * (1 + per) for _, r in self.sc]
        # a client: its own weights and the reply (the gradient it
        # pushes is loadgen's one shared, hot copy), whatever runs beside
        ws_cli = 2 * job.bytes
        if shared:  # the servers share the machine's cache with all
            ws_srv = [sum(n * w for (n, _), w in zip(self.sc, ws_srv)) +
                      ntr * ws_cli] * nsc
        self.sb = [costs.byte(costs.srv_byte, w) for w in ws_srv]
        self.cb = costs.byte(costs.cli_byte, ws_cli)

    # -- trainer side ---------------------------------------------------
    def begin_step(self, a):
        tc = self.tc[a]
        mode = self.job.mode
        comp = tc.compute_s * (self.job.local_steps if mode == "local"
                               else 1)
        self.step_t[a].append(self.eng.now)
        self.eng.after(comp, lambda: self.send_all(a))

    def send_all(self, a):
        # fill each server's window, request k for every server, then
        # k + 1; a reply taken apart frees a slot for the next (build)
        self.pending[a] = sum(len(r) for _, r in self.sc)
        self.nxt[a] = [0] * len(self.sc)
        for _ in range(self.win):
            for s, (_, reqs) in enumerate(self.sc):
                if self.nxt[a][s] < len(reqs):
                    self.build(a, s)

    def build(self, a, s):
        j = self.nxt[a][s]
        self.nxt[a][s] += 1
        n, reqs = self.sc[s]
        # a request's fixed cost (its header, nng's send) and its bytes
        w = n * (self.c.cli_req + self.cb * reqs[j])
        self.cli[a].submit(w, lambda: self.transfer_up(a, s, j))

    def link_uses(self, a, s, up):
        n_s = self.sc[s][0]
        n_a = self.tc[a].n
        if up:
            return [(self.tr_out[a], n_s), (self.srv_in[s], n_a)]
        return [(self.srv_out[s], n_a), (self.tr_in[a], n_s)]

    def transfer(self, a, s, j, up, fn):
        b = self.sc[s][1][j] + self.job.overhead
        lat = self.c.lat + self.tc[a].lat_s
        self.eng.start(b, self.link_uses(a, s, up), math.inf,
                       lambda: self.eng.after(lat, fn))

    def transfer_up(self, a, s, j):
        self.transfer(a, s, j, True, lambda: self.srv_push(a, s, j))

    def reply_in(self, a, s, j):
        wake = self.c.cli_msg * (not self.cli[a].busy)
        w = self.sc[s][0] * (wake + self.cb * self.sc[s][1][j])
        self.cli[a].submit(w, lambda: self.reply_done(a, s))

    def reply_done(self, a, s):
        self.pending[a] -= 1
        if self.nxt[a][s] < len(self.sc[s][1]):
            self.build(a, s)
        if self.pending[a] == 0:
            self.step[a] += 1
            self.begin_step(a)

    # -- server side ----------------------------------------------------
    def srv_job(self, s, a, work, fn, coef_members=True, locked=False):
        """Server work; `locked` runs it holding the server's mu, which
        one thread at a time holds (a capacity of one core)."""
        res, k = self.srv_cpu[s]
        n_a = self.tc[a].n if coef_members else 1
        self.srv_work += work * n_a * self.sc[s][0]
        self.srv_active[s] += 1

        def done():
            self.srv_active[s] -= 1
            fn()
        if locked and self.job.lock:
            # the class's n_a calls one after another on the holder
            self.srv_lock[s].submit(work * n_a, done, [(res, k)])
        else:
            self.eng.start(work, [(res, k * n_a)], 1.0, done)

    def srv_push(self, a, s, j):
        # the push's share outside mu now, its share under mu later
        b = self.sc[s][1][j]
        idle = self.srv_active[s] == 0 and not self.srv_lock[s].busy
        # every request: its dispatch (nng's receive, a context, the
        # header) at srv_req; one that finds the server asleep: the
        # wake-up srv_msg too; then its bytes
        work = self.c.srv_req + self.c.srv_msg * idle + self.sb[s] * b
        lp = LOCK_PUSH_SYNC if self.job.mode in ("sync", "local") \
            else LOCK_PUSH_ASYNC
        self.srv_job(s, a, (1 - lp) * work,
                     lambda: self.pushed(a, s, j, lp * work))

    def pushed(self, a, s, j, held):
        b = self.sc[s][1][j]
        mode = self.job.mode
        if mode in ("sync", "local"):
            key = (s, j, self.step[a])
            got = self.rounds.get(key, 0) + 1
            self.rounds[key] = got
            if got < len(self.tc):
                return
            del self.rounds[key]

            def applied():
                # every call but the one that closed the round was
                # parked and is woken now
                for x in range(len(self.tc)):
                    self.srv_reply(x, s, j, self.tc[x].n - (x == a))
            # the closing thread, in one hold: every rank's share (the
            # rank-order sum of the slots), the optimizer, the replies
            ntr = sum(tc.n for tc in self.tc)
            self.srv_job(s, 0, ntr * held + self.c.srv_apply * b, applied,
                         coef_members=False, locked=True)
            return
        if mode == "async":
            # applied and answered in one hold, sent outside it
            w = held + (self.c.srv_apply + LOCK_REPLY * self.sb[s]) * b
            self.srv_job(s, a, w, lambda: self.srv_send(a, s, j),
                         locked=True)
            return

        def applied():  # SSP: the reply may wait for the slowest clock
            self.clock[s][j][a] += 1
            self.parked[s][j].append(a)
            self.release(s, j, a)
        self.srv_job(s, a, held + self.c.srv_apply * b, applied,
                     locked=True)

    def release(self, s, j, arrived):
        ck = self.clock[s][j]
        low = min(ck)
        keep = []
        for a in self.parked[s][j]:
            # after its push a's clock is ck[a]: its pull is answered once
            # every clock >= ck[a] - K (docs/algorithms.md §6.1)
            if low >= ck[a] - self.job.staleness:
                # a pull answered later than its push was parked
                self.srv_reply(a, s, j,
                               0 if a == arrived else self.tc[a].n)
            else:
                keep.append(a)
        self.parked[s][j] = keep

    def srv_reply(self, a, s, j, parked=0):
        # the thread that closes a round or advances a clock copies the
        # weights into each reply it wakes under mu (ps/src/server/pull.c)
        w = LOCK_REPLY * self.sb[s] * self.sc[s][1][j] + \
            self.c.srv_park * parked / self.tc[a].n
        self.srv_job(s, a, w, lambda: self.srv_send(a, s, j),
                     locked=True)

    def srv_send(self, a, s, j):
        # the kernel's send copy, on nng's threads, outside mu; of the
        # class's n calls `parked` waited for a round or a clock: each
        # is woken (its context's callback, on another thread) and its
        # reply sent from there, srv_park apiece
        w = (1 - LOCK_REPLY) * self.sb[s] * self.sc[s][1][j]
        self.srv_job(s, a, w, lambda: self.transfer(
            a, s, j, False, lambda: self.reply_in(a, s, j)))

    # -- running --------------------------------------------------------
    def run(self, steps=6, warmup=2):
        for a in range(len(self.tc)):
            self.begin_step(a)
        total = warmup + steps

        def done_steps():
            return sum(tc.n * st for tc, st in zip(self.tc, self.step))
        # the server CPU of the steps between the two marks
        self.eng.run(lambda: min(self.step) >= warmup)
        w0, d0 = self.srv_work, done_steps()
        self.eng.run(lambda: min(self.step) >= total)
        cpu_pp = (self.srv_work - w0) / max(done_steps() - d0, 1)
        per = []
        for a, ts in enumerate(self.step_t):
            d = [ts[i + 1] - ts[i] for i in range(warmup,
                                                  min(total, len(ts) - 1))]
            per.append(sum(d) / len(d) if d else math.nan)
        t0 = max(ts[warmup] for ts in self.step_t)
        t1 = min(ts[min(total, len(ts) - 1)] for ts in self.step_t)
        util = {}
        for r in self.resources:
            if math.isfinite(r.capacity) and self.eng.now > 0:
                util[r.name] = r.used / (r.capacity * self.eng.now)
        for s, lk in enumerate(self.srv_lock):
            if self.eng.now > 0:
                util[f"server{s} mu"] = lk.held / self.eng.now
        ntr = sum(tc.n for tc in self.tc)
        return {
            "round_s_by_class": per,
            "round_s": max(per) if self.job.mode in ("sync", "local")
            else sum(p * tc.n for p, tc in zip(per, self.tc)) / ntr,
            "util": util,
            "srv_cpu_per_pp": cpu_pp,
            "window_s": t1 - t0,
            "server_classes": [(n, len(r), sum(r)) for n, r in self.sc],
        }


def simulate(job, costs, steps=6, warmup=2):
    """Simulate `job` with `costs`; see Model.run for the figures."""
    return Model(job, costs).run(steps, warmup)


def bottleneck(job, res, costs):
    """(name, share) of the busiest resource of a run: a NIC counts both
    directions (a sync round uses them one after the other), a CPU its
    cores; the share is of the run's time (1.0: never idle)."""
    busy = {}
    for name, u in res["util"].items():
        key = name.replace(" in", "").replace(" out", "")
        busy[key] = busy.get(key, 0.0) + u
        if " in" in name or " out" in name:
            busy[key] = min(busy[key], 1.0)  # full duplex, in parallel
    best = ("none", 0.0)
    for name, u in busy.items():
        if u > best[1]:
            best = (name, u)
    ntr = sum(tc.n for tc in job.trainers)
    sched = sched_load(ntr + job.servers, costs)
    if sched["cpu_frac"] > best[1]:
        best = ("scheduler cpu", sched["cpu_frac"])
    return best


# Ferry's limits a large job can cross (their defaults)
PS_MAX_MEMBERS = 4096  # ps/src/scheduler/scheduler_impl.h
PS_CONTEXTS = 256  # ps-server --contexts
PS_MAX_MSG = 256 << 20  # ps-server --max-msg-mb


def limits(job):
    """What in today's Ferry (default flags) refuses or stalls `job`; the
    simulation itself assumes none of it binds."""
    out = []
    ntr = sum(tc.n for tc in job.trainers)
    if ntr > PS_MAX_MEMBERS:
        out.append(f"{ntr} trainers > {PS_MAX_MEMBERS} (--trainers' "
                   f"range, PS_MAX_MEMBERS): the scheduler refuses the job")
    w = max(1, min(PIPE_SLOTS, PIPE_CTX_BUDGET // max(ntr, 1)))
    # sync parks every push-pull until its round closes; SSP parks the
    # pulls of the trainers ahead (with stragglers: most of them)
    if job.mode in ("sync", "local", "ssp") and ntr * w >= PS_CONTEXTS \
            and not CONTEXTS_GROW:
        out.append(f"up to {ntr * w} parked requests per server >= "
                   f"--contexts {PS_CONTEXTS}: the round stalls unless "
                   f"--contexts is raised")
    big = max((max(r) for _, r in server_classes(job)), default=0)
    if big + job.overhead > PS_MAX_MSG:
        out.append(f"a {big >> 20} MiB request > --max-msg-mb "
                   f"{PS_MAX_MSG >> 20}")
    return out


def sched_load(members, costs, hb_hz=1.0):
    """The scheduler's CPU share and map hand-out time for members."""
    return {"cpu_frac": members * hb_hz * costs.sched_hb,
            "map_all_s": members * costs.sched_map_per_member}
