// auth.c — signed frames: the per-job key, the trailer every request and
// reply carries with --secret-file, and the replay table that refuses a
// request seen before or out of order.
//
// DESIGN. The trailer (PSW_AUTH_TRAILER = 64 bytes, little-endian) is
//   role u8 | to_role u8 | 0 u8[2] | id u32 | nonce u32 | to_id u32 |
//   channel u64 | counter u64 | reply_to u64 | run u64 | tag[16]
// and the tag is GMAC (AES-256-GCM's authenticator) under SHA-256 of the
// key file, over every byte of the message before the tag: the frame
// header (with the SIGNED flag), the protobuf Header, the payload and the
// trailer's fields. Measured per MiB on the development machine
// (docs/security.md): GMAC 0.27-0.36 ms (libgcrypt), HMAC-SHA256 1.2-1.8
// (libgcrypt, SHA instructions) and 8.7 (mbedTLS), keyed BLAKE2b 5.4
// (libgcrypt); a push-pull runs the MAC four times, so the MAC is what
// signing costs. Where the CPU has VPCLMULQDQ and AVX-512 the GHASH is
// ghash.c's (0.036 ms/MiB CPU, against libgcrypt's 0.126 in the same
// run) with AES from libgcrypt: the same tags, so peers with and without
// it interoperate.
//
// GMAC must never see one IV twice under the key: the IV is the trailer's
// first 16 bytes (role, receiver, id, nonce) and the counter, nonce random
// per process and the counter unique within it, so two messages share one
// only if two processes of one member drew the same 32-bit nonce and
// reached the same counter. One key per job, so any key holder can sign
// as any member: the identity is a claim that the role checks rely on
// against members' mistakes, and against outsiders (who have no key) the
// MAC refuses everything. Mutual TLS is the mode where identities cannot
// be forged.
//
// What a request binds besides its bytes (docs/security.md):
// - Its receiver, (to_role, to_id): the role and slot the sender meant
//   (the scheduler is (scheduler, 0), a server (server, index)). A
//   receiver compares them with its own identity (psw_auth_set_self), so
//   it needs no view of how the sender reached it: a URL would differ
//   between a pod's address, a Service name and 0.0.0.0. Senders name
//   the receiver per context (psw_auth_set_peer); a context nobody named
//   sends to the scheduler when the method is the scheduler's (1..15) or
//   the sender is an operator, else to no server at all (refused).
// - The job run: a 64-bit id the scheduler draws when a job starts (kept
//   in its --state-dir across restarts). A member learns it from the
//   first scheduler reply it accepts (replies carry the signer's run) and
//   signs with it from then on. The one request taken without a run is a
//   Stats to the scheduler: it changes nothing, and psw_call sends one
//   first when it does not know the run yet, so even a member's first
//   Register carries the run, and none recorded in an earlier job passes.
// - Its time: counters come from one per-process atomic that is the wall
//   clock in nanoseconds, or one above the last counter when the clock
//   has not moved (or went back), so counters are unique and a member
//   that restarts continues above its old ones. A receiver refuses a
//   counter more than the window (default 2 min) from its own clock,
//   either way; since a process only accepts counters above its clock
//   less the window, it refuses everything signed before its own start
//   less the window.
//
// A receiver keeps, per (sender identity, channel), the last counter it
// accepted and refuses anything not above it: a replay or a reordering.
// Channels name a sender's sockets (psw_auth_channel), since requests on
// two sockets may overtake each other. The table keeps at most
// CHANNELS_PER_SENDER channels per identity; evicting one raises that
// identity's floor to its last counter, under which every counter of an
// unknown channel is refused, so an evicted channel cannot be replayed.
// A process that keeps state (the scheduler's --state-dir) loads each
// sender's floor at start (psw_auth_set_floor) and is told of every
// counter it accepts before it acts on it (psw_auth_on_accept), so a
// restart refuses all it accepted before.
// Replies are bound to their request instead: reply_to must be the
// counter the caller just signed its request with.
#include <errno.h>
#include <gcrypt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferry.pb-c.h"
#include "fb/fb.h"
#include "ghash.h"
#include "peers.h"
#include "psw/psw.h"

