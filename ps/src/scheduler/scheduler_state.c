// scheduler_state.c — the scheduler's job on disk (--state-dir): the job
// declaration, the members (server URLs, capacities, who left or died,
// which ranks registered and reported links), the measured links, the
// last epoch and the map in force, written whenever they change, and
// loaded by a scheduler opened on the same directory so that it carries
// on: servers and trainers heartbeat and re-register as before, joins,
// leaves and re-placement keep working, and epochs keep increasing.
//
// FORMAT (little-endian; format version 1). DIR/scheduler.state:
//   header  24 bytes: "FERRYSCH", u32 format version, u32 payload length,
//           u64 epoch (also in the payload; here for a quick look)
//   payload a packed SchedulerState (proto/ferry.proto)
//   trailer u32 CRC-32 (fb_crc32) of every byte before it.
//
// DESIGN. The state is small next to the shards (the map is a few bytes
// per shard), so it is written whole each time, under mu, before the new
// map is answered to anyone: a map nobody has seen may be lost by a crash,
// but a map somebody has seen is on disk, so a restarted scheduler never
// publishes a different map under an epoch already handed out. Loading
// reads and checks the whole file (magic, format, CRC, the protobuf, every
// count and index against the options) before anything is applied, so a
// damaged file is refused, naming it, and nothing is half-loaded.
// Quarantined ranks are (a trainer flag); the spot checks' audit key is
// not (scheduler_quarantine.c). Liveness is not persisted: after a restart,
// members are tracked again from their next heartbeat. A rollback still
// waiting for the servers' snapshot lists is (the restarted server and the
// versions it registered with): the restarted scheduler waits for every other
// server's next list, as the old one did, and decides it the same way.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "durable.h"
#include "scheduler_impl.h"
#include "scheduler_leases.h"
#include "scheduler_quarantine.h"

#define STATE_MAGIC "FERRYSCH"
#define STATE_FORMAT 1u
#define STATE_HDR 24
#define STATE_TRAILER 4
// A state file larger than this is not one of ours (a map of
// PS_MAX_SHARDS shards packs to a few tens of MiB).
#define STATE_MAX_BYTES (1ull << 30)

// Bits of SchedulerState.server_flags and trainer_flags.
enum {
	STATE_SERVER_GONE   = 1,
	STATE_SERVER_DEAD   = 2,
	STATE_TRAINER_SEEN  = 1,
	STATE_TRAINER_GONE  = 2,
	STATE_TRAINER_LINKS = 4,
	// Quarantined (issue 31): refused for good, after a restart too. A
	// file from before it has the bit clear.
	STATE_TRAINER_QUARANTINED = 8,
};

