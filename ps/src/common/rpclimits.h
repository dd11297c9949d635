// rpclimits.h — the running counts behind rpc.h's LIMITS (rpclimits.c):
// calls and bytes held per connection, calls per host and per member, and
// bytes over all, each updated when a context takes or releases a call, so
// that checking a request costs the same with 10 contexts as with 10,000;
// and the host and member each connection's peer is, found once per
// connection rather than once per request.
#ifndef PS_RPCLIMITS_H
#define PS_RPCLIMITS_H

#include <stddef.h>
#include <stdint.h>

struct ps_call;
struct ps_lim;

// What a refused take saw (the refusal message names it).
enum ps_lim_over {
	PS_LIM_OK,
	PS_LIM_CONN_CALLS,   // the connection's calls
	PS_LIM_MEMBER_CALLS, // the member's calls over its connections
	PS_LIM_HOST_CALLS,   // the host's calls over its connections
	PS_LIM_CONN_BYTES,   // the connection's bytes
	PS_LIM_TOTAL_BYTES,  // every call's bytes
};

// The caps a take is held to (rpc.h LIMITS); all_bytes 0: none.
struct ps_lim_caps {
	int    conn_calls, host_calls;
	size_t conn_bytes, all_bytes;
};

// The counts a take saw, excluding its own call.
struct ps_lim_seen {
	int    calls; // the connection's, the member's or the host's
	size_t bytes; // the connection's
	size_t total; // every call's
};

// ps__lim_open makes the counts for up to ncontexts contexts. Errors:
// FB_ENOMEM.
int ps__lim_open(int ncontexts, struct ps_lim **out);

// ps__lim_grow makes room for ncontexts contexts (never less), before
// they start; takes and releases may run meanwhile. Errors: FB_ENOMEM
// (the old room stays).
int ps__lim_grow(struct ps_lim *l, int ncontexts);

// ps__lim_close frees l (NULL: no-op) once no call uses it.
void ps__lim_close(struct ps_lim *l);

// ps__lim_peer returns 1 and sets *host and *member (rpc.c's keys) when
// connection pipe's are known, else 0; ps__lim_peer_put records them.
// Any thread.
int  ps__lim_peer(struct ps_lim *l, uint32_t pipe, uint64_t *host,
     uint64_t *member);
void ps__lim_peer_put(struct ps_lim *l, uint32_t pipe, uint64_t host,
    uint64_t member);

// ps__lim_take makes c hold mine bytes for connection pipe, host and
// member (0: none) when none of caps would be exceeded (PS_LIM_OK), else
// leaves c as it was and returns the limit, with what it saw in *seen.
// c holds nothing before (rpc.c releases every call before it receives).
enum ps_lim_over ps__lim_take(struct ps_lim *l, struct ps_call *c,
    uint32_t pipe, uint64_t host, uint64_t member, size_t mine,
    const struct ps_lim_caps *caps, struct ps_lim_seen *seen);

// ps__lim_resize makes c hold held bytes instead (its answer in place of
// its request), for its connection if it holds one, else over all only.
void ps__lim_resize(struct ps_lim *l, struct ps_call *c, size_t held);

// ps__lim_release ends everything c holds.
void ps__lim_release(struct ps_lim *l, struct ps_call *c);

// ps__lim_conn_bytes returns the bytes the calls of connection pipe hold.
size_t ps__lim_conn_bytes(struct ps_lim *l, uint32_t pipe);

#endif // PS_RPCLIMITS_H