#define MAC_LEN 16u
#define KEY_BYTES 32u
// Trailer field offsets.
#define T_TO_ROLE 1u
#define T_ID 4u
#define T_NONCE 8u
#define T_TO_ID 12u
#define T_CHAN 16u
#define T_CTR 24u
#define T_REPLY 32u
#define T_RUN 40u
#define T_TAG 48u
#define IV_LEN 24u
_Static_assert(T_TAG + MAC_LEN == PSW_AUTH_TRAILER, "trailer layout");
#define KEY_MIN 16u
#define KEY_MAX 4096u
#define CHANNELS_PER_SENDER 16u
#define NS_PER_MS 1000000ull
#define WINDOW_DEFAULT_MS 120000u

// One (sender, channel) the receiver has accepted from; channel 0 with
// is_floor holds the sender's floor.
struct seen {
	uint8_t  role;
	uint8_t  is_floor;
	uint32_t id;
	uint64_t channel;
	uint64_t last; // last counter accepted (floor: highest evicted)
	uint64_t used; // table tick of its last use, for eviction
};

struct psw_auth {
	uint8_t               key[KEY_BYTES]; // SHA-256 of the key file
	int                   fast; // GHASH by ghash.c (else libgcrypt's GMAC)
	struct psw__ghash_key gk;   // H's powers, when fast
	uint64_t              gen;  // tells thread-cached MAC handles apart
	_Atomic uint64_t      self; // role << 32 | id
	_Atomic uint64_t      counter;
	uint32_t           nonce; // per process: channels of a restart differ
	_Atomic uint64_t   refused;
	_Atomic uint64_t   run;       // the job run (0: not known yet)
	_Atomic uint64_t   window_ns; // freshness window (0: off)
	pthread_mutex_t    mu; // guards seen, n_seen, cap_seen, tick, hook
	struct seen       *seen;
	size_t             n_seen, cap_seen;
	uint64_t           tick;
	psw_auth_accept_fn hook; // told of each accepted counter
	void              *hook_arg;
	struct psw__peers  peers; // whom each context's requests go to
};

// The reasons a message is refused: static texts, so that
// psw_auth_reason can name them for metrics.
static const char W_UNSIGNED[] =
    "message is not signed (this job requires --secret-file)";
static const char W_MAC[]  = "bad signature (wrong --secret-file, or altered)";
static const char W_ROLE[] = "signed with an unknown role";
static const char W_NOMEM[]    = "out of memory checking the signature";
static const char W_REPLY[]    = "a signed reply was sent as a request";
static const char W_RECEIVER[] = "signed for another receiver (role or slot)";
static const char W_NOSLOT[] =
    "this server has no slot yet (it is registering): retry";
static const char W_RUN[] = "signed for another job run (a replay from an "
                            "earlier job, or a stale member)";
static const char W_STALE[] =
    "signed longer ago than the freshness window (a replay, or the "
    "sender's clock is behind)";
static const char W_FUTURE[] = "signed in the future beyond the freshness "
                               "window (the sender's clock is ahead)";
static const char W_FLOOR[] =
    "replayed request (counter below the sender's floor)";
static const char W_REPLAY[] = "replayed or reordered request (counter not "
                               "above the last one accepted)";
static const char W_RECORD[] = "cannot record the sender's counter";

static struct seen *find(struct psw_auth *a, struct psw_ident who,
    uint64_t channel, int floor);
static struct seen *add_entry(struct psw_auth *a, struct psw_ident who,
    uint64_t channel, int floor);

// ---- the MAC --------------------------------------------------------------

static pthread_once_t   gcry_once = PTHREAD_ONCE_INIT;
static pthread_key_t    mac_key;
static _Atomic uint64_t next_gen = 1;

