// cluster.c — see cluster.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "pt.h"

void
cluster_open(struct cluster *cl, int trainers, int servers, int placement)
{
	cluster_open_replicas(cl, trainers, servers, placement, 1, 0);
}

void
cluster_open_replicas(struct cluster *cl, int trainers, int servers,
    int placement, uint32_t replicas, uint32_t dead_after_ms)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	char                     url[64];
	so.replicas = replicas;
	if (dead_after_ms > 0) {
		so.dead_after_ms = dead_after_ms;
	}
	so.placement   = placement;
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = trainers;
	so.servers     = servers;
	so.shard_bytes = 64;
	so.probe_bytes = 64 << 10; // below the servers' 1 MiB receive cap
	PT_OK(ps_scheduler_open(&so, &cl->sched));
	cl->n_srv = servers;
	for (int i = 0; i < servers; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		char                  surl[64];
		o.url           = pt_addr(surl, sizeof(surl), "tcp");
		o.scheduler_url = ps_scheduler_url(cl->sched);
		o.max_msg       = 1u << 20; // small cap: the oversize test
		if (dead_after_ms > 0) {
			o.heartbeat_ms = dead_after_ms / 5;
		}
		PT_OK(ps_server_open(&o, &cl->srv[i]));
	}
}

void
cluster_stop(struct cluster *cl)
{
	for (int i = 0; i < cl->n_srv; i++) {
		ps_server_close(cl->srv[i]);
	}
	ps_scheduler_close(cl->sched);
}

void
one_server_open(struct one_server *j, int trainers, uint32_t shard_bytes,
    int contexts)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	char                     url[64], surl[64];
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = trainers;
	so.servers     = 1;
	so.shard_bytes = shard_bytes > 0 ? shard_bytes : 64;
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &j->sched));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(j->sched);
	if (contexts > 0) {
		o.contexts = contexts;
	}
	PT_OK(ps_server_open(&o, &j->srv));
}

void
one_server_close(struct one_server *j)
{
	ps_server_close(j->srv);
	ps_scheduler_close(j->sched);
}

unsigned long long
server_stat(struct ps_server *s, const char *key)
{
	char        text[4096], want[64];
	const char *p;
	ps_server_stats(s, text, sizeof(text));
	snprintf(want, sizeof(want), "\n%s:", key);
	p = strstr(text, want);
	ck_assert_msg(p != NULL, "no %s in stats", key);
	return strtoull(p + strlen(want), NULL, 10);
}
