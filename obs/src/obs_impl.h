// obs_impl.h — what obs's files share (not installed): the size limits of
// names and label lists, and the character checks of the text format.
#ifndef OBS_IMPL_H
#define OBS_IMPL_H

#include <stdio.h>

#include "obs/obs.h"

#define OBS_NAME_MAX 96    // a metric name, NUL included
#define OBS_LABELS_MAX 160 // a series' preformatted label list

// obs__alpha reports whether c is an ASCII letter.
static inline int
obs__alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// obs__fmt_double writes v in the fewest digits (15 to 17) that read back
// exactly, as %g does (finite v only).
void obs__fmt_double(char *buf, size_t n, double v);

#endif // OBS_IMPL_H
