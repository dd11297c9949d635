// pt.c — helpers shared by the Check suites: unique addresses, free ports.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pt.h"

static atomic_int addr_seq;

char *
pt_addr(char *buf, size_t n, const char *transport)
{
	int seq = atomic_fetch_add(&addr_seq, 1);
	if (strcmp(transport, "tcp") == 0) {
		snprintf(buf, n, "tcp://127.0.0.1:%d", pt_free_port());
	} else if (strcmp(transport, "ipc") == 0) {
		snprintf(buf, n, "ipc:///tmp/ferry-test-%d-%d", (int) getpid(),
		    seq);
	} else {
		snprintf(buf, n, "inproc://ferry-test-%d-%d", (int) getpid(),
		    seq);
	}
	return buf;
}

int
pt_free_port(void)
{
	struct sockaddr_in sa;
	socklen_t          len = sizeof(sa);
	int                fd  = socket(AF_INET, SOCK_STREAM, 0);
	int                port;

	ck_assert_int_ge(fd, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family      = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &sa, &len), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}
