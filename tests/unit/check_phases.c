/* check_phases.c: phase timing: off is NULL, the environment, nested
 * phases on the clock, the sync hook, and the JSON every 64 rounds. */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/file.h"
#include "compute/phases.h"

static int syncs;

static tf_status count_sync(void *ctx)
{
	(void)ctx;
	syncs++;
	return TF_OK;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, NULL);
}

START_TEST(off_and_env)
{
	struct tf_phases *p = (void *)1;
	unsetenv("TF_PHASES");
	ck_assert_int_eq(tf_phases_from_env(&p), TF_OK);
	ck_assert_ptr_null(p);
	/* every call takes NULL */
	ck_assert_int_eq(tf_phases_id(p, "x"), -1);
	tf_phase_begin(p, 0);
	tf_phase_end(p, 0);
	ck_assert_int_eq(tf_phases_round(p, 1), TF_OK);
	ck_assert_ptr_null(tf_phases_json(p));
	tf_phases_free(p);
	setenv("TF_PHASES", "0", 1);
	ck_assert_int_eq(tf_phases_from_env(&p), TF_OK);
	ck_assert_ptr_null(p);
	setenv("TF_PHASES", "yes", 1);
	ck_assert_int_eq(tf_phases_from_env(&p), TF_ERR_CONFIG);
	setenv("TF_PHASES", "sync", 1);
	ck_assert_int_eq(tf_phases_from_env(&p), TF_OK);
	ck_assert_ptr_nonnull(p);
	tf_phases_set_sync(p, count_sync, NULL);
	int a = tf_phases_id(p, "attn");
	syncs = 0;
	tf_phase_begin(p, a);
	tf_phase_end(p, a);
	ck_assert_int_eq(syncs, 2); /* both ends wait for the device */
	tf_phases_free(p);
}
END_TEST

START_TEST(totals_every_64_rounds)
{
	char path[] = "/tmp/tf-phases-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	unlink(path);
	struct tf_phases *p;
	ck_assert_int_eq(tf_phases_new(TF_PHASES_HOST, path, &p), TF_OK);
	int round = tf_phases_id(p, "round"), head = tf_phases_id(p, "head");
	ck_assert_int_eq(tf_phases_id(p, "head"), head);
	syncs = 0;
	tf_phases_set_sync(p, count_sync, NULL); /* host mode never waits */
	for (int r = 0; r < 63; r++) {
		tf_phase_begin(p, round);
		if (r % 2 == 0) {
			tf_phase_begin(p, head);
			if (r < 4)
				sleep_ms(5);
			tf_phase_end(p, head);
		}
		tf_phase_end(p, round);
		ck_assert_int_eq(tf_phases_round(p, 3), TF_OK);
	}
	ck_assert_int_eq(access(path, F_OK), -1); /* not yet */
	ck_assert_int_eq(tf_phases_round(p, 3), TF_OK);
	ck_assert_int_eq(syncs, 0);
	char *text;
	size_t len;
	ck_assert_int_eq(tf_file_read_all(path, 1 << 20, &text, &len), TF_OK);
	json_error_t err;
	json_t *j = json_loads(text, 0, &err);
	ck_assert_msg(j != NULL, "%s: %s", text, err.text);
	ck_assert_str_eq(json_string_value(json_object_get(j, "mode")), "host");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "rounds")), 64);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "tokens")), 192);
	json_t *ph = json_object_get(j, "phases");
	json_t *h = json_object_get(ph, "head"), *r = json_object_get(ph, "round");
	ck_assert_int_eq(json_integer_value(json_object_get(h, "n")), 32);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "n")), 63);
	double hms = json_number_value(json_object_get(h, "ms"));
	double rms = json_number_value(json_object_get(r, "ms"));
	ck_assert(hms >= 10 && rms >= hms); /* two 5 ms sleeps, nested inside round */
	ck_assert(json_number_value(json_object_get(j, "wall_ms")) >= rms);
	ck_assert(json_number_value(json_object_get(h, "ms_avg")) * 32 > hms * 0.99);
	json_decref(j);
	free(text);
	unlink(path);
	tf_phases_free(p);
}
END_TEST

Suite *suite_phases(void)
{
	Suite *s = suite_create("phases");
	TCase *tc = tcase_create("phases");
	tcase_add_test(tc, off_and_env);
	tcase_add_test(tc, totals_every_64_rounds);
	suite_add_tcase(s, tc);
	return s;
}
