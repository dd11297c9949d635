// auth.c — signed frames: the per-job key, the trailer every request and
// reply carries with --secret-file, and the replay table that refuses a
// request seen before or out of order.
//
// DESIGN. The trailer (PSW_AUTH_TRAILER = 64 bytes, little-endian) is
//   role u8 | 0 u8[3] | id u32 | nonce u32 | 0 u32 | channel u64 |
//   counter u64 | reply_to u64 | 0 u64 | tag[16]
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
// GMAC must never see one IV twice under the key: the IV is (role, id,
// nonce, counter), nonce random per process and the counter unique within
// it, so two messages share one only if two processes of one member drew
// the same 32-bit nonce and reached the same counter. One key per job, so
// any key holder can sign as any member: the identity is a claim that the
// role checks rely on against members' mistakes, and against outsiders
// (who have no key) the MAC refuses everything. Mutual TLS is the mode
// where identities cannot be forged.
//
// Counters come from one per-process atomic that starts at the wall clock
// in nanoseconds, so a member that restarts continues above its old
// counters. A receiver keeps, per (sender identity, channel), the last
// counter it accepted and refuses anything not above it: a replay or a
// reordering. Channels name a sender's sockets (psw_auth_channel), since
// requests on two sockets may overtake each other. The table keeps at most
// CHANNELS_PER_SENDER channels per identity; evicting one raises that
// identity's floor to its last counter, under which every counter of an
// unknown channel is refused, so an evicted channel cannot be replayed.
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
#include "psw/psw.h"

#define MAC_LEN 16u
#define KEY_BYTES 32u
// Trailer field offsets.
#define T_ID 4u
#define T_NONCE 8u
#define T_CHAN 16u
#define T_CTR 24u
#define T_REPLY 32u
#define T_TAG 48u
#define IV_LEN 24u
_Static_assert(T_TAG + MAC_LEN == PSW_AUTH_TRAILER, "trailer layout");
#define KEY_MIN 16u
#define KEY_MAX 4096u
#define CHANNELS_PER_SENDER 16u

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
	uint32_t         nonce; // per process: channels of a restart differ
	_Atomic uint64_t refused;
	pthread_mutex_t  mu; // guards seen, n_seen, cap_seen, tick
	struct seen     *seen;
	size_t           n_seen, cap_seen;
	uint64_t         tick;
};

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

// ---- the key and the identity ----------------------------------------------

int
psw_auth_open(const char *secret_file, int role, uint32_t id,
    struct psw_auth **out, char *why, size_t n)
{
	struct psw_auth *a;
	FILE            *fp;
	size_t           len;
	struct timespec  ts;

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
	clock_gettime(CLOCK_REALTIME, &ts);
	atomic_init(&a->counter,
	    (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec);
	gcry_create_nonce(&a->nonce, sizeof(a->nonce));
	psw_auth_set_self(a, role, id);
	pthread_mutex_init(&a->mu, NULL);
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

int
psw_auth_sign(struct psw_auth *a, nng_msg *m, uint64_t channel,
    uint64_t reply_to, uint64_t *counter)
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
	ctr  = atomic_fetch_add(&a->counter, 1);
	memset(t, 0, sizeof(t));
	t[0] = (uint8_t) (self >> 32);
	fb_put_u32le(t + T_ID, (uint32_t) self);
	fb_put_u32le(t + T_NONCE, a->nonce);
	fb_put_u64le(t + T_CHAN, channel);
	fb_put_u64le(t + T_CTR, ctr);
	fb_put_u64le(t + T_REPLY, reply_to);
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
		*why =
		    "message is not signed (this job requires --secret-file)";
		return FB_EAUTH;
	}
	if (mac(a, start, (size_t) (t - start) + T_TAG, tag) != FB_OK) {
		*why = "out of memory checking the signature";
		return FB_EAUTH;
	}
	for (size_t i = 0; i < MAC_LEN; i++) {
		diff |= tag[i] ^ t[T_TAG + i];
	}
	if (diff != 0) {
		*why = "bad signature (wrong --secret-file, or altered)";
		return FB_EAUTH;
	}
	if (t[0] < PSW_ROLE_TRAINER || t[0] > PSW_ROLE_OPERATOR) {
		*why = "signed with an unknown role";
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
	if (fb_get_u64le(t + T_REPLY) != 0 || (f->flags & PSW_FLAG_REPLY)) {
		*why = "a signed reply was sent as a request";
		atomic_fetch_add_explicit(&a->refused, 1,
		    memory_order_relaxed);
		return FB_EAUTH;
	}
	pthread_mutex_lock(&a->mu);
	a->tick++;
	if ((s = find(a, *who, ch, 0)) == NULL) {
		struct seen *fl = find(a, *who, 0, 1);
		if (fl != NULL && ctr <= fl->last) {
			*why = "replayed request (counter below the sender's "
			       "floor)";
			rv   = FB_EAUTH;
		} else if ((s = add_entry(a, *who, ch, 0)) == NULL) {
			*why = "out of memory recording the sender";
			rv   = FB_EAUTH;
		}
	} else if (ctr <= s->last) {
		*why = "replayed or reordered request (counter not above the "
		       "last one accepted)";
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
	    !(f->method == PSWIRE__METHOD__SNAPSHOT &&
	        who.role == PSW_ROLE_SCHEDULER)) {
		// (The scheduler answers an operator's Snapshot of the job.)
		*why = "reply signed by a member of the wrong role";
	} else {
		return FB_OK;
	}
	atomic_fetch_add_explicit(&a->refused, 1, memory_order_relaxed);
	return FB_EAUTH;
}
