/*
 * A test shim for interop_rdmacm.rs, preloaded in front of rxe's
 * librdmacm: every rdma_connect of the process after its first waits
 * RXE_TEST_CONNECT_DELAY_MS milliseconds, then goes on to the real one.
 *
 * Why: perftest 4.5-0.17's -R connects twice to the same port, the
 * second time right after a handshake that lets the server go on to
 * listen again. Against the kernel in an emulated (TCG) guest that second
 * listen can come after rxe's REQ, which the kernel then refuses (REJ
 * reason 8, invalid service ID), and this perftest's own retry loop reuses
 * what it has just freed. The test retries such a run with this shim: the
 * programs stay as they are, only the second REQ leaves later, as it would
 * from a slower client.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

struct rdma_cm_id;
struct rdma_conn_param;

typedef int (*connect_fn)(struct rdma_cm_id *, struct rdma_conn_param *);

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	static int calls;
	connect_fn next = (connect_fn)dlsym(RTLD_NEXT, "rdma_connect");
	const char *ms = getenv("RXE_TEST_CONNECT_DELAY_MS");

	if (!next)
		return -1;
	if (calls++ > 0 && ms)
		usleep((useconds_t)atoi(ms) * 1000);
	return next(id, param);
}
