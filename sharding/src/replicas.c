// replicas.c — where a shard's backups live (--replicas R) and who takes
// over when its primary dies: pure decisions over server indices, no I/O.
//
// DESIGN. A backup must be on another server than its primary and than the
// other backups, or a single death could take two copies. The first map
// puts the backups of a shard on the live servers that follow its primary
// cyclically, which spreads the forwarding load as evenly as round-robin
// spreads the primaries. After a death the list changes as little as it
// can: the first live backup is promoted (it holds every acknowledged
// version), the survivors keep their order, and the list is only filled up
// at its end, so that only the new entries need a rebuild (a Transfer).
#include "shard_impl.h"

// holds reports whether server m is shard i's primary or one of its
// backups.
static int
holds(uint32_t primary, const uint32_t *b, uint32_t nb, uint32_t m)
{
	if (primary == m) {
		return 1;
	}
	for (uint32_t k = 0; k < nb; k++) {
		if (b[k] == m) {
			return 1;
		}
	}
	return 0;
}

int
shard_replicas_repair(size_t n_shards, uint32_t n_servers, const uint8_t *gone,
    uint32_t nb, uint32_t *assign, uint32_t *backups, size_t *lost)
{
	uint32_t live   = 0;
	size_t   n_lost = 0;
	if (gone == NULL || lost == NULL ||
	    (n_shards > 0 &&
	        (assign == NULL || (nb > 0 && backups == NULL)))) {
		return FB_EINVAL;
	}
	for (uint32_t m = 0; m < n_servers; m++) {
		live += !gone[m];
	}
	if (live == 0) {
		return FB_EINVAL;
	}
	uint32_t want = nb < live - 1 ? nb : live - 1;
	for (size_t i = 0; i < n_shards; i++) {
		uint32_t *b    = backups + i * nb;
		uint32_t  p    = assign[i];
		uint32_t  kept = 0;
		if (p >= n_servers || gone[p]) {
			uint32_t k = 0;
			while (k < nb && (b[k] >= n_servers || gone[b[k]])) {
				k++;
			}
			if (k == nb) {
				n_lost++;
				continue; // nothing holds it: left as it was
			}
			p = b[k];
		}
		// Survivors, in order, without the primary or duplicates.
		for (uint32_t k = 0; k < nb; k++) {
			uint32_t m = b[k];
			if (m < n_servers && !gone[m] && kept < want &&
			    !holds(p, b, kept, m)) {
				b[kept++] = m;
			}
		}
		// Fill up with the live servers after the primary.
		for (uint32_t d = 1; d < n_servers && kept < want; d++) {
			uint32_t m = (p + d) % n_servers;
			if (!gone[m] && !holds(p, b, kept, m)) {
				b[kept++] = m;
			}
		}
		for (uint32_t k = kept; k < nb; k++) {
			b[k] = SHARD_NO_SERVER;
		}
		assign[i] = p;
	}
	*lost = n_lost;
	return FB_OK;
}
