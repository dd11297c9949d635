// ctr_eval.c — placeholder of issue 26 (CTR workload): its owner replaces this
// file with the implementation that tr/ctr.h declares.
#include "tr/ctr.h"
