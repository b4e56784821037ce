/* A client that exits with its connection up, against rdma-core's own
 * rdma_cma.h: the kernel's CM sends the DREQ after such a program has
 * gone; rxe's, which lives in the process, must send it at exit.
 *
 *   exit_connected server ADDR PORT   accepts one connection, then waits
 *                                     (20 s at most) for its DISCONNECTED
 *                                     event and prints OK
 *   exit_connected client ADDR PORT   connects, then returns from main
 *                                     without rdma_disconnect or any
 *                                     destroy call; prints OK first
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static struct rdma_event_channel *ch;

/* The next CM event within ms milliseconds, acked; -1 if none came. */
static int next_event(int ms, struct rdma_cm_id **id)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	if (poll(&p, 1, ms) != 1)
		return -1;
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		return -1;
	int kind = e->event;
	if (id)
		*id = e->id;
	rdma_ack_cm_event(e);
	return kind;
}

static int expect(int want, int ms, struct rdma_cm_id **id)
{
	int got = next_event(ms, id);
	if (got != want) {
		printf("FAIL: wanted %s, got %s\n", rdma_event_str(want),
		       got < 0 ? "nothing" : rdma_event_str(got));
		exit(1);
	}
	return 0;
}

static void qp_for(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &a)) {
		perror("rdma_create_qp");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	struct sockaddr_in sin;
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(atoi(argv[3]));
	if (inet_pton(AF_INET, argv[2], &sin.sin_addr) != 1)
		return 2;
	ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof cp);
	cp.retry_count = 7;
	if (!strcmp(argv[1], "server")) {
		if (rdma_bind_addr(id, (struct sockaddr *)&sin) || rdma_listen(id, 1)) {
			perror("listen");
			return 1;
		}
		struct rdma_cm_id *child;
		expect(RDMA_CM_EVENT_CONNECT_REQUEST, 20000, &child);
		qp_for(child);
		if (rdma_accept(child, &cp)) {
			perror("rdma_accept");
			return 1;
		}
		expect(RDMA_CM_EVENT_ESTABLISHED, 20000, NULL);
		/* The client exits now; its DREQ must still come. */
		expect(RDMA_CM_EVENT_DISCONNECTED, 20000, NULL);
		rdma_destroy_qp(child);
		rdma_destroy_id(child);
		rdma_destroy_id(id);
		rdma_destroy_event_channel(ch);
	} else {
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000))
			return 1;
		expect(RDMA_CM_EVENT_ADDR_RESOLVED, 5000, NULL);
		if (rdma_resolve_route(id, 2000))
			return 1;
		expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 5000, NULL);
		qp_for(id);
		if (rdma_connect(id, &cp)) {
			perror("rdma_connect");
			return 1;
		}
		expect(RDMA_CM_EVENT_ESTABLISHED, 20000, NULL);
	}
	printf("OK\n");
	return 0;
}
