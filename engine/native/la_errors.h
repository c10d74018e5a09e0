/* la_errors.h: the error-message helper every backend file shares. */
#ifndef LA_ERRORS_H
#define LA_ERRORS_H

#include <stddef.h>

/* la_errorf writes a formatted message into err (always NUL-terminated, when err has room)
 * and returns -1, so a failing path can end with `return la_errorf(err, errlen, "...");`. */
int la_errorf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
