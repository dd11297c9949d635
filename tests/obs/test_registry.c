// test_registry.c — the registry (registry.c) and the text writers
// (text.c): values, the text format, escaping, hidden zeros, bad input.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "obs/obs.h"
#include "obs_tests.h"
#include "pt.h"
#include "scrape.h"

// write_all renders r into a malloc'd string and checks it parses.
static char *
write_all(struct obs_registry *r)
{
	struct obs_writer w = OBS_WRITER_INIT;
	char              why[256];
	char             *s;
	PT_OK(obs_registry_write(r, &w));
	ck_assert_ptr_nonnull(w.buf);
	ck_assert_msg(pt_prom_check(w.buf, why, sizeof(why)) >= 0, "%s\n%s",
	    why, w.buf);
	s = strdup(w.buf);
	obs_writer_fini(&w);
	return s;
}

// Counters, gauges and histograms keep what was added and print it in
// the text format (a failure: wrong arithmetic or format).
START_TEST(test_registry_values)
{
	struct obs_registry *r;
	struct obs_metric   *c, *g, *h;
	double               v;
	char                *t;
	PT_OK(obs_registry_alloc(&r));
	PT_OK(obs_metric_add(r, OBS_COUNTER, "ferry_x_total", "X.",
	    "method=\"Push\"", NULL, 0, 0, &c));
	PT_OK(obs_metric_add(r, OBS_GAUGE, "ferry_g", "G.", NULL, NULL, 0, 0,
	    &g));
	PT_OK(obs_metric_add(r, OBS_HISTOGRAM, "ferry_h_seconds", "H.", NULL,
	    obs_latency_buckets, obs_latency_nbuckets, 0, &h));
	obs_counter_add(c, 5);
	obs_counter_add(c, 2);
	obs_gauge_set(g, 1.5);
	obs_gauge_add(g, -4);
	obs_histogram_observe(h, 0.003);
	obs_histogram_observe(h, 0.003);
	obs_histogram_observe(h, 100); // beyond every bound: +Inf only
	ck_assert(obs_metric_value(c) == 7);
	ck_assert(obs_metric_value(g) == -2.5);
	ck_assert(obs_metric_value(h) == 3);
	t = write_all(r);
	ck_assert_int_eq(
	    pt_prom_value(t, "ferry_x_total", "method=\"Push\"", &v), 0);
	ck_assert(v == 7);
	ck_assert_int_eq(pt_prom_value(t, "ferry_g", NULL, &v), 0);
	ck_assert(v == -2.5);
	ck_assert_int_eq(
	    pt_prom_value(t, "ferry_h_seconds_bucket", "le=\"0.0025\"", &v),
	    0);
	ck_assert(v == 0);
	ck_assert_int_eq(
	    pt_prom_value(t, "ferry_h_seconds_bucket", "le=\"0.005\"", &v), 0);
	ck_assert(v == 2);
	ck_assert_int_eq(
	    pt_prom_value(t, "ferry_h_seconds_bucket", "le=\"60\"", &v), 0);
	ck_assert(v == 2);
	ck_assert_int_eq(
	    pt_prom_value(t, "ferry_h_seconds_bucket", "le=\"+Inf\"", &v), 0);
	ck_assert(v == 3);
	ck_assert_int_eq(pt_prom_value(t, "ferry_h_seconds_sum", NULL, &v), 0);
	ck_assert(fabs(v - 100.006) < 1e-9);
	free(t);
	obs_registry_free(r);
}
END_TEST

// Series of one family share one HELP/TYPE; hidden zeros stay out until
// they count; label values and help text are escaped.
START_TEST(test_registry_families_and_escapes)
{
	struct obs_registry *r;
	struct obs_metric   *a, *b;
	struct obs_writer    w = OBS_WRITER_INIT;
	char                *t;
	double               v;
	PT_OK(obs_registry_alloc(&r));
	PT_OK(obs_metric_add(r, OBS_COUNTER, "ferry_e_total",
	    "Back\\slash\nnewline.", "s=\"A\"", NULL, 0, OBS_HIDE_ZERO, &a));
	PT_OK(obs_metric_add(r, OBS_COUNTER, "ferry_e_total", NULL, "s=\"B\"",
	    NULL, 0, OBS_HIDE_ZERO, &b));
	t = write_all(r);
	ck_assert(pt_prom_has_family(t, "ferry_e_total"));
	ck_assert_int_eq(pt_prom_value(t, "ferry_e_total", NULL, &v), -1);
	ck_assert_ptr_nonnull(strstr(t, "Back\\\\slash\\nnewline."));
	free(t);
	obs_counter_add(b, 1);
	t = write_all(r);
	ck_assert_int_eq(pt_prom_value(t, "ferry_e_total", "s=\"B\"", &v), 0);
	ck_assert_int_eq(pt_prom_value(t, "ferry_e_total", "s=\"A\"", &v), -1);
	free(t);
	obs_write_label_value(&w, "a\"b\\c\nd");
	ck_assert_str_eq(w.buf, "a\\\"b\\\\c\\nd");
	obs_writer_fini(&w);
	obs_write_json_string(&w, "q\"\\\x01");
	ck_assert_str_eq(w.buf, "\"q\\\"\\\\\\u0001\"");
	obs_writer_fini(&w);
	obs_registry_free(r);
}
END_TEST

