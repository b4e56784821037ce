/* Bad input to rxe's rsocket calls from a C program compiled against
 * rdma-core's own rsocket.h: each call fails with -1 and the errno a
 * socket program expects, and nothing crashes. Run under `rxe exec --ip
 * ADDR` with that address in argv[1]. Prints OK at the end. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <rdma/rsocket.h>

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL line %d: ", __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); failures++; } } while (0)
#define FAILS(call, err) (errno = 0, (call) == -1 && errno == (err))

int main(int argc, char **argv)
{
	char buf[16] = { 0 };
	if (argc < 2)
		return 2;
	CHECK(FAILS(rsend(12345, buf, 1, 0), EBADF), "rsend on no socket");
	CHECK(FAILS(rclose(12345), EBADF), "rclose on no socket");
	CHECK(FAILS(rsocket(AF_UNIX, SOCK_STREAM, 0), EAFNOSUPPORT), "AF_UNIX");
	CHECK(FAILS(rsocket(AF_INET, SOCK_DGRAM, 0), EPROTONOSUPPORT), "datagram rsockets");

	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0, "rsocket");
	CHECK(FAILS(rlisten(s, 1), EINVAL), "listen unbound");
	CHECK(FAILS(rrecv(s, buf, sizeof buf, 0), ENOTCONN), "recv unconnected");
	CHECK(FAILS(rshutdown(s, SHUT_RDWR), ENOTCONN), "shutdown unconnected");
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
	CHECK(FAILS(rwritev(s, &iov, 1), ENOTCONN), "writev unconnected");
	CHECK(FAILS(rreadv(s, &iov, -1), EINVAL), "readv with a negative count");
	CHECK(FAILS(rsetsockopt(s, SOL_SOCKET, SO_SNDBUF, buf, 1), EINVAL), "short option value");
	int v = 1;
	CHECK(FAILS(rsetsockopt(s, SOL_SOCKET, SO_BROADCAST, &v, sizeof v), ENOPROTOOPT), "unknown option");
	CHECK(rsetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) == 0, "TCP_NODELAY");
	v = 65536;
	CHECK(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, sizeof v) == 0, "SO_RCVBUF");
	socklen_t len = sizeof v;
	CHECK(rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &len) == 0 && v == 131072, "SO_RCVBUF doubled: %d", v);
	CHECK(rfcntl(s, F_SETFL, O_NONBLOCK) == 0 && (rfcntl(s, F_GETFL) & O_NONBLOCK), "O_NONBLOCK");

	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(19399);
	inet_pton(AF_INET, argv[1], &a.sin_addr);
	CHECK(rbind(s, (struct sockaddr *)&a, sizeof a) == 0, "bind");
	CHECK(FAILS(rbind(s, (struct sockaddr *)&a, sizeof a), EINVAL), "bind twice");
	CHECK(rlisten(s, 4) == 0, "listen");
	CHECK(FAILS(raccept(s, NULL, NULL), EAGAIN), "non-blocking accept with nobody there");
	struct pollfd p = { .fd = s, .events = POLLIN };
	CHECK(rpoll(&p, 1, 10) == 0 && p.revents == 0, "nothing to accept: %d", p.revents);
	CHECK(FAILS(rconnect(s, (struct sockaddr *)&a, sizeof a), EINVAL), "connect a listener");
	CHECK(rclose(s) == 0, "close");
	CHECK(FAILS(rclose(s), EBADF), "close twice");

	/* Nobody listens on this port: refused. */
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	a.sin_port = htons(19398);
	CHECK(FAILS(rconnect(c, (struct sockaddr *)&a, sizeof a), ECONNREFUSED), "connect to no listener");
	CHECK(rclose(c) == 0, "close");
	if (failures)
		return 1;
	printf("OK\n");
	return 0;
}