struct mac_cache {
	gcry_mac_hd_t    h;   // GMAC (libgcrypt's path)
	gcry_cipher_hd_t aes; // AES-256 ECB for E_K(J0) (ghash.c's path)
	uint64_t         gen;
};

static void
mac_cache_free(void *p)
{
	struct mac_cache *mc = p;
	gcry_mac_close(mc->h);
	gcry_cipher_close(mc->aes);
	fb_free(mc);
}

static void
gcry_setup(void)
{
	gcry_check_version(NULL);
	gcry_control(GCRYCTL_DISABLE_SECMEM, 0);
	gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
	(void) pthread_key_create(&mac_key, mac_cache_free);
}

// mac computes the GMAC of the len bytes at p, which end with the
// trailer's T_TAG bytes of fields (the IV is taken from them), under a's
// key into out. Each thread keeps one keyed handle, so the hot path
// neither allocates nor re-keys. Returns FB_OK or FB_ENOMEM.
static int
mac(const struct psw_auth *a, const uint8_t *p, size_t len,
    uint8_t out[MAC_LEN])
{
	struct mac_cache *mc = pthread_getspecific(mac_key);
	size_t            n  = MAC_LEN;
	const uint8_t    *t  = p + len - T_TAG;
	uint8_t           iv[IV_LEN];

	memcpy(iv, t, T_CHAN); // role, id, nonce
	memcpy(iv + T_CHAN, t + T_CTR, 8);

	if (mc == NULL) {
		if ((mc = fb_zalloc(sizeof(*mc))) == NULL) {
			return FB_ENOMEM;
		}
		if (gcry_mac_open(&mc->h, GCRY_MAC_GMAC_AES, 0, NULL) != 0 ||
		    gcry_cipher_open(&mc->aes, GCRY_CIPHER_AES256,
		        GCRY_CIPHER_MODE_ECB, 0) != 0) {
			gcry_mac_close(mc->h);
			fb_free(mc);
			return FB_ENOMEM;
		}
		(void) pthread_setspecific(mac_key, mc);
	}
	if (mc->gen != a->gen) {
		if (gcry_mac_setkey(mc->h, a->key, sizeof(a->key)) != 0 ||
		    gcry_cipher_setkey(mc->aes, a->key, sizeof(a->key)) != 0) {
			mc->gen = 0;
			return FB_ENOMEM;
		}
		mc->gen = a->gen;
	} else if (!a->fast) {
		gcry_mac_reset(mc->h);
	}
	if (a->fast) {
		// GMAC = GHASH(message) xor E_K(J0), J0 from the IV.
		uint8_t j0[16], s[16];
		psw__ghash_j0(&a->gk, iv, sizeof(iv), j0);
		if (gcry_cipher_encrypt(mc->aes, j0, sizeof(j0), NULL, 0) !=
		    0) {
			mc->gen = 0;
			return FB_ENOMEM;
		}
		psw__ghash_aad(&a->gk, p, len, s);
		for (unsigned i = 0; i < MAC_LEN; i++) {
			out[i] = s[i] ^ j0[i];
		}
		return FB_OK;
	}
	if (gcry_mac_setiv(mc->h, iv, sizeof(iv)) != 0 ||
	    gcry_mac_write(mc->h, p, len) != 0 ||
	    gcry_mac_read(mc->h, out, &n) != 0 || n != MAC_LEN) {
		mc->gen = 0; // re-key next time
		return FB_ENOMEM;
	}
	return FB_OK;
}

// wall_ns reads the wall clock in nanoseconds since the epoch.
static uint64_t
wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

// ---- the key and the identity ----------------------------------------------

int
psw_auth_open(const char *secret_file, int role, uint32_t id,
    struct psw_auth **out, char *why, size_t n)
{
	struct psw_auth *a;
	FILE            *fp;
	size_t           len;

