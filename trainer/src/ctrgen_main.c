// ctrgen_main.c — placeholder of issue 26: ferry-ctrgen's owner replaces
// this file with the command-line tool.
#include <stdio.h>

#include "tr/ctr.h"

int
main(void)
{
	fprintf(stderr, "ferry-ctrgen: not built yet\n");
	return 1;
}
