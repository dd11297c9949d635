// seed.c — re-seeding a lost shard from the trainers' copies: the SEEDING
// state a map puts a shard in when it raises the shard's seed_gen, the
// offers (PushRequest.seed) that fill it, and its opening.
//
// DESIGN. The scheduler raises ShardInfo.seed_gen when a shard's only
// copy was lost (its server died, or came back empty, with no replica or
// snapshot to restore it from) and places it here. In a dense job every
// trainer holds the model: with a lossless pull its copy is the weights of
// the last version it pulled, bit for bit; with a pull codec, the
// reference both sides keep. So the shard is created empty, in SEEDING:
// pushes and pulls of it get UNAVAILABLE (owner.c), and each trainer
// offers its copy once, fp32, with the version it is at. The newest offer
// is kept (the first on a tie) straight in the shard's weights, so an
// offer allocates nothing. The shard opens once every rank still in the
// job offered, or --reseed-wait-ms after the map if some rank did (the
// sweeper, pull.c, checks every 100 ms); with no offer it keeps waiting
// and says so once per interval. It opens at the newest offered version
// with those values as weights and pull reference (a trainer whose
// reference differs gets a CRC mismatch and resyncs in full), the
// optimizer state zero and an empty round: logged and counted
// (ferry_shards_reseeded_total). An offer for a shard that is not seeding
// here is answered OK and ignored (counted: a late or repeated offer is
// harmless).
//
// While a shard seeds, state[r] != PS_SLOT_FREE marks the ranks that
// offered (no push is ever staged into it: pushes are refused), and
// seed_version holds the newest offer's version, so sh->version stays 0
// and no parked pull is answered from half-seeded values.
#include <string.h>

#include "server_impl.h"

void
ps__seed_begin(struct ps_server *s, struct srv_shard *sh, uint64_t gen,
    uint64_t epoch)
{
	sh->seeding      = 1;
	sh->seed_have    = 0;
	sh->seed_version = 0;
	sh->seed_t0      = fb_clock_ms();
	sh->seed_told    = sh->seed_t0;
	sh->version      = 0;
	sh->init         = 0;
	sh->n_pushed     = 0;
	sh->samples      = 0;
	sh->round_t0     = 0;
	sh->stall_warned = 0;
	sh->crc_ok       = 0;
	memset(sh->state, PS_SLOT_FREE, s->trainers);
	ps__stage_drop(s, sh); // the round it had is gone
	FB_LOG(FB_LOG_NOTICE, "seed",
	    "shard %u: its only copy was lost; re-seeding it from the "
	    "trainers' copies (seed_gen %llu, map epoch %llu)",
	    sh->id, (unsigned long long) gen, (unsigned long long) epoch);
}

// seed_open opens seeding shard sh with the newest offer (see DESIGN);
// `why` says what decided it, for the log. The caller wakes the parked
// calls (ps__pull_wake) afterwards. mu held.
static void
seed_open(struct ps_server *s, struct srv_shard *sh, const char *why)
{
	uint32_t offers = 0;
	for (uint32_t r = 0; r < s->trainers; r++) {
		offers += sh->state[r] != PS_SLOT_FREE;
	}
	memset(sh->state, PS_SLOT_FREE, s->trainers);
	memset(sh->clock, 0, s->trainers * sizeof(*sh->clock));
	if (sh->opt != NULL) {
		memset(sh->opt, 0,
		    sh->len * sizeof(float) * ps__shard_opt_bufs(s, sh));
	}
	if (sh->ref != NULL) {
		memcpy(sh->ref, sh->x, sh->len * 4);
		sh->ref_crc = fb_crc32(0, sh->ref, sh->len * 4);
		ps__ref_log_reset(s, sh);
	}
	sh->version = sh->seed_version;
	sh->seeding = 0;
	sh->init    = 1;
	obs_counter_add(s->reseeded, 1);
	FB_LOG(FB_LOG_NOTICE, "seed",
	    "shard %u re-seeded at version %llu from the newest of %u "
	    "trainer offer(s) (%s); its optimizer state restarts from zero",
	    sh->id, (unsigned long long) sh->version, offers, why);
}

// seed_all_offered says whether every rank still in the job offered
// seeding shard sh its copy. mu held.
static int
seed_all_offered(const struct ps_server *s, const struct srv_shard *sh)
{
	for (uint32_t r = 0; r < s->trainers; r++) {
		// A rank pending a join (store.c's JOINS) has no copy.
		if (!s->gone[r] && s->join_at[r] != PS_JOIN_PENDING &&
		    sh->state[r] == PS_SLOT_FREE) {
			return 0;
		}
	}
	return 1;
}

// seeding reports whether shard id is held here and being re-seeded.
// id < n_global. mu held.
static int
seeding(const struct ps_server *s, uint32_t id)
{
	return s->local[id] >= 0 && s->shards[id].seeding;
}