	(void) pthread_once(&gcry_once, gcry_setup);
	if ((a = fb_zalloc(sizeof(*a))) == NULL) {
		snprintf(why, n, "out of memory");
		return FB_ENOMEM;
	}
	if ((fp = fopen(secret_file, "rb")) == NULL) {
		snprintf(why, n, "--secret-file %s: %s", secret_file,
		    strerror(errno));
		fb_free(a);
		return FB_EINVAL;
	}
	uint8_t *raw = fb_alloc(KEY_MAX);
	if (raw == NULL) {
		fclose(fp);
		fb_free(a);
		snprintf(why, n, "out of memory");
		return FB_ENOMEM;
	}
	len      = fread(raw, 1, KEY_MAX, fp);
	int more = fgetc(fp) != EOF;
	fclose(fp);
	while (len > 0 && (raw[len - 1] == '\n' || raw[len - 1] == '\r')) {
		len--;
	}
	gcry_md_hash_buffer(GCRY_MD_SHA256, a->key, raw, len);
	memset(raw, 0, KEY_MAX);
	fb_free(raw);
	if (len < KEY_MIN || more) {
		snprintf(why, n,
		    "--secret-file %s: the key must be %u to %u bytes "
		    "(e.g. head -c 32 /dev/urandom | base64 > FILE)",
		    secret_file, KEY_MIN, KEY_MAX);
		fb_free(a);
		return FB_EINVAL;
	}
	a->gen = atomic_fetch_add(&next_gen, 1);
	if (psw__ghash_available() && getenv("FERRY_GMAC_LIBGCRYPT") == NULL) {
		// H = E_K(0^128), kept as the powers ghash.c multiplies by.
		gcry_cipher_hd_t aes;
		uint8_t          h[16] = { 0 };
		if (gcry_cipher_open(&aes, GCRY_CIPHER_AES256,
		        GCRY_CIPHER_MODE_ECB, 0) == 0) {
			if (gcry_cipher_setkey(aes, a->key, sizeof(a->key)) ==
			        0 &&
			    gcry_cipher_encrypt(aes, h, sizeof(h), NULL, 0) ==
			        0) {
				psw__ghash_init(&a->gk, h);
				a->fast = 1;
			}
			gcry_cipher_close(aes);
		}
	}
	atomic_init(&a->counter, wall_ns());
	atomic_init(&a->window_ns, WINDOW_DEFAULT_MS * NS_PER_MS);
	gcry_create_nonce(&a->nonce, sizeof(a->nonce));
	psw_auth_set_self(a, role, id);
	pthread_mutex_init(&a->mu, NULL);
	psw__peers_init(&a->peers);
	*out = a;
	return FB_OK;
}

void
psw_auth_close(struct psw_auth *a)
{
	if (a == NULL) {
		return;
	}
	pthread_mutex_destroy(&a->mu);
	psw__peers_free(&a->peers);
	memset(a->key, 0, sizeof(a->key));
	memset(&a->gk, 0, sizeof(a->gk));
	fb_free(a->seen);
	fb_free(a);
}

void
psw_auth_set_self(struct psw_auth *a, int role, uint32_t id)
{
	if (a != NULL) {
		atomic_store(&a->self, (uint64_t) (uint32_t) role << 32 | id);
	}
}

uint64_t
psw_auth_channel(const struct psw_auth *a, nng_ctx ctx)
{
	uint32_t nonce = a != NULL ? a->nonce : 0;
	return (uint64_t) nonce << 32 | (uint32_t) nng_ctx_id(ctx);
}

uint64_t
psw_auth_refused(const struct psw_auth *a)
{
	return a != NULL
	    ? atomic_load_explicit(&a->refused, memory_order_relaxed)
	    : 0;
}

void
psw_auth_set_run(struct psw_auth *a, uint64_t run)
{
	if (a != NULL) {
		atomic_store(&a->run, run);
	}
}

uint64_t
psw_auth_run(const struct psw_auth *a)
{
	return a != NULL ? atomic_load(&a->run) : 0;
}

