// test_http.c — the HTTP endpoints (http.c) over a real socket: each
// path's status, type and body, readiness turning, address parsing.
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obs/obs.h"
#include "obs_tests.h"
#include "pt.h"
#include "scrape.h"

struct owner {
	atomic_int ready;
};

static int
owner_ready(void *arg, char *why, size_t n)
{
	struct owner *o = arg;
	if (!atomic_load(&o->ready)) {
		snprintf(why, n, "waiting for the test");
		return 0;
	}
	return 1;
}

static void
owner_state(void *arg, struct obs_writer *w)
{
	struct owner *o = arg;
	obs_writer_printf(w, "{\"ready\":%s,\"map_epoch\":3,\"s\":",
	    atomic_load(&o->ready) ? "true" : "false");
	obs_write_json_string(w, "quote\" and \\ and \n");
	obs_writer_printf(w, "}");
}

// Every endpoint answers as documented; /readyz follows the owner.
START_TEST(test_http_endpoints)
{
	struct obs_registry *r;
	struct obs_metric   *c;
	struct obs_http     *h;
	struct owner         own = { 0 };
	struct obs_http_opts o   = { 0 };
	char                *body, why[256];
	int                  st;
	double               v;

	PT_OK(obs_registry_alloc(&r));
	PT_OK(obs_metric_add(r, OBS_COUNTER, "ferry_t_total", "T.", NULL, NULL,
	    0, 0, &c));
	PT_OK(obs_process_register(r));
	o.listen = "127.0.0.1:0";
	o.reg    = r;
	o.ready  = owner_ready;
	o.state  = owner_state;
	o.arg    = &own;
	PT_OK(obs_http_open(&o, &h));
	ck_assert_int_eq(strncmp(obs_http_url(h), "http://127.0.0.1:", 17), 0);
	ck_assert_str_ne(obs_http_url(h), "http://127.0.0.1:0");

	obs_counter_add(c, 41);
	ck_assert_int_eq(pt_http_get(obs_http_url(h), "/metrics", &st, &body),
	    0);
	ck_assert_int_eq(st, 200);
	ck_assert_msg(pt_prom_check(body, why, sizeof(why)) > 0, "%s", why);
	ck_assert_int_eq(pt_prom_value(body, "ferry_t_total", NULL, &v), 0);
	ck_assert(v == 41);
	free(body);

	ck_assert_int_eq(pt_http_get(obs_http_url(h), "/healthz", &st, &body),
	    0);
	ck_assert_int_eq(st, 200);
	free(body);

	ck_assert_int_eq(pt_http_get(obs_http_url(h), "/readyz", &st, &body),
	    0);
	ck_assert_int_eq(st, 503);
	ck_assert_ptr_nonnull(strstr(body, "waiting for the test"));
	free(body);
	atomic_store(&own.ready, 1);
	ck_assert_int_eq(pt_http_get(obs_http_url(h), "/readyz", &st, &body),
	    0);
	ck_assert_int_eq(st, 200);
	free(body);

	ck_assert_int_eq(
	    pt_http_get(obs_http_url(h), "/debug/state", &st, &body), 0);
	ck_assert_int_eq(st, 200);
	ck_assert_msg(pt_json_check(body, why, sizeof(why)) == 0, "%s: %s",
	    why, body);
	ck_assert_ptr_nonnull(strstr(body, "\"map_epoch\":3"));
	free(body);

	ck_assert_int_eq(pt_http_get(obs_http_url(h), "/nope", &st, &body), 0);
	ck_assert_int_eq(st, 404);
	free(body);
	obs_http_close(h);
	obs_http_close(NULL);
	obs_registry_free(r);
}
END_TEST

// Two endpoint sets in one process get two ports (the in-process tests
// run several roles).
START_TEST(test_http_two_servers)
{
	struct obs_registry *r;
	struct obs_http     *a, *b;
	struct obs_http_opts o = { 0 };
	PT_OK(obs_registry_alloc(&r));
	o.listen = "http://127.0.0.1:0";
	o.reg    = r;
	PT_OK(obs_http_open(&o, &a));
	PT_OK(obs_http_open(&o, &b));
	ck_assert_str_ne(obs_http_url(a), obs_http_url(b));
	obs_http_close(a);
	obs_http_close(b);
	obs_registry_free(r);
}
END_TEST

// Address spellings: accepted ones become an http:// URL, others are
// refused with a reason naming the value.
START_TEST(test_http_url_parse)
{
	char url[128], why[128];
	PT_OK(obs_http_url_parse("127.0.0.1:9100", url, sizeof(url), why,
	    sizeof(why)));
	ck_assert_str_eq(url, "http://127.0.0.1:9100");
	PT_OK(obs_http_url_parse(":0", url, sizeof(url), why, sizeof(why)));
	ck_assert_str_eq(url, "http://0.0.0.0:0");
	PT_OK(obs_http_url_parse("http://localhost:80", url, sizeof(url), why,
	    sizeof(why)));
	ck_assert_str_eq(url, "http://localhost:80");
}
END_TEST

START_TEST(test_http_url_parse_bogus)
{
	char        url[128], why[128];
	const char *bad[] = { "", "9100", "host:", "host:99999", "host:12x",
		"tcp://h:1", "https://h:1" };
	struct obs_http     *h;
	struct obs_http_opts o = { 0 };
	struct obs_registry *r;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		PT_FAIL(obs_http_url_parse(bad[i], url, sizeof(url), why,
		            sizeof(why)),
		    FB_EINVAL);
		ck_assert_msg(*bad[i] == '\0' || strstr(why, bad[i]) != NULL,
		    "reason '%s' does not name '%s'", why, bad[i]);
	}
	PT_OK(obs_registry_alloc(&r));
	o.listen = "nohost";
	o.reg    = r;
	PT_FAIL(obs_http_open(&o, &h), FB_EINVAL);
	o.listen = "127.0.0.1:0";
	o.reg    = NULL;
	PT_FAIL(obs_http_open(&o, &h), FB_EINVAL);
	obs_registry_free(r);
}
END_TEST

// The URL file holds the URL and a newline once written; a directory
// that does not exist is an error naming errno, not a crash.
START_TEST(test_http_url_file_write)
{
	char  path[] = "/tmp/ferry-obs-XXXXXX", file[64], line[64];
	FILE *f;
	ck_assert_ptr_nonnull(mkdtemp(path));
	snprintf(file, sizeof(file), "%s/u", path);
	PT_OK(obs_url_file_write(file, "http://127.0.0.1:1"));
	ck_assert_ptr_nonnull(f = fopen(file, "r"));
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
	fclose(f);
	ck_assert_str_eq(line, "http://127.0.0.1:1\n");
	remove(file);
	rmdir(path);
	ck_assert_int_ne(obs_url_file_write("/nonexistent/dir/u", "x"), FB_OK);
}
END_TEST

Suite *
suite_http(void)
{
	Suite *s  = suite_create("http");
	TCase *tc = tcase_create("http");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_http_endpoints);
	tcase_add_test(tc, test_http_two_servers);
	tcase_add_test(tc, test_http_url_parse);
	tcase_add_test(tc, test_http_url_parse_bogus);
	tcase_add_test(tc, test_http_url_file_write);
	suite_add_tcase(s, tc);
	return s;
}