// Bad names, label lists, bucket lists and type clashes are refused.
START_TEST(test_registry_add_bogus)
{
	struct obs_registry *r;
	struct obs_metric   *m;
	double               desc[] = { 2, 1 };
	char                 longl[400];
	memset(longl, 'a', sizeof(longl) - 1);
	longl[sizeof(longl) - 1] = '\0';
	PT_OK(obs_registry_alloc(&r));
	PT_FAIL(
	    obs_metric_add(r, OBS_COUNTER, "9bad", "", NULL, NULL, 0, 0, &m),
	    FB_EINVAL);
	PT_FAIL(obs_metric_add(r, OBS_COUNTER, "bad-name", "", NULL, NULL, 0,
	            0, &m),
	    FB_EINVAL);
	PT_FAIL(
	    obs_metric_add(r, OBS_COUNTER, "ok", "", longl, NULL, 0, 0, &m),
	    FB_EINVAL);
	PT_FAIL(
	    obs_metric_add(r, OBS_HISTOGRAM, "h", "", NULL, desc, 2, 0, &m),
	    FB_EINVAL);
	PT_FAIL(
	    obs_metric_add(r, OBS_HISTOGRAM, "h", "", NULL, NULL, 0, 0, &m),
	    FB_EINVAL);
	PT_OK(obs_metric_add(r, OBS_GAUGE, "same", "", NULL, NULL, 0, 0, &m));
	PT_FAIL(
	    obs_metric_add(r, OBS_COUNTER, "same", "", NULL, NULL, 0, 0, &m),
	    FB_EINVAL);
	obs_registry_free(r);
	obs_registry_free(NULL);
}
END_TEST

// Out of memory while registering fails cleanly (no leak under ASan).
START_TEST(test_registry_enomem)
{
	struct obs_registry *r;
	struct obs_metric   *m;
	PT_OK(obs_registry_alloc(&r));
	fb_alloc_fail_after(0);
	PT_FAIL(obs_metric_add(r, OBS_COUNTER, "ferry_a_total", "", NULL, NULL,
	            0, 0, &m),
	    FB_ENOMEM);
	fb_alloc_fail_after(-1);
	obs_registry_free(r);
}
END_TEST

static void
collect_two(void *arg, struct obs_writer *w)
{
	(void) arg;
	obs_write_family(w, "ferry_c", "Collected.", OBS_GAUGE);
	obs_write_sample(w, "ferry_c", "k=\"1\"", 1);
	obs_write_sample(w, "ferry_c", "k=\"2\"", NAN);
}

// Collectors write after the series and pass the format checker.
START_TEST(test_registry_collector)
{
	struct obs_registry *r;
	char                *t;
	double               v;
	PT_OK(obs_registry_alloc(&r));
	PT_OK(obs_collector_add(r, collect_two, NULL));
	PT_OK(obs_process_register(r));
	t = write_all(r);
	ck_assert_int_eq(pt_prom_value(t, "ferry_c", "k=\"1\"", &v), 0);
	ck_assert(v == 1);
	ck_assert_ptr_nonnull(strstr(t, "ferry_c{k=\"2\"} NaN\n"));
	ck_assert_int_eq(
	    pt_prom_value(t, "ferry_process_resident_memory_bytes", NULL, &v),
	    0);
	ck_assert(v > 0);
	ck_assert_int_eq(
	    pt_prom_value(t, "ferry_process_cpu_seconds_total", NULL, &v), 0);
	ck_assert(v >= 0);
	free(t);
	obs_registry_free(r);
}
END_TEST

// The checker itself rejects what the format forbids (a checker that
// accepts everything would make the other tests pass vacuously).
START_TEST(test_registry_checker_rejects)
{
	char        why[256];
	const char *bad[] = {
		"ferry_x 1\n", // no TYPE
		"# TYPE ferry_x gauge\nferry_x{a=\"1} 1\n",
		"# TYPE ferry_x gauge\nferry_x one\n",
		"# TYPE ferry_x gauge\n# TYPE ferry_x gauge\nferry_x 1\n",
		"# TYPE ferry_h histogram\nferry_h_bucket{le=\"1\"} 2\n"
		"ferry_h_bucket{le=\"+Inf\"} 1\nferry_h_count 1\n",
		"# TYPE ferry_x counter\nferry_x -1\n",
		"# TYPE ferry_x gauge\nferry_x 1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(pt_prom_check(bad[i], why, sizeof(why)) < 0,
		    "accepted: %s", bad[i]);
	}
	ck_assert_int_eq(pt_json_check("{\"a\":[1,2.5e3,true,null,\"x\"]}",
	                     why, sizeof(why)),
	    0);
	ck_assert_int_eq(pt_json_check("{\"a\":1,}", why, sizeof(why)), -1);
	ck_assert_int_eq(pt_json_check("{\"a\":01}", why, sizeof(why)), -1);
}
END_TEST

Suite *
suite_registry(void)
{
	Suite *s  = suite_create("registry");
	TCase *tc = tcase_create("registry");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_registry_values);
	tcase_add_test(tc, test_registry_families_and_escapes);
	tcase_add_test(tc, test_registry_add_bogus);
	tcase_add_test(tc, test_registry_enomem);
	tcase_add_test(tc, test_registry_collector);
	tcase_add_test(tc, test_registry_checker_rejects);
	suite_add_tcase(s, tc);
	return s;
}