void
psw_auth_set_window(struct psw_auth *a, uint32_t window_ms)
{
	if (a != NULL) {
		atomic_store(&a->window_ns, (uint64_t) window_ms * NS_PER_MS);
	}
}

int
psw_auth_set_peer(struct psw_auth *a, nng_ctx ctx, int role, uint32_t id)
{
	struct psw_ident to  = { role, id };
	int              cid = nng_ctx_id(ctx);

	if (a == NULL) {
		return FB_OK;
	}
	return cid > 0 ? psw__peers_set(&a->peers, (uint32_t) cid, to)
	               : FB_EINVAL;
}

// receiver finds whom a request (frame method `method`) sent on channel
// goes to: the peer named for its context, else the scheduler for the
// scheduler's methods and an operator's calls, else no server.
static struct psw_ident
receiver(struct psw_auth *a, uint64_t channel, int method, int self_role)
{
	struct psw_ident to = { PSW_ROLE_SERVER, PSW_ID_UNASSIGNED };

	if (psw__peers_get(&a->peers, (uint32_t) channel, &to) != FB_OK &&
	    (method < PSWIRE__METHOD__PULL ||
	        self_role == PSW_ROLE_OPERATOR)) {
		to.role = PSW_ROLE_SCHEDULER;
		to.id   = 0;
	}
	return to;
}

struct psw_ident
psw_auth_receiver(struct psw_auth *a, nng_ctx ctx, int method)
{
	struct psw_ident none = { PSW_ROLE_NONE, 0 };
	if (a == NULL) {
		return none;
	}
	return receiver(a, psw_auth_channel(a, ctx), method,
	    (int) (atomic_load(&a->self) >> 32));
}

int
psw_auth_set_floor(struct psw_auth *a, struct psw_ident who, uint64_t counter)
{
	int rv = FB_OK;

	if (a == NULL) {
		return FB_OK;
	}
	pthread_mutex_lock(&a->mu);
	struct seen *fl = find(a, who, 0, 1);
	if (fl == NULL) {
		fl = add_entry(a, who, 0, 1);
	}
	if (fl == NULL) {
		rv = FB_ENOMEM;
	} else if (counter > fl->last) {
		fl->last = counter;
	}
	pthread_mutex_unlock(&a->mu);
	return rv;
}

void
psw_auth_on_accept(struct psw_auth *a, psw_auth_accept_fn fn, void *arg)
{
	if (a != NULL) {
		pthread_mutex_lock(&a->mu);
		a->hook     = fn;
		a->hook_arg = arg;
		pthread_mutex_unlock(&a->mu);
	}
}

const char *
psw_auth_reason(const char *why)
{
	static const struct {
		const char *why, *name;
	} names[] = {
		{ W_UNSIGNED, "unsigned" },
		{ W_MAC, "bad_signature" },
		{ W_ROLE, "bad_signature" },
		{ W_NOMEM, "internal" },
		{ W_REPLY, "reply_as_request" },
		{ W_RECEIVER, "wrong_receiver" },
		{ W_NOSLOT, "no_slot_yet" },
		{ W_RUN, "wrong_run" },
		{ W_STALE, "stale" },
		{ W_FUTURE, "future" },
		{ W_FLOOR, "replay" },
		{ W_REPLAY, "replay" },
		{ W_RECORD, "internal" },
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (why == names[i].why) {
			return names[i].name;
		}
	}
	return "identity";
}

const char *
psw_ident_format(struct psw_ident who, char *buf, size_t n)
{
	switch (who.role) {
	case PSW_ROLE_TRAINER:
		snprintf(buf, n, "trainer-%u", who.id);
		break;
	case PSW_ROLE_SERVER:
		if (who.id == PSW_ID_UNASSIGNED) {
			snprintf(buf, n, "server-(unregistered)");
		} else {
			snprintf(buf, n, "server-%u", who.id);
		}
		break;
	case PSW_ROLE_SCHEDULER:
		snprintf(buf, n, "scheduler");
		break;
	case PSW_ROLE_OPERATOR:
		snprintf(buf, n, "operator");
		break;
	default:
		snprintf(buf, n, "anyone");
		break;
	}
	return buf;
}

