#!/bin/sh
# unit-main.sh FILE...: write the Check runner for tests/unit/check_<m>.c
# files: each defines Suite *suite_<m>(void). Optional argument filters:
# CK_RUN_SUITE / CK_RUN_CASE select suites and cases (Check's own variables).
set -e
echo '#include <check.h>'
echo '#include <stdlib.h>'
for f in "$@"; do m=$(basename "$f" .c); echo "Suite *suite_${m#check_}(void);"; done
echo 'int main(void) {'
echo '	SRunner *sr = srunner_create(NULL);'
for f in "$@"; do m=$(basename "$f" .c); echo "	srunner_add_suite(sr, suite_${m#check_}());"; done
echo '	srunner_run_all(sr, CK_NORMAL);'
echo '	int failed = srunner_ntests_failed(sr);'
echo '	srunner_free(sr);'
echo '	return failed ? EXIT_FAILURE : EXIT_SUCCESS;'
echo '}'
