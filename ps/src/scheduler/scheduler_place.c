// scheduler_place.c — the placement map: cutting the job into shards,
// placing them on the servers, publishing the map as epoch 1 and each new
// epoch after (a server joined or left, links changed, an operator's
// ps_scheduler_replace).
//
// DESIGN. The decisions are sharding/'s (shard_policy_*: capacities from
// memory, round-robin over live servers, the solver kept only on a clear
// gain, the 10% rule for a new map); this file gathers their inputs from
// the scheduler's state, logs what was decided and turns an assignment into
// a map. When probing is on, every trainer has reported its RTT and
// bandwidth to each server before the first map (L[t][m] and B[t][m]); the
// matrices, the assignment, F, LB and F/LB are logged with the map. A map
// is kept as a private deep copy (pack, then unpack) to answer fetches
// from. Every function here runs with s->mu held.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comp/comp.h"
#include "scheduler_impl.h"
#include "scheduler_quarantine.h"

// wire_factor is rho of docs/algorithms.md §3.3: bytes on the wire per fp32
// byte of a shard, push plus pull, with the job's codecs.
static double
wire_factor(const Pswire__JobConfig *job)
{
	struct comp_codec a, b;
	const size_t      n = 1u << 20;
	if (comp_codec_parse(job->codec_push, job->bucket, &a) != FB_OK ||
	    comp_codec_parse(job->codec_pull, job->bucket, &b) != FB_OK) {
		return 2.0;
	}
	return (double) (comp_bound(&a, n) + comp_bound(&b, n)) / (4.0 * n);
}

// log_lines logs a multi-line text one line at a time.
static void
log_lines(const char *text)
{
	const char *p = text;
	while (*p != '\0') {
		const char *e = strchr(p, '\n');
		int         n = e ? (int) (e - p) : (int) strlen(p);
		FB_LOG(FB_LOG_NOTICE, "placement", "%.*s", n, p);
		p += n + (e != NULL);
	}
}

// server_copies is how many bytes a server holds per shard byte: the
// weights, one staging slot per trainer and, with a pull codec, the
// reference and the delta log (keep in step with the server's
// PS_DELTA_LOG = 4).
static double
server_copies(const struct ps_scheduler *s)
{
	uint32_t          T      = (uint32_t) s->opts.trainers;
	double            copies = 1.0 + T;
	struct comp_codec pc;
	if (comp_codec_parse(s->job->codec_pull, s->job->bucket, &pc) ==
	        FB_OK &&
	    pc.id != COMP_NONE) {
		copies += 1.0 +
		    4.0 * (double) comp_bound(&pc, 1u << 20) /
		        (4.0 * (1u << 20));
	}
	return copies;
}

// inst_build describes the placement problem for sharding/: shard sizes,
// the servers' capacities (shard_policy_caps: memory over server_copies;
// 1 byte for a server in skip, so it gets nothing), the link matrices and
// the wire factor. cap has one entry per server; in borrows it and the
// scheduler's arrays. Errors: FB_EINVAL (no server). mu held.
static int
inst_build(struct ps_scheduler *s, size_t ns, struct shard_inst *in,
    uint64_t *cap, const uint8_t *skip)
{
	uint32_t M = (uint32_t) s->n_servers_seen;
	int      bounded, rv;
	if ((rv = shard_policy_caps(M, s->capacity, skip, server_copies(s),
	         cap, &bounded)) != FB_OK) {
		return rv;
	}
	*in            = (struct shard_inst) SHARD_INST_INIT;
	in->n_shards   = ns;
	in->n_servers  = M;
	in->n_trainers = (uint32_t) s->opts.trainers;
	in->size       = s->shard_size;
	in->cap        = bounded ? cap : NULL;
	in->lat        = s->lat;
	in->bw         = s->bw;
	in->rho        = wire_factor(s->job);
	in->k          = 1; // the pull rides on the push's reply
	return FB_OK;
}