// ---- signing and checking ---------------------------------------------------

// next_counter returns a fresh counter: the wall clock in nanoseconds, or
// one above the last one when the clock has not moved past it.
static uint64_t
next_counter(struct psw_auth *a)
{
	uint64_t now = wall_ns();
	uint64_t old = atomic_load_explicit(&a->counter, memory_order_relaxed);
	uint64_t next;
	do {
		next = old + 1 > now ? old + 1 : now;
	} while (!atomic_compare_exchange_weak(&a->counter, &old, next));
	return next;
}

int
psw_auth_sign_to(struct psw_auth *a, nng_msg *m, uint64_t channel,
    struct psw_ident to, uint64_t reply_to, uint64_t *counter)
{
	uint8_t  t[T_TAG], tag[MAC_LEN];
	uint64_t self, ctr;
	uint8_t *body;

	if (counter != NULL) {
		*counter = 0;
	}
	if (a == NULL) {
		return FB_OK;
	}
	self = atomic_load(&a->self);
	ctr  = next_counter(a);
	memset(t, 0, sizeof(t));
	t[0]         = (uint8_t) (self >> 32);
	t[T_TO_ROLE] = (uint8_t) to.role;
	fb_put_u32le(t + T_ID, (uint32_t) self);
	fb_put_u32le(t + T_NONCE, a->nonce);
	fb_put_u32le(t + T_TO_ID, to.id);
	fb_put_u64le(t + T_CHAN, channel);
	fb_put_u64le(t + T_CTR, ctr);
	fb_put_u64le(t + T_REPLY, reply_to);
	fb_put_u64le(t + T_RUN, atomic_load(&a->run));
	body = nng_msg_body(m);
	fb_put_u16le(body + 6, fb_get_u16le(body + 6) | PSW_FLAG_SIGNED);
	// psw_msg_begin reserved the room: neither append reallocates.
	if (nng_msg_append(m, t, sizeof(t)) != 0) {
		return FB_ENOMEM;
	}
	if (mac(a, nng_msg_body(m), nng_msg_len(m), tag) != FB_OK ||
	    nng_msg_append(m, tag, sizeof(tag)) != 0) {
		return FB_ENOMEM;
	}
	if (counter != NULL) {
		*counter = ctr;
	}
	return FB_OK;
}

int
psw_auth_sign(struct psw_auth *a, nng_msg *m, uint64_t channel,
    uint64_t reply_to, uint64_t *counter)
{
	struct psw_ident to = { PSW_ROLE_NONE, 0 };

	if (a != NULL && reply_to == 0 && nng_msg_len(m) >= PSW_FRAME_HDR) {
		// A request: to whom its context was named for. (A reply is
		// bound to its request by reply_to instead.)
		const uint8_t *body = nng_msg_body(m);
		to                  = receiver(a, channel, body[5],
		                     (int) (atomic_load(&a->self) >> 32));
	}
	return psw_auth_sign_to(a, m, channel, to, reply_to, counter);
}

// verify checks f's MAC and fills *who; FB_OK or FB_EAUTH with *why.
static int
verify(struct psw_auth *a, const struct psw_frame *f, struct psw_ident *who,
    const char **why)
{
	uint8_t        tag[MAC_LEN];
	const uint8_t *start = f->hdr - PSW_FRAME_HDR;
	const uint8_t *t     = f->trailer;
	uint8_t        diff  = 0;

	if (t == NULL) {
		*why = W_UNSIGNED;
		return FB_EAUTH;
	}
	if (mac(a, start, (size_t) (t - start) + T_TAG, tag) != FB_OK) {
		*why = W_NOMEM;
		return FB_EAUTH;
	}
	for (size_t i = 0; i < MAC_LEN; i++) {
		diff |= tag[i] ^ t[T_TAG + i];
	}
	if (diff != 0) {
		*why = W_MAC;
		return FB_EAUTH;
	}
	if (t[0] < PSW_ROLE_TRAINER || t[0] > PSW_ROLE_OPERATOR) {
		*why = W_ROLE;
		return FB_EAUTH;
	}
	who->role = t[0];
	who->id   = fb_get_u32le(t + T_ID);
	return FB_OK;
}

