// main.c — the `trainer` executable: parse the options (flags, FERRY_*,
// --config file), print them (--print-config) or run tr_train_run.
// Exit codes: 0 done, 1 training failed, 2 bad flags.
#include <stdio.h>

#include "fb/fb.h"
#include "tr/tr.h"

int
main(int argc, char **argv)
{
	struct tr_config cfg;
	char             err[512] = "";
	char             role[32];
	int              rv;
	tr_config_defaults(&cfg);
	if ((rv = tr_config_parse(&cfg, argc, argv, err, sizeof(err))) != 0) {
		fprintf(stderr, "trainer: %s\n", err);
		fprintf(stderr, "trainer: see --help\n");
		rv = 2;
		goto out;
	}
	if (cfg.help) {
		tr_config_usage(stdout);
		rv = 0;
		goto out;
	}
	if (cfg.print_config) {
		tr_config_print(&cfg, stdout);
		rv = 0;
		goto out;
	}
	if (cfg.fo.scheduler_url == NULL) {
		fprintf(stderr,
		    "trainer: --scheduler is required (see --help)\n");
		rv = 2;
		goto out;
	}
	if (cfg.verify) {
		snprintf(role, sizeof(role), "verifier");
	} else if (cfg.fo.rank == FERRY_RANK_ANY) {
		// The rank is the scheduler's to give; the log says which.
		snprintf(role, sizeof(role), "trainer-any");
	} else {
		snprintf(role, sizeof(role), "trainer-%d", cfg.fo.rank);
	}
	fb_log_set_role(role);
	rv = tr_train_run(&cfg, stdout) == FB_OK ? 0 : 1;
out:
	tr_config_fini(&cfg);
	return rv;
}
