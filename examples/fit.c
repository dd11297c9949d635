// fit.c: learn w in y = 3x on a Ferry job.  usage: fit SCHEDULER_URL RANK
#include <ferry/ferry.h>
#include <stdio.h>
#include <stdlib.h>

int
main(int argc, char **argv)
{
	struct ferry_opts        o = FERRY_OPTS_INIT;
	// One tensor of 1 float, trained by the servers' optimizer.
	struct ferry_tensor_desc t = { "w", 1, FERRY_TENSOR_WEIGHTS };
	ferry_client            *c = NULL;
	float                    w = 0, g, *wp = &w;
	const float             *gp = &g, *w0 = &w;
	char                     why[128];

	o.scheduler_url = argc > 1 ? argv[1] : "tcp://127.0.0.1:7000";
	o.rank          = argc > 2 ? atoi(argv[2]) : 0;
	o.lr            = 0.5; // the servers apply w -= lr * sum(g) / samples
	if (ferry_opts_check(&o, why, sizeof(why)) != FERRY_OK) {
		fprintf(stderr, "fit: %s\n", why); // e.g. an unknown codec
		return 2;
	}
	if (ferry_client_open(&o, &c) != FERRY_OK || // connects nothing yet
	    ferry_client_declare(c, &t, 1) != FERRY_OK || // waits for the job
	    (o.rank == 0 && ferry_client_init_weights(c, &w0) != FERRY_OK) ||
	    ferry_client_pull(c, &wp) != FERRY_OK) // version 0
		goto fail;
	for (int step = 0; step < 50; step++) {
		g = 0; // gradient of (w x - 3x)^2, SUMMED over 8 samples
		for (int i = 1; i <= 8; i++)
			g += 2 * (w - 3) * (i / 8.0f) * (i / 8.0f);
		if (ferry_client_push_pull(c, &gp, 8, &wp) != FERRY_OK)
			goto fail;
	}
	printf("rank %d: w = %.4f\n", o.rank, w);
	ferry_client_close(c);
	return 0;
fail:
	fprintf(stderr, "ferry: %s\n", ferry_client_last_error(c));
	ferry_client_close(c);
	return 1;
}