// find returns the entry of (who, channel, is_floor) or NULL; a->mu held.
static struct seen *
find(struct psw_auth *a, struct psw_ident who, uint64_t channel, int floor)
{
	for (size_t i = 0; i < a->n_seen; i++) {
		struct seen *s = &a->seen[i];
		if (s->role == who.role && s->id == who.id &&
		    s->is_floor == floor && (floor || s->channel == channel)) {
			return s;
		}
	}
	return NULL;
}

// add_entry appends an entry for (who, channel), evicting the sender's
// least recently used channel (into its floor) when it has too many;
// a->mu held. Returns NULL when out of memory.
static struct seen *
add_entry(struct psw_auth *a, struct psw_ident who, uint64_t channel,
    int floor)
{
	if (!floor) {
		struct seen *lru = NULL;
		size_t       n   = 0;
		for (size_t i = 0; i < a->n_seen; i++) {
			struct seen *s = &a->seen[i];
			if (s->role == who.role && s->id == who.id &&
			    !s->is_floor) {
				n++;
				if (lru == NULL || s->used < lru->used) {
					lru = s;
				}
			}
		}
		if (n >= CHANNELS_PER_SENDER) {
			struct seen *fl = find(a, who, 0, 1);
			if (fl == NULL) {
				lru->is_floor = 1;
				lru->channel  = 0;
			} else {
				if (lru->last > fl->last) {
					fl->last = lru->last;
				}
				lru->channel = channel;
				lru->last    = 0;
				return lru;
			}
		}
	}
	if (a->n_seen == a->cap_seen) {
		size_t       cap = a->cap_seen ? a->cap_seen * 2 : 16;
		struct seen *ns  = fb_realloc(a->seen, cap * sizeof(*ns));
		if (ns == NULL) {
			return NULL;
		}
		a->seen     = ns;
		a->cap_seen = cap;
	}
	struct seen *s = &a->seen[a->n_seen++];
	memset(s, 0, sizeof(*s));
	s->role     = (uint8_t) who.role;
	s->id       = who.id;
	s->channel  = channel;
	s->is_floor = (uint8_t) floor;
	return s;
}

// bound checks what trailer t binds besides its bytes: a request (not a
// reply), to this receiver, in this run, signed within the window of our
// clock. Returns NULL or the reason to refuse it.
static const char *
bound(struct psw_auth *a, const struct psw_frame *f, const uint8_t *t)
{
	uint64_t self = atomic_load(&a->self);
	uint64_t run  = atomic_load(&a->run);
	uint64_t trun = fb_get_u64le(t + T_RUN);
	uint64_t ctr  = fb_get_u64le(t + T_CTR);
	uint64_t w = atomic_load_explicit(&a->window_ns, memory_order_relaxed);
	int      role = (int) (self >> 32);

	if (fb_get_u64le(t + T_REPLY) != 0 || (f->flags & PSW_FLAG_REPLY)) {
		return W_REPLY;
	}
	if (role == PSW_ROLE_SERVER && (uint32_t) self == PSW_ID_UNASSIGNED) {
		// Registering: the scheduler may have published the map
		// (and a trainer sent this) before this server read its
		// slot from the Register reply. Not handled; retried.
		return W_NOSLOT;
	}
	if (t[T_TO_ROLE] != role ||
	    fb_get_u32le(t + T_TO_ID) != (uint32_t) self) {
		return W_RECEIVER;
	}
	if (trun != run &&
	    !(trun == 0 && role == PSW_ROLE_SCHEDULER &&
	        f->method == PSWIRE__METHOD__STATS)) {
		return W_RUN;
	}
	if (w != 0) {
		uint64_t now = wall_ns();
		if (ctr < now && now - ctr > w) {
			return W_STALE;
		}
		if (ctr > now && ctr - now > w) {
			return W_FUTURE;
		}
	}
	return NULL;
}