// choose fills assign[0..ns) for the shards (sizes in s->shard_size) by
// the configured policy (shard_policy_place), placing none on a server
// that is not usable (left, dead or suspect), and records the model's
// figures in s->report when links were measured. Sets s->start_error
// when the shards do not fit. mu held.
static int
choose(struct ps_scheduler *s, size_t ns, uint32_t *assign)
{
	struct shard_inst        in;
	struct shard_policy      pol;
	struct shard_policy_note note;
	uint32_t                 M    = (uint32_t) s->n_servers_seen;
	uint64_t                *cap  = fb_alloc(M * sizeof(uint64_t));
	uint8_t                 *skip = fb_alloc(M);
	int                      rv;

	if (cap == NULL || skip == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	for (uint32_t m = 0; m < M; m++) {
		skip[m] = !ps__sched_server_usable(s, m);
	}
	if ((rv = inst_build(s, ns, &in, cap, skip)) != FB_OK) {
		goto done;
	}
	pol.solve    = s->opts.placement == PS_PLACEMENT_LATENCY;
	pol.measured = ps__sched_probing(s);
	pol.seed     = s->opts.seed;
	rv = shard_policy_place(&in, skip, &pol, assign, &s->report, &note);
	if (rv == FB_ENOSPC) {
		snprintf(s->start_error, sizeof(s->start_error), "%s",
		    pol.solve
		        ? "no placement fits the servers' capacity "
		          "(--capacity-mb): the shards need more memory"
		        : "uniform placement exceeds a server's capacity "
		          "(--capacity-mb); add servers or memory");
	}
	if (rv != FB_OK) {
		goto done;
	}
	if (note.kept_rr) {
		FB_LOG(FB_LOG_NOTICE, "placement",
		    "solver %.3f ms vs round-robin %.3f ms: "
		    "within 10%%, keeping round-robin",
		    note.f_solver * 1e3, note.f_rr * 1e3);
	}
	s->have_report = ps__sched_probing(s);
	if (ps__sched_probing(s)) {
		size_t n   = shard_format_bound(&in);
		char  *buf = n ? fb_alloc(n) : NULL;
		size_t w;
		if (buf != NULL &&
		    shard_format(&in, assign, buf, n, &w) == FB_OK) {
			log_lines(buf);
		}
		fb_free(buf);
		FB_LOG(FB_LOG_NOTICE, "placement",
		    "predicted step comm %.3f ms, lower bound %.3f ms, "
		    "F/LB %.3f",
		    s->report.f * 1e3, s->report.lb * 1e3, s->report.ratio);
	}
	rv = FB_OK;
done:
	fb_free(cap);
	fb_free(skip);
	return rv;
}

// current_cost is F of the published assignment under the links known
// now, ignoring capacities (the map in force is what it is); +inf when it
// cannot be evaluated. mu held.
static double
current_cost(struct ps_scheduler *s)
{
	struct shard_inst in;
	uint64_t         *cap = fb_alloc(
	            (size_t) s->n_servers_seen * sizeof(uint64_t));
	double f = HUGE_VAL;
	if (cap != NULL &&
	    inst_build(s, s->n_assign, &in, cap, s->gone) == FB_OK) {
		in.cap = NULL;
		if (shard_cost(&in, s->assign, &f, NULL, NULL) != FB_OK) {
			f = HUGE_VAL;
		}
	}
	fb_free(cap);
	return f;
}

// backups_repair makes s->backups (n_backups per shard, resized to ns
// shards when the cut is new) valid for assign and the servers live now,
// promoting the first live backup of a shard whose primary is gone
// (shard_replicas_repair), and reports in *lost the shards with no live
// copy. A no-op without replicas. FB_ENOMEM. mu held.
static int
backups_repair(struct ps_scheduler *s, size_t ns, uint32_t *assign,
    size_t *lost)
{
	uint32_t M    = (uint32_t) s->n_servers_seen;
	size_t   nb   = s->n_backups;
	uint8_t *dead = NULL;
	int      rv;
	*lost = 0;
	if (nb == 0) {
		return FB_OK;
	}
	if (s->backups == NULL || ns != s->n_assign) {
		uint32_t *b = fb_alloc(ns * nb * sizeof(*b));
		if (b == NULL) {
			return FB_ENOMEM;
		}
		memset(b, 0xff, ns * nb * sizeof(*b)); // SHARD_NO_SERVER
		fb_free(s->backups);
		s->backups = b;
	}
	if ((dead = fb_alloc(M)) == NULL) {
		return FB_ENOMEM;
	}
	for (uint32_t m = 0; m < M; m++) {
		dead[m] = s->gone[m] || s->server_dead[m];
	}
	rv = shard_replicas_repair(ns, M, dead, (uint32_t) nb, assign,
	    s->backups, lost);
	fb_free(dead);
	return rv;
}

// cut_bytes is the shard size of the job's cut: --shard-bytes, or, at the
// first map of a probed job, the smaller size its slowest link calls for
// (shard_link_bytes: on a slow link a sync exchange overlaps its two
// directions only to the grain of a shard), counted in wire bytes (the
// job's codecs: a q4 shard may hold 8x the fp32 bytes of an uncompressed
// one for the same time on the link), unless that makes more than
// PS_MAX_SHARDS shards. Recorded in the job (saved with it), so every
// later map, and a restarted scheduler, keeps the same cut. A link
// reported unusable (1 B/s: the server did not answer) does not count.
// A job whose servers keep snapshots always gets --shard-bytes: a
// snapshot restores only into the cut it was written from, and a new job
// started with the same flags (a restore without the scheduler's
// --state-dir) must cut the same way, whatever its links measure.
// mu held.
static uint64_t
cut_bytes(struct ps_scheduler *s, const uint64_t *lens, size_t nt)
{
	uint64_t max  = s->opts.shard_bytes, b, n;
	double   slow = 0;
	size_t   M    = (size_t) s->n_servers_seen;
	if (s->epoch > 0 && s->job->shard_bytes != 0) {
		return s->job->shard_bytes; // the cut in force
	}
	for (size_t m = 0; m < M && m < PS_MAX_MEMBERS; m++) {
		if (s->snap_dir[m]) {
			s->job->shard_bytes = max;
			return max;
		}
	}
	for (size_t t = 0; ps__sched_probing(s) && s->bw != NULL &&
	     t < (size_t) s->opts.trainers;
	     t++) {
		for (size_t m = 0; s->links_seen[t] && m < M; m++) {
			double bw = s->bw[t * M + m];
			if (bw > 1.0 && (slow == 0 || bw < slow)) {
				slow = bw;
			}
		}
	}
	// A shard's time on the link is its wire bytes, push and pull: with
	// a codec (rho < 2) the same time holds more fp32 bytes.
	double rho = wire_factor(s->job);
	b          = shard_link_bytes(rho > 0 ? slow * 2.0 / rho : slow, max);
	if (b != max &&
	    (shard_count(lens, nt, b, &n) != FB_OK || n > PS_MAX_SHARDS)) {
		b = max;
	}
	if (b != max) {
		FB_LOG(FB_LOG_NOTICE, "placement",
		    "slowest link %.3g MB/s: shards of %llu bytes "
		    "(--shard-bytes %llu), so a sync exchange overlaps its "
		    "pushes and replies",
		    slow / 1e6, (unsigned long long) b,
		    (unsigned long long) max);
	}
	s->job->shard_bytes = b;
	return b;
}

// info_fill describes shard i (cut sd, placed on `server`) in *si with its
// backups from s->backups (the filled entries come first). si borrows
// s->backups until the map is packed. mu held.
static void
info_fill(struct ps_scheduler *s, size_t i, uint32_t server,
    Pswire__ShardInfo *si)
{
	si->server = server;
	if (s->n_backups == 0) {
		return;
	}
	uint32_t *b = &s->backups[i * s->n_backups];
	size_t    n = 0;
	while (n < s->n_backups && b[n] != SHARD_NO_SERVER) {
		n++;
	}
	si->n_backups = n;
	si->backups   = b;
}

// snapshots_all says whether every server registered with a
// --snapshot-dir (Placement.snapshots). mu held.
static int
snapshots_all(const struct ps_scheduler *s)
{
	int all = s->n_servers_seen > 0 && s->n_backups == 0;
	for (int m = 0; all && m < s->n_servers_seen && m < PS_MAX_MEMBERS;
	     m++) {
		all = s->snap_dir[m];
	}
	return all;
}

int
ps__sched_publish(struct ps_scheduler *s)
{
	size_t                 nt = s->job->n_tensors, ns = 0;
	uint64_t              *lens;
	struct shard_desc     *sd     = NULL;
	uint32_t              *assign = NULL;
	int                    rv;
	Pswire__Placement      p     = PSWIRE__PLACEMENT__INIT;
	Pswire__ShardInfo     *infos = NULL, **ptrs = NULL;
	struct ps_sched_tables tabs = { 0 };

	if ((lens = fb_alloc(nt * sizeof(*lens))) == NULL) {
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < nt; i++) {
		lens[i] = s->job->tensors[i]->len;
	}
	uint64_t cut = cut_bytes(s, lens, nt);
	rv           = shard_split(lens, nt, cut, &sd, &ns);
	fb_free(lens);
	if (rv != FB_OK) {
		return rv;
	}
	if (ns > PS_MAX_SHARDS) {
		snprintf(s->start_error, sizeof(s->start_error),
		    "the tensors make %zu shards of at most %llu bytes; the cap "
		    "is %u: raise --shard-bytes",
		    ns, (unsigned long long) cut, PS_MAX_SHARDS);
		fb_free(sd);
		return FB_ERANGE;
	}
	assign = fb_alloc(ns * sizeof(*assign));
	infos  = fb_alloc(ns * sizeof(*infos));
	ptrs   = fb_alloc(ns * sizeof(*ptrs));
	if (assign == NULL || infos == NULL || ptrs == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	fb_free(s->shard_size);
	if ((s->shard_size = fb_alloc(ns * sizeof(uint64_t))) == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	for (size_t i = 0; i < ns; i++) {
		s->shard_size[i] = sd[i].len * 4;
	}
	if ((rv = choose(s, ns, assign)) != FB_OK) {
		goto done;
	}
	size_t lost;
	if ((rv = backups_repair(s, ns, assign, &lost)) != FB_OK) {
		goto done;
	}
	for (size_t i = 0; i < ns; i++) {
		pswire__shard_info__init(&infos[i]);
		infos[i].tensor = sd[i].tensor;
		infos[i].index  = sd[i].index;
		infos[i].offset = sd[i].offset;
		infos[i].len    = sd[i].len;
		info_fill(s, i, assign[i], &infos[i]);
		ptrs[i] = &infos[i];
	}
	if ((rv = ps__sched_tables_place(s, assign, ns, &tabs)) != FB_OK) {
		goto done;
	}
	p.n_table_shards = tabs.n;
	p.table_shards   = tabs.ptrs;
	p.epoch          = ++s->epoch;
	p.n_servers      = (size_t) s->n_servers_seen;
	p.servers        = s->server_urls;
	p.n_shards       = ns;
	p.shards         = ptrs;
	p.job            = s->job;
	p.trainers       = (uint32_t) s->opts.trainers;
	p.snapshots      = snapshots_all(s);
	// An elastic job starts without the ranks nobody registered yet.
	uint32_t gone_t[PS_MAX_MEMBERS]; // opts.trainers <= PS_MAX_MEMBERS
	for (int t = 0; t < s->opts.trainers; t++) {
		if (s->trainer_gone[t]) {
			gone_t[p.n_gone_trainers++] = (uint32_t) t;
		}
	}
	p.gone_trainers = gone_t;
	// Quarantined trainers (issue 31): every server refuses them.
	uint32_t quar_t[PS_MAX_MEMBERS];
	p.n_quarantined = ps__sched_quar_list(s, quar_t);
	p.quarantined   = quar_t;
	// Keep a private deep copy (pack + unpack) to answer fetches from.
	s->placement_len = pswire__placement__get_packed_size(&p);
	if ((s->placement_buf = fb_alloc(s->placement_len)) == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	pswire__placement__pack(&p, s->placement_buf);
	s->placement = pswire__placement__unpack(NULL, s->placement_len,
	    s->placement_buf);
	if (s->placement == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	FB_LOG(FB_LOG_NOTICE, "placement",
	    "epoch %llu: %zu shards on %d servers (%s), %d trainers, %u "
	    "backup(s) per shard",
	    (unsigned long long) p.epoch, ns, s->n_servers_seen,
	    s->opts.placement == PS_PLACEMENT_LATENCY ? "latency" : "uniform",
	    s->opts.trainers, s->n_backups);
	for (size_t i = 0; i < ns; i++) {
		FB_LOG(FB_LOG_INFO, "placement",
		    "shard %zu = tensor %u '%s' [%llu, +%llu) -> server %u", i,
		    sd[i].tensor, s->job->tensors[sd[i].tensor]->name,
		    (unsigned long long) sd[i].offset,
		    (unsigned long long) sd[i].len, assign[i]);
	}
	rv = FB_OK;
done:
	fb_free(sd);
	if (rv == FB_OK) {
		fb_free(s->assign);
		s->assign   = assign;
		s->n_assign = ns;
	} else {
		fb_free(assign);
	}
	fb_free(infos);
	fb_free(ptrs);
	ps__sched_tables_free(&tabs);
	return rv;
}

// moves_note records the shards that map p places elsewhere than na (the
// map of epoch `epoch` about to be published): where each came from and
// when, for ps__sched_moves_unwind. Out of memory: not recorded (logged).
// mu held.
static void
moves_note(struct ps_scheduler *s, const Pswire__Placement *p,
    const uint32_t *na, uint64_t epoch)
{
	size_t n = p->n_shards;
	if (s->move_from == NULL) {
		s->move_from  = fb_alloc(n * sizeof(*s->move_from));
		s->move_epoch = fb_zalloc(n * sizeof(*s->move_epoch));
		if (s->move_from == NULL || s->move_epoch == NULL) {
			FB_LOG(FB_LOG_ERR, "placement",
			    "out of memory tracking moves: a move in flight "
			    "to a server that dies is not re-planned");
			fb_free(s->move_from);
			fb_free(s->move_epoch);
			s->move_from  = NULL;
			s->move_epoch = NULL;
			return;
		}
		memset(s->move_from, 0xff, n * sizeof(*s->move_from));
	}
	for (size_t i = 0; i < n; i++) {
		if (p->shards[i]->server != na[i]) {
			s->move_from[i]  = p->shards[i]->server;
			s->move_epoch[i] = epoch;
		}
	}
}

void
ps__sched_moves_unwind(struct ps_scheduler *s, uint32_t m)
{
	size_t    n = s->n_assign, back = 0, kept = 0;
	uint32_t *na;
	if (s->placement == NULL || s->move_from == NULL ||
	    (na = fb_alloc(n * sizeof(*na))) == NULL) {
		return;
	}
	memcpy(na, s->assign, n * sizeof(*na));
	for (size_t i = 0; i < n; i++) {
		uint32_t from = s->move_from[i];
		uint64_t e    = s->move_epoch[i];
		size_t   k    = (size_t) s->opts.trainers + from;
		if (from == SHARD_NO_SERVER) {
			continue;
		}
		// Never heartbeated an epoch: nothing known to be sent.
		uint64_t sent = k < s->n_hb_conn ? s->hb_conn[k].sent_epoch
		                                 : 0;
		if (sent >= e) {
			continue; // delivered: it lives where the map says
		}
		if (na[i] == m && from != m &&
		    ps__sched_server_usable(s, from)) {
			na[i] = from; // still in its sender's hands
			back++;
		} else if (from == m && na[i] != m) {
			na[i] = m; // never left m: lost with it
			kept++;
		}
	}
	if (back + kept > 0) {
		FB_LOG(FB_LOG_WARN, "placement",
		    "server %u is dead with moves in flight: %zu shard(s) go "
		    "back to their sender, %zu it had not sent stay its own",
		    m, back, kept);
		for (size_t i = 0; i < n; i++) {
			if (na[i] != s->assign[i]) {
				s->move_from[i] = SHARD_NO_SERVER;
			}
		}
		ps__sched_republish(s, na);
	}
	fb_free(na);
}

int
ps__sched_republish(struct ps_scheduler *s, const uint32_t *assign)
{
	Pswire__Placement     *p = s->placement, *np;
	Pswire__Placement      q = PSWIRE__PLACEMENT__INIT;
	uint8_t               *buf;
	size_t                 len, n = p->n_shards, lost;
	int                    moved = 0, promoted = 0, rv;
	uint32_t              *na    = fb_alloc(n * sizeof(*na));
	Pswire__ShardInfo     *infos = fb_alloc(n * sizeof(*infos));
	Pswire__ShardInfo    **ptrs  = fb_alloc(n * sizeof(*ptrs));
	struct ps_sched_tables tabs  = { 0 };

	if (na == NULL || infos == NULL || ptrs == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	memcpy(na, assign, n * sizeof(*na));
	// A primary that is gone is replaced by its first live backup.
	if ((rv = backups_repair(s, n, na, &lost)) != FB_OK) {
		goto done;
	}
	// Table shards stay on their servers (scheduler_tables.c).
	if ((rv = ps__sched_tables_keep(s, na, &tabs)) != FB_OK) {
		goto done;
	}
	for (size_t i = 0; i < n; i++) {
		moved += p->shards[i]->server != na[i];
		promoted += assign[i] != na[i];
		s->assign[i] = na[i];
		infos[i]     = *p->shards[i];
		info_fill(s, i, na[i], &infos[i]);
		ptrs[i] = &infos[i];
	}
	s->n_promoted += (uint64_t) promoted;
	// The next map: the same shards and job, the current members (a
	// server may have joined).
	q.epoch          = ++s->epoch;
	q.n_servers      = (size_t) s->n_servers_seen;
	q.servers        = s->server_urls;
	q.n_shards       = n;
	q.shards         = ptrs;
	q.n_table_shards = tabs.n;
	q.table_shards   = tabs.ptrs;
	q.job            = p->job;
	q.trainers       = p->trainers;
	uint32_t gone_t[PS_MAX_MEMBERS]; // opts.trainers <= PS_MAX_MEMBERS
	for (int t = 0;
	     t < s->opts.trainers && q.n_gone_trainers < PS_MAX_MEMBERS; t++) {
		if (s->trainer_gone[t]) {
			gone_t[q.n_gone_trainers++] = (uint32_t) t;
		}
	}
	q.gone_trainers = gone_t;
	uint32_t quar_t[PS_MAX_MEMBERS];
	q.n_quarantined    = ps__sched_quar_list(s, quar_t);
	q.quarantined      = quar_t;
	q.rollback_version = s->rollback_version;
	q.rollback_gen     = s->rollback_gen;
	q.snapshots        = snapshots_all(s);
	len                = pswire__placement__get_packed_size(&q);
	if ((buf = fb_alloc(len)) == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	pswire__placement__pack(&q, buf);
	if ((np = pswire__placement__unpack(NULL, len, buf)) == NULL) {
		fb_free(buf);
		rv = FB_ENOMEM;
		goto done;
	}
	moves_note(s, p, na, q.epoch);
	pswire__placement__free_unpacked(s->placement, NULL);
	fb_free(s->placement_buf);
	s->placement     = np;
	s->placement_buf = buf;
	s->placement_len = len;
	FB_LOG(FB_LOG_NOTICE, "placement",
	    "epoch %llu: %d of %zu shards move (%d promoted to a backup), %d "
	    "servers",
	    (unsigned long long) s->epoch, moved, n, promoted,
	    s->n_servers_seen);
	ps__sched_state_save(s); // on disk before anyone sees this epoch
	if (lost > 0) {
		FB_LOG(FB_LOG_ERR, "placement",
		    "%zu shard(s) have no live copy left: they are lost",
		    lost);
	}
	ps__sched_answer_parked(s);
	rv = FB_OK;
done:
	fb_free(na);
	fb_free(infos);
	fb_free(ptrs);
	ps__sched_tables_free(&tabs);
	return rv;
}

void
ps__sched_replan(struct ps_scheduler *s, const char *why, int force)
{
	uint32_t           *na  = fb_alloc(s->n_assign * sizeof(uint32_t));
	double              now = current_cost(s);
	struct shard_report old = s->report; // of the published map
	int                 rv;
	if (na == NULL) {
		FB_LOG(FB_LOG_ERR, "placement", "replan (%s): out of memory",
		    why);
		return;
	}
	s->start_error[0] = '\0';
	if ((rv = choose(s, s->n_assign, na)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "placement", "replan (%s): %s", why,
		    s->start_error[0] ? s->start_error : fb_strerror(rv));
		s->start_error[0] = '\0'; // the running job goes on
		goto out;
	}
	size_t held = 0;
	for (size_t i = 0; i < s->n_assign; i++) {
		// A suspect or dead server can send nothing: its shards stay
		// (a dead one's are handled when it is declared dead).
		if (!s->gone[s->assign[i]] &&
		    !ps__sched_server_usable(s, s->assign[i])) {
			held += na[i] != s->assign[i];
			na[i] = s->assign[i];
		}
	}
	if (held > 0) {
		FB_LOG(FB_LOG_NOTICE, "placement",
		    "replan (%s): %zu shard(s) stay on suspect or dead "
		    "servers",
		    why, held);
	}
	if (force || shard_policy_gains(s->report.f, now)) {
		FB_LOG(FB_LOG_NOTICE, "placement",
		    "replan (%s): predicted %.3f ms -> %.3f ms", why,
		    now * 1e3, s->report.f * 1e3);
		ps__sched_republish(s, na);
	} else {
		FB_LOG(FB_LOG_NOTICE, "placement",
		    "replan (%s): keeping the map (%.3f ms, new %.3f ms)", why,
		    now * 1e3, s->report.f * 1e3);
		s->report   = old; // Stats describe the map in force
		s->report.f = now;
	}
out:
	fb_free(na);
}

int
ps_scheduler_replace(struct ps_scheduler *s, const uint32_t *assign, size_t n)
{
	int rv;
	if (s == NULL || assign == NULL) {
		return FB_EINVAL;
	}
	pthread_mutex_lock(&s->mu);
	if (s->placement == NULL) {
		rv = FB_ESTATE;
	} else if (n != s->placement->n_shards) {
		rv = FB_EINVAL;
	} else {
		rv = FB_OK;
		for (size_t i = 0; i < n; i++) {
			if (assign[i] >= (uint32_t) s->n_servers_seen) {
				rv = FB_EINVAL;
			}
		}
		if (rv == FB_OK) {
			rv = ps__sched_republish(s, assign);
		}
	}
	pthread_mutex_unlock(&s->mu);
	return rv;
}
