// audit.h — spot checks on the server (audit.c, issue 31): what the
// rest of the role calls of them. The state (struct ps_audit) is
// audit.c's own; struct ps_server holds it as s->audit (NULL: spot checks
// off) beside the draw's rate and key from the scheduler's RegisterReply.
// Included by server_impl.h.
#ifndef PS_AUDIT_H
#define PS_AUDIT_H

#include <stdint.h>

struct ps_audit;
struct ps_call;
struct ps_server;
struct srv_shard;

// ps__audit_draw is the spot checks' keyed draw: a number in [0, 1) from
// key, rank and version alone (splitmix64's finaliser over key ^ rank << 40
// ^ version), the same on every server, so that the servers of a job keep
// the pushes of the same (rank, version). Pure.
double ps__audit_draw(uint64_t key, uint32_t rank, uint64_t version);

// ps__audit_open makes s->audit from s->audit_rate and s->audit_key once
// the first map is installed (s->stage_len: the largest shard): its
// records and their buffers (opts.audit_keep of them, 0: 64) are
// allocated here, never per round. Rate 0 (or not a number in (0, 1]):
// s->audit stays NULL, spot checks off. An audit already there is freed
// first. Errors: FB_ENOMEM (s->audit NULL then). mu held.
int ps__audit_open(struct ps_server *s);

// ps__audit_close frees s->audit (NULL: no-op) and sets it NULL. mu held
// (or the server no longer serving).
void ps__audit_close(struct ps_server *s);

// ps__audit_round keeps, for a verifier, the pushes of sync round
// sh->version of shard sh that the draw picks (ps__audit_draw <
// audit_rate: reason 1) or that outlier ([trainers], NULL: not scored)
// marks (reason 2): each with a copy of the weights the trainers pulled at
// that version (sh->x, or the pull reference with a pull codec) and of
// the push's fp32 values. Only claimed pushes (sh->claim[r] != 0) of a job
// whose pushes are fp32 (codec "none") are kept; other picked ones are
// counted as skipped, and those past the store's room as dropped. No-op
// when s->audit is NULL; no allocation. Called at the round's close,
// before its update. mu held.
void ps__audit_round(struct ps_server *s, struct srv_shard *sh,
    const uint8_t *outlier);

// ps__on_audit serves Audit: an operator (when requests are
// authenticated) collects up to AuditRequest.max kept pushes, oldest
// first, each handed out once. Called on an nng callback thread after
// the first map; takes mu.
void ps__on_audit(struct ps_server *s, struct ps_call *c);

// ps__audit_stats writes the "# Audit" stats section into buf (n bytes).
// mu held.
void ps__audit_stats(struct ps_server *s, char *buf, size_t n);

#endif // PS_AUDIT_H