int
psw_auth_check_request(struct psw_auth *a, const struct psw_frame *f,
    struct psw_ident *who, uint64_t *channel, uint64_t *counter,
    const char **why)
{
	const uint8_t *t;
	struct seen   *s;
	uint64_t       ch, ctr;
	int            rv = FB_OK;

	who->role = PSW_ROLE_NONE;
	who->id   = 0;
	*channel  = 0;
	*counter  = 0;
	if (a == NULL) {
		return FB_OK;
	}
	if (verify(a, f, who, why) != FB_OK) {
		atomic_fetch_add_explicit(&a->refused, 1,
		    memory_order_relaxed);
		return FB_EAUTH;
	}
	t   = f->trailer;
	ch  = fb_get_u64le(t + T_CHAN);
	ctr = fb_get_u64le(t + T_CTR);
	if ((*why = bound(a, f, t)) != NULL) {
		atomic_fetch_add_explicit(&a->refused, 1,
		    memory_order_relaxed);
		return FB_EAUTH;
	}
	pthread_mutex_lock(&a->mu);
	a->tick++;
	if ((s = find(a, *who, ch, 0)) == NULL) {
		struct seen *fl = find(a, *who, 0, 1);
		if (fl != NULL && ctr <= fl->last) {
			*why = W_FLOOR;
			rv   = FB_EAUTH;
		} else if ((s = add_entry(a, *who, ch, 0)) == NULL) {
			*why = W_NOMEM;
			rv   = FB_EAUTH;
		}
	} else if (ctr <= s->last) {
		*why = W_REPLAY;
		rv   = FB_EAUTH;
	}
	if (rv == FB_OK && a->hook != NULL &&
	    a->hook(a->hook_arg, *who, ctr) != 0) {
		// Not on disk: taking it would let a restart take it again.
		*why = W_RECORD;
		rv   = FB_EAUTH;
	}
	if (rv == FB_OK) {
		s->last = ctr;
		s->used = a->tick;
	}
	pthread_mutex_unlock(&a->mu);
	if (rv != FB_OK) {
		atomic_fetch_add_explicit(&a->refused, 1,
		    memory_order_relaxed);
		return rv;
	}
	*channel = ch;
	*counter = ctr;
	return FB_OK;
}

int
psw_auth_check_reply(struct psw_auth *a, const struct psw_frame *f,
    uint64_t reply_to, int want_role, const char **why)
{
	struct psw_ident who;

	if (a == NULL) {
		return FB_OK;
	}
	if (verify(a, f, &who, why) != FB_OK) {
		atomic_fetch_add_explicit(&a->refused, 1,
		    memory_order_relaxed);
		return FB_EAUTH;
	}
	if (fb_get_u64le(f->trailer + T_REPLY) != reply_to || reply_to == 0) {
		*why = "reply does not answer this request (replayed)";
	} else if (who.role != want_role &&
	    !((f->method == PSWIRE__METHOD__SNAPSHOT ||
	          f->method == PSWIRE__METHOD__STATS) &&
	        who.role == PSW_ROLE_SCHEDULER)) {
		// (The scheduler answers an operator's Snapshot of the job,
		// and Stats: psw_call's way to learn the run.)
		*why = "reply signed by a member of the wrong role";
	} else {
		uint64_t run = fb_get_u64le(f->trailer + T_RUN);
		if (who.role == PSW_ROLE_SCHEDULER && run != 0) {
			// The job run, from the scheduler's answer to the
			// request we just signed: sign with it from now on.
			atomic_store(&a->run, run);
		}
		return FB_OK;
	}
	atomic_fetch_add_explicit(&a->refused, 1, memory_order_relaxed);
	return FB_EAUTH;
}
