/* check.h - the C tests' one assertion: counts a failure, says where, goes on. */
#ifndef GITM_TEST_CHECK_H
#define GITM_TEST_CHECK_H
#include <stdio.h>

static int failures;

#define CHECK(cond, what)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, what);                         \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#endif