int
ps__sched_state_save(struct ps_scheduler *s)
{
	Pswire__SchedulerState st = PSWIRE__SCHEDULER_STATE__INIT;
	size_t   M = (size_t) s->n_servers_seen, T = (size_t) s->opts.trainers;
	uint8_t *sf, *tf, *buf = NULL;
	size_t   len;
	int      rv = FB_OK, e;

	if (s->state_path[0] == '\0') {
		return FB_OK;
	}
	sf = fb_alloc(M ? M : 1);
	tf = fb_alloc(T);
	if (sf == NULL || tf == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	for (size_t m = 0; m < M; m++) {
		sf[m] = (uint8_t) ((s->gone[m] ? STATE_SERVER_GONE : 0) |
		    (s->server_dead[m] ? STATE_SERVER_DEAD : 0));
	}
	for (size_t t = 0; t < T; t++) {
		tf[t] = (uint8_t) ((s->trainer_seen[t] ? STATE_TRAINER_SEEN
		                                       : 0) |
		    (s->trainer_gone[t] ? STATE_TRAINER_GONE : 0) |
		    (s->links_seen[t] ? STATE_TRAINER_LINKS : 0) |
		    (ps__sched_quarantined(s, (uint32_t) t)
		            ? STATE_TRAINER_QUARANTINED
		            : 0));
	}
	st.trainers           = (uint32_t) T;
	st.min_trainers       = (uint32_t) s->opts.min_trainers;
	st.job                = s->job;
	st.epoch              = s->epoch;
	st.placement          = s->placement;
	st.n_servers          = M;
	st.servers            = s->server_urls;
	st.n_capacity         = M;
	st.capacity           = s->capacity;
	st.server_flags.len   = M;
	st.server_flags.data  = sf;
	st.trainer_flags.len  = T;
	st.trainer_flags.data = tf;
	st.n_lat = st.n_bw = T * M;
	st.lat             = s->lat;
	st.bw              = s->bw;
	if (s->rb_pending != 0 && s->rb_pending <= M) {
		// A rollback still waiting for the servers' lists: a
		// restarted scheduler decides it as this one would have.
		uint32_t m          = s->rb_pending - 1;
		st.rollback_pending = s->rb_pending;
		st.n_rollback_held  = s->n_snap_held[m];
		st.rollback_held    = s->snap_held[m];
	}
	ps__sched_leases_save(s, &st);
	len = pswire__scheduler_state__get_packed_size(&st);
	if ((buf = fb_alloc(STATE_HDR + len)) == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	memcpy(buf, STATE_MAGIC, 8);
	fb_put_u32le(buf + 8, STATE_FORMAT);
	fb_put_u32le(buf + 12, (uint32_t) len);
	fb_put_u32le(buf + 16, (uint32_t) s->epoch);
	fb_put_u32le(buf + 20, (uint32_t) (s->epoch >> 32));
	pswire__scheduler_state__pack(&st, buf + STATE_HDR);
	// The directory is the one the path was made from.
	char dir[sizeof(s->state_path)];
	snprintf(dir, sizeof(dir), "%s", s->opts.state_dir);
	if ((e = ps__durable_write(dir, s->state_path, s->state_tmp, buf,
	         STATE_HDR + len, "state")) != 0) {
		rv = (int) (FB_ESYSERR | (unsigned) e);
	}
done:
	if (rv == FB_OK) {
		s->state_saved++;
	} else {
		s->state_failed++;
		if (rv == FB_ENOMEM) {
			FB_LOG(FB_LOG_ERR, "state",
			    "cannot write %s: out of memory (previous file "
			    "kept)",
			    s->state_path);
		}
	}
	fb_free(sf);
	fb_free(tf);
	fb_free(buf);
	return rv;
}

// why records what is wrong with the file at path in msg (n bytes) and
// returns rv.
static int why(char *msg, size_t n, int rv, const char *path, const char *fmt,
    ...) __attribute__((format(printf, 5, 6)));

static int
why(char *msg, size_t n, int rv, const char *path, const char *fmt, ...)
{
	va_list ap;
	int     k = snprintf(msg, n, "%s: ", path);
	va_start(ap, fmt);
	if (k >= 0 && (size_t) k < n) {
		vsnprintf(msg + k, n - (size_t) k, fmt, ap);
	}
	va_end(ap);
	return rv;
}

// state_read reads the whole file at path and checks its frame (magic,
// format, length, CRC); *out is the unpacked state, released with
// pswire__scheduler_state__free_unpacked. Errors: FB_ENOTFOUND, FB_ECORRUPT,
// FB_EPROTO, FB_ENOMEM, FB_ESYSERR|errno, with msg naming the file.
static int
state_read(const char *path, Pswire__SchedulerState **out, char *msg, size_t n)
{
	FILE    *f   = fopen(path, "rb");
	uint8_t *buf = NULL;
	long     size;
	size_t   plen;
	int      rv;

	if (f == NULL) {
		return errno == ENOENT
		    ? why(msg, n, FB_ENOTFOUND, path, "no such file")
		    : why(msg, n, (int) (FB_ESYSERR | (unsigned) errno), path,
		          "%s", strerror(errno));
	}
	if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		rv = why(msg, n, (int) (FB_ESYSERR | (unsigned) errno), path,
		    "cannot size: %s", strerror(errno));
		goto done;
	}
	if ((size_t) size < STATE_HDR + STATE_TRAILER ||
	    (unsigned long long) size > STATE_MAX_BYTES) {
		rv = why(msg, n, FB_ECORRUPT, path,
		    "%ld bytes: truncated or not a state file", size);
		goto done;
	}
	if ((buf = fb_alloc((size_t) size)) == NULL) {
		rv = FB_ENOMEM;
		why(msg, n, rv, path, "out of memory");
		goto done;
	}
	if (fread(buf, 1, (size_t) size, f) != (size_t) size) {
		rv = why(msg, n, FB_ECORRUPT, path, "short read");
		goto done;
	}
	if (memcmp(buf, STATE_MAGIC, 8) != 0) {
		rv = why(msg, n, FB_EPROTO, path,
		    "not a scheduler state file");
		goto done;
	}
	if (fb_get_u32le(buf + 8) != STATE_FORMAT) {
		rv = why(msg, n, FB_EPROTO, path,
		    "format version %u, this scheduler reads %u",
		    fb_get_u32le(buf + 8), STATE_FORMAT);
		goto done;
	}
	plen = fb_get_u32le(buf + 12);
	if (plen != (size_t) size - STATE_HDR - STATE_TRAILER) {
		rv = why(msg, n, FB_ECORRUPT, path,
		    "payload of %zu bytes in a %ld-byte file: truncated", plen,
		    size);
		goto done;
	}
	if (fb_crc32(0, buf, (size_t) size - STATE_TRAILER) !=
	    fb_get_u32le(buf + size - STATE_TRAILER)) {
		rv = why(msg, n, FB_ECORRUPT, path, "CRC mismatch");
		goto done;
	}
	*out = pswire__scheduler_state__unpack(NULL, plen, buf + STATE_HDR);
	rv   = *out != NULL
	      ? FB_OK
	      : why(msg, n, FB_EPROTO, path, "the state does not parse");
done:
	fclose(f);
	fb_free(buf);
	return rv;
}

// placement_check says whether map p fits the state around it: its epoch,
// M servers, T trainers and the job's tensors. Returns FB_OK or FB_EPROTO
// with msg.
static int
placement_check(const Pswire__SchedulerState *st, const char *path, char *msg,
    size_t n)
{
	const Pswire__Placement *p = st->placement;
	const Pswire__JobConfig *j = st->job;

	if (j == NULL || p->epoch != st->epoch || p->epoch == 0 ||
	    p->n_servers != st->n_servers || p->trainers != st->trainers ||
	    p->n_shards == 0 || p->n_shards > PS_MAX_SHARDS ||
	    p->job == NULL) {
		return why(msg, n, FB_EPROTO, path,
		    "the map (epoch %llu, %zu servers, %zu shards) does not "
		    "fit the state (epoch %llu, %zu servers)",
		    (unsigned long long) p->epoch, p->n_servers, p->n_shards,
		    (unsigned long long) st->epoch, st->n_servers);
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		const Pswire__ShardInfo *sh = p->shards[i];
		if (sh->server >= st->n_servers ||
		    sh->tensor >= j->n_tensors || sh->len == 0 ||
		    sh->offset > j->tensors[sh->tensor]->len ||
		    sh->len > j->tensors[sh->tensor]->len - sh->offset) {
			return why(msg, n, FB_EPROTO, path,
			    "shard %zu (tensor %u [%llu, +%llu) on server %u) "
			    "is out of range",
			    i, sh->tensor, (unsigned long long) sh->offset,
			    (unsigned long long) sh->len, sh->server);
		}
	}
	for (size_t i = 0; i < p->n_table_shards; i++) {
		const Pswire__ShardInfo *sh = p->table_shards[i];
		if (sh->server >= st->n_servers || sh->tensor >= j->n_tables) {
			return why(msg, n, FB_EPROTO, path,
			    "table shard %zu (table %u on server %u) is out of "
			    "range",
			    i, sh->tensor, sh->server);
		}
	}
	for (size_t i = 0; i < p->n_gone_trainers; i++) {
		if (p->gone_trainers[i] >= st->trainers) {
			return why(msg, n, FB_EPROTO, path,
			    "the map names trainer %u gone of %u",
			    p->gone_trainers[i], st->trainers);
		}
	}
	return FB_OK;
}

// state_check validates every count and index of st against s's options.
// Returns FB_OK or FB_EPROTO with msg. Pure.
static int
state_check(const struct ps_scheduler *s, const Pswire__SchedulerState *st,
    const char *path, char *msg, size_t n)
{
	size_t M = st->n_servers, T = st->trainers;
	char   jw[256];

	uint32_t lo = st->min_trainers != 0 ? st->min_trainers : st->trainers;
	if (st->trainers != (uint32_t) s->opts.trainers ||
	    lo != (uint32_t) s->opts.min_trainers) {
		return why(msg, n, FB_EPROTO, path,
		    "written for a job of %u:%u trainers, --trainers is %d:%d",
		    lo, st->trainers, s->opts.min_trainers, s->opts.trainers);
	}
	if (M > PS_MAX_MEMBERS ||
	    (st->placement == NULL && M > (size_t) s->opts.servers)) {
		return why(msg, n, FB_EPROTO, path,
		    "%zu servers for a job of %d", M, s->opts.servers);
	}
	if (st->n_capacity != M || st->server_flags.len != M ||
	    st->trainer_flags.len != T || st->n_lat != T * M ||
	    st->n_bw != T * M) {
		return why(msg, n, FB_EPROTO, path,
		    "member tables of the wrong size for %zu servers and %zu "
		    "trainers",
		    M, T);
	}
	for (size_t m = 0; m < M; m++) {
		size_t ul = strlen(st->servers[m]);
		if (ul == 0 || ul > 255) {
			return why(msg, n, FB_EPROTO, path,
			    "server %zu has a url of %zu bytes", m, ul);
		}
	}
	if (st->rollback_pending > M ||
	    (st->rollback_pending != 0 && st->placement == NULL) ||
	    st->n_rollback_held > PS_SNAP_REPORTED ||
	    (st->rollback_pending == 0 && st->n_rollback_held != 0)) {
		return why(msg, n, FB_EPROTO, path,
		    "a pending rollback of server %u with %zu versions does "
		    "not fit %zu servers%s",
		    st->rollback_pending - (st->rollback_pending != 0),
		    st->n_rollback_held, M,
		    st->placement == NULL ? " and no map" : "");
	}
	if (st->job != NULL &&
	    ps__sched_job_check(st->job, &s->opts, jw, sizeof(jw)) != FB_OK) {
		return why(msg, n, FB_EPROTO, path, "bad job: %s", jw);
	}
	if (st->placement == NULL) {
		return st->epoch == 0
		    ? FB_OK
		    : why(msg, n, FB_EPROTO, path, "epoch %llu without a map",
		          (unsigned long long) st->epoch);
	}
	return placement_check(st, path, msg, n);
}

// state_apply installs a checked state into s (freshly opened: no member,
// no job, no map). Errors: FB_ENOMEM (s is then closed by the caller).
static int
state_apply(struct ps_scheduler *s, const Pswire__SchedulerState *st)
{
	size_t M = st->n_servers, T = st->trainers;
	size_t cap = M > (size_t) s->opts.servers ? M
	                                          : (size_t) s->opts.servers;
	int    rv;

	if ((rv = ps__sched_leases_load(s, st)) != FB_OK) {
		return rv;
	}

	// The per-server arrays were sized for opts.servers at open; servers
	// that joined a running job need more.
	if (cap > (size_t) s->opts.servers) {
		char **u = fb_realloc(s->server_urls, cap * sizeof(char *));
		if (u == NULL) {
			return FB_ENOMEM;
		}
		s->server_urls = u;
#define GROW(f, sz)                                                           \
	do {                                                                  \
		void *g_ = fb_realloc(s->f, (sz));                            \
		if (g_ == NULL) {                                             \
			return FB_ENOMEM;                                     \
		}                                                             \
		s->f = g_;                                                    \
	} while (0)
		GROW(capacity, cap * sizeof(uint64_t));
		GROW(gone, cap);
		GROW(hb_server, cap * sizeof(uint64_t));
		GROW(server_dead, cap);
		GROW(lat, cap * T * sizeof(double));
		GROW(bw, cap * T * sizeof(double));
#undef GROW
	}
	for (size_t m = 0; m < M; m++) {
		if ((s->server_urls[m] = fb_strdup(st->servers[m])) == NULL) {
			return FB_ENOMEM;
		}
		s->n_servers_seen = (int) m + 1; // close frees what is set
		s->capacity[m]    = st->capacity[m];
		s->gone[m] = (st->server_flags.data[m] & STATE_SERVER_GONE) !=
		    0;
		s->server_dead[m] = (st->server_flags.data[m] &
		                        STATE_SERVER_DEAD) != 0;
		s->hb_server[m]   = 0; // tracked again from its next heartbeat
	}
	memcpy(s->lat, st->lat, T * M * sizeof(double));
	memcpy(s->bw, st->bw, T * M * sizeof(double));
	for (size_t t = 0; t < T; t++) {
		uint8_t f          = st->trainer_flags.data[t];
		s->trainer_seen[t] = (f & STATE_TRAINER_SEEN) != 0;
		s->trainer_gone[t] = (f & STATE_TRAINER_GONE) != 0;
		s->links_seen[t]   = (f & STATE_TRAINER_LINKS) != 0;
		if (f & STATE_TRAINER_QUARANTINED) {
			ps__sched_quar_set(s, (uint32_t) t);
		}
		s->n_trainers_seen += s->trainer_seen[t];
		s->n_links_seen += s->links_seen[t];
	}
	if (st->job != NULL &&
	    (s->job = ps__sched_job_copy(st->job)) == NULL) {
		return FB_ENOMEM;
	}
	s->epoch = st->epoch;
	if (st->placement == NULL) {
		return FB_OK;
	}
	// The map in force, kept as the publisher keeps it: packed, and a
	// private unpacked copy.
	const Pswire__Placement *p = st->placement;
	s->rollback_version        = p->rollback_version;
	s->rollback_gen            = p->rollback_gen;
	s->placement_len           = pswire__placement__get_packed_size(p);
	s->placement_buf           = fb_alloc(s->placement_len);
	s->assign                  = fb_alloc(p->n_shards * sizeof(uint32_t));
	s->shard_size              = fb_alloc(p->n_shards * sizeof(uint64_t));
	if (s->placement_buf == NULL || s->assign == NULL ||
	    s->shard_size == NULL) {
		return FB_ENOMEM;
	}
	pswire__placement__pack(p, s->placement_buf);
	s->placement = pswire__placement__unpack(NULL, s->placement_len,
	    s->placement_buf);
	if (s->placement == NULL) {
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		s->assign[i]     = p->shards[i]->server;
		s->shard_size[i] = p->shards[i]->len * 4;
	}
	s->n_assign = p->n_shards;
	if (st->rollback_pending != 0) {
		// The restarted server's list is the one it registered with;
		// every other server must report again (from its next
		// heartbeat), and the wait starts over from this open.
		uint32_t m    = st->rollback_pending - 1;
		s->rb_pending = st->rollback_pending;
		memcpy(s->snap_held[m], st->rollback_held,
		    st->n_rollback_held * sizeof(uint64_t));
		s->n_snap_held[m] = (uint32_t) st->n_rollback_held;
		memset(s->rb_fresh, 0, sizeof(s->rb_fresh));
		s->rb_fresh[m] = 1;
		s->rb_since_ms = fb_clock_ms();
	}
	return FB_OK;
}

int
ps__sched_state_open(struct ps_scheduler *s)
{
	const char             *dir = s->opts.state_dir;
	Pswire__SchedulerState *st  = NULL;
	struct stat             sb;
	char                    msg[512];
	int                     rv;

	if (dir == NULL || *dir == '\0') {
		return FB_OK;
	}
	if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		int e = errno; // stat's, or none: a file
		FB_LOG(FB_LOG_ERR, "state", "--state-dir %s: %s", dir,
		    S_ISDIR(sb.st_mode) || e == 0 ? "not a directory"
		                                  : strerror(e));
		return FB_EINVAL;
	}
	snprintf(s->state_path, sizeof(s->state_path), "%s/scheduler.state",
	    dir);
	snprintf(s->state_tmp, sizeof(s->state_tmp), "%s.tmp", s->state_path);
	rv = state_read(s->state_path, &st, msg, sizeof(msg));
	if (rv == FB_ENOTFOUND) {
		FB_LOG(FB_LOG_NOTICE, "state",
		    "no state at %s: a new job; it will be kept there",
		    s->state_path);
		return FB_OK;
	}
	if (rv == FB_OK) {
		rv = state_check(s, st, s->state_path, msg, sizeof(msg));
	}
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, "state", "refused, nothing loaded: %s",
		    msg);
	} else if ((rv = state_apply(s, st)) == FB_OK) {
		ps__sched_leases_track_holders(s);
		FB_LOG(FB_LOG_NOTICE, "state",
		    "carrying on from %s: epoch %llu, %d servers, %d of %d "
		    "trainers registered, %s%s",
		    s->state_path, (unsigned long long) s->epoch,
		    s->n_servers_seen, s->n_trainers_seen, s->opts.trainers,
		    s->placement != NULL ? "the job runs" : "not started",
		    s->rb_pending != 0 ? "; a rollback waits for every "
		                         "server's snapshot list"
		                       : "");
	}
	if (st != NULL) {
		pswire__scheduler_state__free_unpacked(st, NULL);
	}
	return rv;
}