// offer_check validates offer p as any push is validated (every shard
// named once and in range, fp32 of the shard's length inside the payload)
// and the values of the shards it would seed (finite), before anything
// changes. mu held. Returns 0, or replies an error and returns -1.
static int
offer_check(struct ps_server *s, struct ps_call *c,
    const Pswire__PushRequest *p)
{
	uint64_t plen = c->frame.payload_len;
	if (p->n_shards == 0 || p->n_shards > s->n_global) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "offer lists %zu shards; the job has %zu", p->n_shards,
		    s->n_global);
		return -1;
	}
	s->stamp++;
	for (size_t i = 0; i < p->n_shards; i++) {
		const Pswire__ShardRef *r = p->shards[i];
		if (r->shard >= s->n_global) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "offer of shard %u: no such shard (the job has "
			    "%zu)",
			    r->shard, s->n_global);
			return -1;
		}
		struct srv_shard *sh = &s->shards[r->shard];
		if (sh->seen == s->stamp) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "offer lists shard %u twice", r->shard);
			return -1;
		}
		sh->seen = s->stamp;
		if (r->codec != COMP_NONE || r->length != sh->len * 4) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "offer of shard %u: %llu bytes of codec %s; an "
			    "offer is fp32 (codec none), %llu bytes",
			    r->shard, (unsigned long long) r->length,
			    comp_codec_name(r->codec),
			    (unsigned long long) sh->len * 4);
			return -1;
		}
		if (r->offset > plen || r->length > plen - r->offset) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "offer of shard %u: bytes [%llu, +%llu) outside "
			    "the %llu-byte payload",
			    r->shard, (unsigned long long) r->offset,
			    (unsigned long long) r->length,
			    (unsigned long long) plen);
			return -1;
		}
		if (seeding(s, r->shard) &&
		    !fb_all_finite(c->frame.payload + r->offset, sh->len)) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "offer of shard %u holds NaN or Inf", r->shard);
			return -1;
		}
	}
	return 0;
}

void
ps__seed_on_offer(struct ps_server *s, struct ps_call *c,
    const Pswire__PushRequest *p)
{
	Pswire__Header h       = PSWIRE__HEADER__INIT;
	uint32_t       rank    = c->hdr->rank;
	uint64_t       ignored = 0;

	if (p->init || c->frame.method != PSWIRE__METHOD__PUSH) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "an offer (seed) is a Push of fp32 values, not %s",
		    p->init ? "an init offer" : "a PushPull");
		return;
	}
	if (rank >= s->trainers) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "offer from rank %u: the job has %u trainers", rank,
		    s->trainers);
		return;
	}
	if (c->hdr->epoch > s->pl->epoch) {
		// The map that puts the shard in SEEDING may not be applied
		// here yet: an offer ignored now would be lost for good.
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "placement epoch %llu is not applied here yet (have "
		    "%llu); offer again",
		    (unsigned long long) c->hdr->epoch,
		    (unsigned long long) s->pl->epoch);
		return;
	}
	if (offer_check(s, c, p) != 0) {
		return;
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		const Pswire__ShardRef *r  = p->shards[i];
		struct srv_shard       *sh = &s->shards[r->shard];
		if (!seeding(s, r->shard)) {
			ignored++;
			continue;
		}
		if (!sh->seed_have || r->version > sh->seed_version) {
			memcpy(sh->x, c->frame.payload + r->offset,
			    sh->len * 4);
			sh->seed_version = r->version;
			sh->seed_have    = 1;
		}
		sh->state[rank] = PS_SLOT_PUSHED;
		sh->src[rank]   = NULL; // an offer, in x (never summed)
		FB_LOG(FB_LOG_INFO, "seed",
		    "shard %u: rank %u offers version %llu (newest so far "
		    "%llu)",
		    r->shard, rank, (unsigned long long) r->version,
		    (unsigned long long) sh->seed_version);
		if (seed_all_offered(s, sh)) {
			seed_open(s, sh, "every trainer offered");
		}
	}
	if (ignored > 0) {
		obs_counter_add(s->offers_ignored, ignored);
		FB_LOG(FB_LOG_DEBUG, "seed",
		    "rank %u offered %llu shard(s) not being re-seeded here: "
		    "ignored",
		    rank, (unsigned long long) ignored);
	}
	atomic_fetch_add_explicit(&s->n_push, 1, memory_order_relaxed);
	ps__call_reply(c, &h);
}

uint32_t
ps__seed_sweep(struct ps_server *s, uint64_t now)
{
	uint64_t wait   = s->opts.reseed_wait_ms;
	uint32_t opened = 0;
	for (size_t i = 0; s->pl != NULL && i < s->n_global; i++) {
		struct srv_shard *sh = &s->shards[i];
		if (!seeding(s, (uint32_t) i) || now < sh->seed_t0 + wait) {
			continue;
		}
		if (sh->seed_have) {
			seed_open(s, sh, "--reseed-wait-ms passed");
			opened++;
		} else if (now >= sh->seed_told + (wait > 0 ? wait : 1000)) {
			sh->seed_told = now;
			FB_LOG(FB_LOG_WARN, "seed",
			    "shard %u: no trainer has offered its copy %.1f s "
			    "after the map that re-seeds it; still waiting "
			    "(pushes and pulls of it get UNAVAILABLE)",
			    sh->id, (double) (now - sh->seed_t0) / 1e3);
		}
	}
	return opened;
}

void
ps__seed_map(struct ps_server *s, const Pswire__Placement *old,
    const Pswire__Placement *pl)
{
	for (size_t i = 0; i < s->n_global; i++) {
		const Pswire__ShardInfo *si = pl->shards[i];
		struct srv_shard        *sh = &s->shards[i];
		if (si->server != s->index ||
		    si->seed_gen <= old->shards[i]->seed_gen) {
			continue;
		}
		if (s->local[i] < 0) {
			// Moving here from a server that is gone: it never
			// arrives, so it is created empty.
			int rv = ps__shard_alloc(s, sh);
			if (rv != FB_OK) {
				ps__shard_release(s, sh);
				FB_LOG(FB_LOG_ERR, "seed",
				    "shard %zu: cannot re-seed it here: %s", i,
				    fb_strerror(rv));
				continue;
			}
			s->local[i] = (int32_t) i;
			s->n_shards++;
		}
		ps__seed_begin(s, sh, si->seed_gen, pl->epoch);
	}
}

uint32_t
ps__seed_count(const struct ps_server *s)
{
	uint32_t n = 0;
	for (size_t i = 0; s->pl != NULL && i < s->n_global; i++) {
		n += seeding(s, (uint32_t) i);
	}
	return n;
}
