// fake.h — a client with a placement map and no job, for the unit suites:
// opened on an address nobody listens on (dials do not block), with the
// map, the per-shard state and one idle connection per server set up by
// hand, as ferry_client_declare would after the scheduler answered.
#ifndef CLIENTS_FAKE_H
#define CLIENTS_FAKE_H

#include "client_impl.h"

// An address that refuses connections: dials fail in the background.
#define FAKE_URL "tcp://127.0.0.1:1"

// One shard of a fake map.
struct fake_shard {
	uint32_t tensor;
	uint64_t offset, len;
	uint32_t server;
};

// fake_map packs and unpacks a map of n_servers servers (all FAKE_URL) and
// the given shards over n_tensors tensors, so that the result is owned as
// a reply's map is (free with pswire__placement__free_unpacked).
Pswire__Placement *fake_map(size_t n_tensors, size_t n_servers,
    const struct fake_shard *sh, size_t n_shards, uint64_t epoch);

// fake_client opens a client (rank 3, the given codecs; NULL: "none") on
// FAKE_URL, declares tensors of the given lengths without a scheduler and
// gives it the map fake_map builds, its connections and zeroed per-shard
// state (with a pull codec, zeroed references too). Release it with
// ferry_client_close. Asserts on any failure.
ferry_client *fake_client(const char *push, const char *pull,
    const uint64_t *tensor_len, size_t n_tensors, size_t n_servers,
    const struct fake_shard *sh, size_t n_shards);

#endif // CLIENTS_FAKE_H
